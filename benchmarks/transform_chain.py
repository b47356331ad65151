"""The cost of a three-transform chain: topic → FileStreamSink with and without transforms, same run.

Both pipelines consume the same topic of JSON rows (JsonConverter, schemas disabled) from the same
broker and write each value as a JSON line. The transformed one adds::

    transforms=drop,add,route
    transforms.drop.type=ReplaceField$Value     (exclude=note)
    transforms.add.type=InsertField$Value       (static.field=origin, static.value=bench)
    transforms.route.type=RegexRouter           ((.*) → routed-$1)

The ratio (transformed rate / plain rate) is the chain's cost; the target is ≥ 0.8. The CPU ratio
(plain CPU seconds / transformed CPU seconds of this process, same records) says the same with
less noise on a shared machine, where the wall clock also measures the neighbours. Each run ends
when the output file holds every record (its expected size is computed up front from the same
rows). Run: ``python -m benchmarks.transform_chain`` (``SLUICE_BENCH_RECORDS``,
``SLUICE_BENCH_ROUNDS``). Prints figures and ratios; asserts nothing about time.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from benchmarks.common import RECORDS, ROUNDS, Result, broker, create_topic, herder, tmpdir, wait_until
from sluice.connectors.sink.file.task import render_value
from sluice.worker.runtime import tune_gc

CHAIN = {
    "transforms": "drop,add,route",
    "transforms.drop.type": "org.apache.kafka.connect.transforms.ReplaceField$Value",
    "transforms.drop.exclude": "note",
    "transforms.add.type": "org.apache.kafka.connect.transforms.InsertField$Value",
    "transforms.add.static.field": "origin",
    "transforms.add.static.value": "bench",
    "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
    "transforms.route.regex": "(.*)",
    "transforms.route.replacement": "routed-$1",
}


def make_rows(count: int) -> list[dict[str, Any]]:
    """Rows of about 200 bytes of JSON each (the ``note`` field is the one ReplaceField drops)."""
    pad = "abcdefghijklmnopqrstuvwxyz0123456789" * 2
    return [
        {"id": i, "customer": f"customer-{i % 5000:05d}", "amount": i * 0.25, "paid": i % 3 == 0, "note": pad}
        for i in range(count)
    ]


def expected_size(rows: list[dict[str, Any]], transformed: bool) -> int:
    """Bytes the file sink writes for ``rows`` (one rendered value and a newline each)."""
    total = 0
    for row in rows:
        if transformed:
            row = {k: v for k, v in row.items() if k != "note"}
            row["origin"] = "bench"
        total += len(render_value(row).encode()) + 1
    return total


def fill_topic(bootstrap: str, rows: list[dict[str, Any]]) -> tuple[str, int]:
    topic = create_topic(bootstrap, f"bench-smt-{time.time_ns()}")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    nbytes = 0
    for row in rows:
        value = orjson.dumps(row)
        nbytes += len(value)
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush()
    return topic, nbytes


def run_sink(
    bootstrap: str, topic: str, count: int, nbytes: int, out: Path, size: int, chain: bool
) -> tuple[Result, float]:
    """FileStreamSink in a standalone herder; done when the file holds every record. Returns the
    result and the CPU seconds the process used meanwhile (every worker thread, librdkafka's too):
    on a shared machine the CPU ratio is steadier than the wall-clock one."""
    h = herder(bootstrap, **{"value.converter": "JsonConverter", "value.converter.schemas.enable": "false"})
    config = {"connector.class": "FileStreamSink", "file": str(out), "topics": topic, **(CHAIN if chain else {})}
    try:
        start, cpu_start = time.perf_counter(), time.process_time()
        h.put_connector_config(f"bench-smt-{time.time_ns()}", config, allow_replace=False)
        wait_until(lambda: out.exists() and out.stat().st_size >= size, timeout=600, poll=0.05)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    finally:
        h.stop()
    actual = out.stat().st_size
    out.unlink()
    if actual != size:
        raise AssertionError(f"output has {actual} bytes, expected {size}")
    name = "topic → 3 SMTs → FileStreamSink" if chain else "topic → FileStreamSink (no SMTs)"
    return Result(name, count, nbytes, elapsed), cpu


def main() -> list[tuple[Result, Result]]:
    tune_gc()
    rows = make_rows(RECORDS)
    plain_size, chain_size = expected_size(rows, False), expected_size(rows, True)
    print(f"transform chain: {RECORDS:,} JSON records, ReplaceField + InsertField + RegexRouter, {ROUNDS} rounds")
    with broker() as bootstrap, tmpdir() as d:
        topic, nbytes = fill_topic(bootstrap, rows)
        del rows
        # Warm-up, not counted: the broker's first read of the log and the first group join are slow.
        run_sink(bootstrap, topic, RECORDS, nbytes, Path(d) / "warm-up.txt", plain_size, False)
        plains: list[Result] = []
        chains: list[Result] = []
        cpu_ratios: list[float] = []
        for i in range(ROUNDS):
            # Alternate the order so neither side always gets the warmer broker cache.
            first_chain = i % 2 == 1
            cpu: dict[bool, float] = {}
            for chain in (first_chain, not first_chain):
                size = chain_size if chain else plain_size
                result, cpu[chain] = run_sink(bootstrap, topic, RECORDS, nbytes, Path(d) / f"out-{i}-{chain}.txt", size, chain)
                (chains if chain else plains).append(result)
            cpu_ratios.append(cpu[False] / cpu[True])
            print(
                f"  round {i + 1}: plain {plains[-1].rate:>10,.0f} rec/s   chain {chains[-1].rate:>10,.0f} rec/s"
                f"   ratio {chains[-1].rate / plains[-1].rate:.2f}   CPU s plain {cpu[False]:.2f} chain {cpu[True]:.2f}"
                f"   CPU ratio {cpu_ratios[-1]:.2f}"
            )
        ratios = sorted(c.rate / p.rate for c, p in zip(chains, plains))
        plain = sorted(plains, key=lambda r: r.rate)[len(plains) // 2]
        chained = sorted(chains, key=lambda r: r.rate)[len(chains) // 2]
        print(plain.line())
        print(chained.line(plain))
        print(
            f"median per-round ratio {ratios[len(ratios) // 2]:.2f}, "
            f"median CPU ratio {sorted(cpu_ratios)[len(cpu_ratios) // 2]:.2f} (target ≥ 0.8)"
        )
        return [(plain, chained)]


if __name__ == "__main__":
    main()
