"""What ``GET /metrics`` costs the file source and sink paths: the same runs with the task
counters live and with them switched off (no-op methods), alternating, medians compared.

Run: ``python -m benchmarks.metrics_overhead`` (``SLUICE_BENCH_RECORDS`` to change the count).
The ratio with ÷ without should be ≥ 0.97; it is printed, never asserted (runs on shared cores vary).
"""

from __future__ import annotations

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
from sluice.worker.runners.base import WorkerTask
from sluice.worker.runners.sink import SinkTaskRunner
from sluice.worker.runtime import tune_gc
from sluice.worker.task_metrics import TaskMetrics


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


def _alternate(run: Callable[[], Result]) -> tuple[Result, Result]:
    on, off = [], []
    for _ in range(ROUNDS):
        on.append(run())
        with metrics_off():
            off.append(run())
    for i, (a, b) in enumerate(zip(on, off), 1):
        print(f"  round {i}: metrics on {a.rate:>10,.0f} rec/s   off {b.rate:>10,.0f} rec/s   ratio {a.rate / b.rate:.3f}")
    return median_result(on), median_result(off)


def main() -> dict[str, float]:
    tune_gc()
    lines = make_lines(RECORDS)
    nbytes = sum(map(len, lines))
    print(f"metrics overhead: {RECORDS:,} records of {RECORD_BYTES} bytes, {ROUNDS} rounds each way")
    ratios: dict[str, float] = {}
    with broker() as bootstrap, tmpdir() as d:
        path = write_file(lines, Path(d))
        sluice_source(bootstrap, lines[: len(lines) // 5], path)  # warm-up
        on, off = _alternate(lambda: sluice_source(bootstrap, lines, path))
        ratios["file source"] = on.rate / off.rate
        topic = fill_topic(bootstrap, lines)
        counter = iter(range(10**6))
        on, off = _alternate(lambda: sluice_sink(bootstrap, topic, len(lines), nbytes, Path(d) / f"out-{next(counter)}.txt"))
        ratios["file sink"] = on.rate / off.rate
    for name, ratio in ratios.items():
        print(f"{name}: throughput with metrics ÷ without = {ratio:.3f}")
    return ratios


if __name__ == "__main__":
    main()
