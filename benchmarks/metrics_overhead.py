"""What ``GET /metrics`` costs the file source and sink paths: the same runs with the task
counters live and with them switched off (no-op methods), alternating, medians compared.

Two ratios are printed for each path, with metrics ÷ without (≥ 0.97 is the goal; printed, never
asserted):

- throughput: the median wall-clock rates. On two shared cores a round varies by ±30 %, mostly
  in how soon the consumer joins its group and the broker answers, so this one is noisy;
- CPU: what the benchmark's process (the worker, its tasks and their Kafka clients; the broker
  is another process) spent per record, without ÷ with. Slow rounds poll in smaller batches and
  spend more CPU per record, so this one is noisy too;
- measured share: one more run per path times every call of the counting code itself (its
  clock reads included) against the CPU the run took; ``1 - share`` bounds the ratio from below
  without the rounds' noise.

Run: ``python -m benchmarks.metrics_overhead`` (``SLUICE_BENCH_RECORDS`` to change the count).
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import (
    RECORD_BYTES,
    RECORDS,
    ROUNDS,
    Result,
    broker,
    make_lines,
    median_result,
    tmpdir,
    write_file,
)
from benchmarks.file_sink import fill_topic, sluice_sink
from benchmarks.file_source import sluice_source
from sluice.worker.observability.task_metrics import TaskMetrics
from sluice.worker.runners.base import WorkerTask
from sluice.worker.runners.sink import SinkTaskRunner
from sluice.worker.runtime import tune_gc


@contextmanager
def metrics_off() -> Iterator[None]:
    """The runners' per-batch counting and the sink's lag parsing replaced by no-ops."""
    saved: list[tuple[type, str, Any]] = [
        (TaskMetrics, "batch", TaskMetrics.batch),
        (TaskMetrics, "committed", TaskMetrics.committed),
        (SinkTaskRunner, "_on_kafka_stats", SinkTaskRunner._on_kafka_stats),
    ]
    TaskMetrics.batch = lambda self, *args: None  # type: ignore[method-assign]
    TaskMetrics.committed = lambda self, *args, **kwargs: None  # type: ignore[method-assign]
    SinkTaskRunner._on_kafka_stats = WorkerTask._on_kafka_stats  # type: ignore[method-assign]
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


_COUNTING = (
    (TaskMetrics, "batch"),
    (TaskMetrics, "committed"),
    (TaskMetrics, "ask_task"),
    (SinkTaskRunner, "_on_kafka_stats"),
)


@contextmanager
def metrics_timed(spent: list[float]) -> Iterator[None]:
    """The counting code as it runs, with the time of each call added to ``spent[0]`` and the
    calls counted in ``spent[1]``."""
    clock = time.perf_counter
    saved = [(owner, name, getattr(owner, name)) for owner, name in _COUNTING]

    def timed(original: Callable[..., None]) -> Callable[..., None]:
        def call(*args: Any, **kwargs: Any) -> None:
            start = clock()
            original(*args, **kwargs)
            spent[0] += clock() - start
            spent[1] += 1

        return call

    for owner, name, original in saved:
        setattr(owner, name, timed(original))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def _share(name: str, run: Callable[[], Result]) -> float:
    """The share of a run's CPU the counting code took."""
    spent = [0.0, 0.0]
    with metrics_timed(spent):
        result, cpu = _timed(run)
    cpu_s = cpu * result.records / 1e6
    print(f"  {name}: {spent[1]:,.0f} calls of the counting code took {spent[0] * 1e3:.2f} ms of {cpu_s:.2f} CPU-s")
    return spent[0] / cpu_s


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(run: Callable[[], Result]) -> tuple[Result, float]:
    """A run and the CPU-seconds this process spent per million records in it."""
    before = _cpu_seconds()
    result = run()
    return result, (_cpu_seconds() - before) * 1e6 / result.records


def _alternate(name: str, run: Callable[[], Result]) -> tuple[float, float, float]:
    """(throughput ratio, CPU ratio) of ROUNDS alternating runs, metrics on ÷ off, and the share
    of the CPU the counting code took."""
    on, off, cpu_on, cpu_off = [], [], [], []
    for _ in range(ROUNDS):
        result, cpu = _timed(run)
        on.append(result)
        cpu_on.append(cpu)
        with metrics_off():
            result, cpu = _timed(run)
        off.append(result)
        cpu_off.append(cpu)
    for i, (a, b, ca, cb) in enumerate(zip(on, off, cpu_on, cpu_off), 1):
        print(
            f"  {name} round {i}: on {a.rate:>10,.0f} rec/s {ca:5.2f} CPU-s/M   "
            f"off {b.rate:>10,.0f} rec/s {cb:5.2f} CPU-s/M   ratio {a.rate / b.rate:.3f} / CPU {cb / ca:.3f}"
        )
    rate = median_result(on).rate / median_result(off).rate
    cpu = statistics.median(cpu_off) / statistics.median(cpu_on)
    return rate, cpu, _share(name, run)


def main() -> dict[str, float]:
    tune_gc()
    lines = make_lines(RECORDS)
    nbytes = sum(map(len, lines))
    print(f"metrics overhead: {RECORDS:,} records of {RECORD_BYTES} bytes, {ROUNDS} rounds each way")
    ratios: dict[str, tuple[float, float, float]] = {}
    with broker() as bootstrap, tmpdir() as d:
        path = write_file(lines, Path(d))
        sluice_source(bootstrap, lines[: len(lines) // 5], path)  # warm-up
        ratios["file source"] = _alternate("source", lambda: sluice_source(bootstrap, lines, path))
        topic = fill_topic(bootstrap, lines)
        counter = iter(range(10**6))
        ratios["file sink"] = _alternate(
            "sink", lambda: sluice_sink(bootstrap, topic, len(lines), nbytes, Path(d) / f"out-{next(counter)}.txt")
        )
    for name, (rate, cpu, share) in ratios.items():
        print(
            f"{name}: with metrics ÷ without: throughput {rate:.3f}, CPU per record {cpu:.3f}; "
            f"the counting code's share of the CPU {share:.5%} (ratio ≥ {1 - share:.4f})"
        )
    return {name: rate for name, (rate, _, _) in ratios.items()}


if __name__ == "__main__":
    main()
