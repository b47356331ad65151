"""FileStreamSource → topic, against bare confluent-kafka producing the same bytes to the same broker.

Run: ``python -m benchmarks.file_source`` (``SLUICE_BENCH_RECORDS`` to change the count).
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer

from benchmarks.common import (
    RECORD_BYTES,
    RECORDS,
    ROUNDS,
    Result,
    broker,
    compare,
    create_topic,
    herder,
    high_watermark,
    make_lines,
    tmpdir,
    wait_until,
    write_file,
)
from sluice.worker.execution.clients import SOURCE_PRODUCER_DEFAULTS
from sluice.worker.runtime import tune_gc


def raw_produce(bootstrap: str, lines: list[bytes]) -> Result:
    """The raw limit: one producer with Sluice's source-producer settings, a tight produce() loop, flush."""
    topic = create_topic(bootstrap, f"bench-raw-{time.time_ns()}")
    producer = Producer({"bootstrap.servers": bootstrap, **SOURCE_PRODUCER_DEFAULTS})
    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for i, line in enumerate(lines):
        while True:
            try:
                produce(topic, line)
                break
            except BufferError:
                poll(0.05)
        if i % 10_000 == 0:
            poll(0)
    producer.flush()
    elapsed = time.perf_counter() - start
    assert high_watermark(bootstrap, topic) == len(lines)
    return Result("bare confluent-kafka produce()", len(lines), sum(map(len, lines)), elapsed)


def sluice_source(bootstrap: str, lines: list[bytes], path: Path) -> Result:
    """FileStreamSource in a standalone herder; done when every record is in the topic."""
    topic = create_topic(bootstrap, f"bench-src-{time.time_ns()}")
    h = herder(bootstrap)
    try:
        start = time.perf_counter()
        h.put_connector_config(
            f"bench-source-{time.time_ns()}",
            {"connector.class": "FileStreamSource", "file": str(path), "topic": topic, "batch.size": "10000"},
            allow_replace=False,
        )
        wait_until(lambda: high_watermark(bootstrap, topic) >= len(lines), timeout=600, poll=0.02)
        elapsed = time.perf_counter() - start
    finally:
        h.stop()
    return Result("Sluice FileStreamSource → topic", len(lines), sum(map(len, lines)), elapsed)


def main() -> list[tuple[Result, Result]]:
    tune_gc()  # the raw baseline runs under the same collector settings as the worker
    lines = make_lines(RECORDS)
    print(f"file source → topic: {RECORDS:,} records of {RECORD_BYTES} bytes, {ROUNDS} rounds")
    with broker() as bootstrap, tmpdir() as d:
        path = write_file(lines, Path(d))
        raw_produce(bootstrap, lines[: len(lines) // 5])  # warm-up: the broker's JIT and page cache
        raws, ours = [], []
        for _ in range(ROUNDS):
            raws.append(raw_produce(bootstrap, lines))
            ours.append(sluice_source(bootstrap, lines, path))
        return [compare("file source", raws, ours)]


if __name__ == "__main__":
    main()
