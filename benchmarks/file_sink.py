"""topic → FileStreamSink, against bare confluent-kafka consuming the same bytes from the same broker.

Run: ``python -m benchmarks.file_sink`` (``SLUICE_BENCH_RECORDS`` to change the count).
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Consumer, Producer

from benchmarks.common import (
    RECORD_BYTES,
    RECORDS,
    ROUNDS,
    Result,
    broker,
    compare,
    create_topic,
    herder,
    make_lines,
    tmpdir,
    wait_until,
)
from sluice.worker.execution.clients import SINK_CONSUMER_DEFAULTS
from sluice.worker.runtime import tune_gc


def fill_topic(bootstrap: str, lines: list[bytes]) -> str:
    topic = create_topic(bootstrap, f"bench-sink-{time.time_ns()}")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    for line in lines:
        while True:
            try:
                producer.produce(topic, line)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush()
    return topic


def raw_consume(bootstrap: str, topic: str, count: int) -> Result:
    """The raw limit: a subscribed consumer with Sluice's sink settings draining the topic."""
    consumer = Consumer({"bootstrap.servers": bootstrap, **SINK_CONSUMER_DEFAULTS, "group.id": f"bench-raw-{time.time_ns()}"})
    start = time.perf_counter()
    consumer.subscribe([topic])
    seen = 0
    nbytes = 0
    while seen < count:
        for m in consumer.consume(2000, timeout=1.0):
            if m.error() is None:
                seen += 1
                nbytes += len(m.value() or b"")
    elapsed = time.perf_counter() - start
    consumer.close()
    return Result("bare confluent-kafka consume()", seen, nbytes, elapsed)


def sluice_sink(bootstrap: str, topic: str, count: int, nbytes: int, out: Path) -> Result:
    """FileStreamSink in a standalone herder; done when the file holds every record."""
    expected_size = nbytes + count  # one newline per record
    h = herder(bootstrap)
    try:
        start = time.perf_counter()
        h.put_connector_config(
            f"bench-sink-{time.time_ns()}",
            {"connector.class": "FileStreamSink", "file": str(out), "topics": topic},
            allow_replace=False,
        )
        wait_until(lambda: out.exists() and out.stat().st_size >= expected_size, timeout=600, poll=0.005)
        elapsed = time.perf_counter() - start
    finally:
        h.stop()
    assert out.stat().st_size == expected_size
    out.unlink()  # 200 MB of dirty pages left behind would slow the next round's writes
    return Result("Sluice topic → FileStreamSink", count, nbytes, elapsed)


def main() -> list[tuple[Result, Result]]:
    tune_gc()  # the raw baseline runs under the same collector settings as the worker
    lines = make_lines(RECORDS)
    nbytes = sum(map(len, lines))
    print(f"topic → file sink: {RECORDS:,} records of {RECORD_BYTES} bytes, {ROUNDS} rounds")
    with broker() as bootstrap, tmpdir() as d:
        topic = fill_topic(bootstrap, lines)
        raw_consume(bootstrap, topic, len(lines))  # warm-up: the broker's first read of a log is slower
        raws, ours = [], []
        for i in range(ROUNDS):
            raws.append(raw_consume(bootstrap, topic, len(lines)))
            ours.append(sluice_sink(bootstrap, topic, len(lines), nbytes, Path(d) / f"out-{i}.txt"))
        return [compare("file sink", raws, ours)]


if __name__ == "__main__":
    main()
