"""How one connector's throughput scales with tasks and workers in distributed mode.

A SequenceSource writes JSON values (~200 bytes) into a 4-partition topic as fast as it can,
with 1, 2 and 4 tasks spread over clusters of 1 and 2 ``sluice distributed`` worker processes on
this machine. The rate is the steady state: the topic's growth (its partitions' end offsets) over
``SLUICE_BENCH_WINDOW_S`` seconds (10) once every task runs, after a 2 s warm-up. The raw limit in
the same run is bare confluent-kafka producing ``SLUICE_BENCH_RECORDS`` pre-serialized records
from one process.

Ratios printed: each configuration against 1 worker × 1 task (scaling), and against the bare
producer. On a 2-core machine that also hosts the broker, expect threads in one worker to add
little (the GIL) and a second worker process to add what the second core has left.

    python -m benchmarks.distributed_scaling
    SLUICE_BENCH_WINDOW_S=5 python -m benchmarks.distributed_scaling
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import cast

import httpx
import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.common import RECORDS, Result, broker, create_topic

PARTITIONS = 4
WINDOW_S = float(os.environ.get("SLUICE_BENCH_WINDOW_S", "10"))
WARMUP_S = 2.0
REPO = Path(__file__).resolve().parents[1]
PAYLOAD = 150  # filler bytes: each JSON value is about 200 bytes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_workers(bootstrap: str, count: int, workdir: Path, executor: str = "thread") -> list[tuple[subprocess.Popen[bytes], str]]:
    group = f"bench-{uuid.uuid4().hex[:8]}"
    workers = []
    for i in range(count):
        port = _free_port()
        props = workdir / f"{group}-{i}.properties"
        props.write_text(
            "\n".join(
                [
                    f"bootstrap.servers={bootstrap}",
                    f"group.id={group}",
                    f"config.storage.topic={group}-configs",
                    f"offset.storage.topic={group}-offsets",
                    f"status.storage.topic={group}-status",
                    "config.storage.replication.factor=1",
                    "offset.storage.replication.factor=1",
                    "status.storage.replication.factor=1",
                    f"listeners=http://127.0.0.1:{port}",
                    f"task.executor={executor}",
                    "session.timeout.ms=6000",
                    "heartbeat.interval.ms=1000",
                    "key.converter=org.apache.kafka.connect.storage.StringConverter",
                    "value.converter=org.apache.kafka.connect.json.JsonConverter",
                    "value.converter.schemas.enable=false",
                ]
            )
        )
        log = (workdir / f"{group}-{i}.log").open("wb")  # read back if the worker dies
        proc = subprocess.Popen([sys.executable, "-m", "sluice.cli", "distributed", str(props)], stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        workers.append((proc, f"http://127.0.0.1:{port}"))
    for proc, url in workers:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                log_text = Path(cast(list[str], proc.args)[-1].replace(".properties", ".log")).read_text(errors="replace")[-3000:]
                raise RuntimeError(f"worker {url} exited with {proc.returncode}:\n{log_text}")
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"worker {url} did not become healthy")
            time.sleep(0.2)
    return workers


def _stop(workers: list[tuple[subprocess.Popen[bytes], str]]) -> None:
    for proc, _ in workers:
        proc.terminate()
    for proc, _ in workers:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _create(url: str, name: str, config: dict[str, str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        response = httpx.put(f"{url}/connectors/{name}/config", json=config, timeout=30)
        if response.status_code in (200, 201):
            return
        if response.status_code != 409 or time.monotonic() > deadline:
            raise RuntimeError(f"cannot create {name}: {response.status_code} {response.text}")
        time.sleep(0.25)


def _end_offsets(consumer: Consumer, topic: str) -> int:
    return sum(
        consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(PARTITIONS)
    )


def _wait_running(url: str, tasks: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        response = httpx.get(f"{url}/connectors/seq/status", timeout=10)
        if response.status_code == 200:
            body = response.json()
            if len(body["tasks"]) == tasks and all(t["state"] == "RUNNING" for t in body["tasks"]):
                return
        time.sleep(0.2)
    raise RuntimeError(f"the connector's {tasks} tasks did not all run within {timeout:.0f}s")


def run_config(bootstrap: str, workers: int, tasks: int, seconds: float, workdir: Path, executor: str = "thread") -> Result:
    """Steady-state rate: the topic's growth over ``seconds`` once every task runs (plus a warm-up)."""
    topic = create_topic(bootstrap, f"bench-scale-{uuid.uuid4().hex[:8]}", PARTITIONS)
    procs = _start_workers(bootstrap, workers, workdir, executor)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        _create(
            procs[0][1],
            "seq",
            {
                "connector.class": "SequenceSource",
                "tasks.max": str(tasks),
                "topic": topic,
                "sequence.batch.size": "2000",
                "payload.bytes": str(PAYLOAD),
            },
        )
        _wait_running(procs[0][1], tasks)
        time.sleep(WARMUP_S)
        first, start = _end_offsets(consumer, topic), time.monotonic()
        time.sleep(seconds)
        records, elapsed = _end_offsets(consumer, topic) - first, time.monotonic() - start
    finally:
        consumer.close()
        _stop(procs)
    sample = orjson.dumps({"task": 0, "seq": 123456, "payload": "x" * PAYLOAD})
    where = "" if executor == "thread" else f", {executor} per task"
    return Result(f"{workers} worker(s) x {tasks} task(s){where}", records, len(sample) * records, elapsed)


#: (workers, tasks, task.executor) of each measured configuration.
CONFIGS = [(w, t, "thread") for w in (1, 2) for t in (1, 2, 4)] + [(1, 2, "process"), (1, 4, "process")]


def bare(bootstrap: str, total: int) -> Result:
    topic = create_topic(bootstrap, f"bench-scale-raw-{uuid.uuid4().hex[:8]}", PARTITIONS)
    values = [orjson.dumps({"task": 0, "seq": n, "payload": "x" * PAYLOAD}) for n in range(total)]
    keys = [f"0-{n}".encode() for n in range(total)]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "none", "enable.idempotence": True})
    start = time.monotonic()
    produce = producer.produce
    for key, value in zip(keys, values):
        while True:
            try:
                produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    seconds = time.monotonic() - start
    return Result("bare confluent-kafka (1 process)", total, sum(map(len, values)), seconds)


def main() -> list[tuple[Result, Result]]:
    total = RECORDS
    print(
        f"\nDistributed scaling: SequenceSource into {PARTITIONS} partitions, steady state over {WINDOW_S:.0f}s per "
        f"configuration; bare producer: {total:,} records"
    )
    results: list[Result] = []
    with broker() as bootstrap, tempfile.TemporaryDirectory() as tmp:
        raw = bare(bootstrap, total)
        print(raw.line())
        for workers, tasks, executor in CONFIGS:
            result = run_config(bootstrap, workers, tasks, WINDOW_S, Path(tmp), executor)
            results.append(result)
            print(result.line(raw))
    base = results[0]
    print("\nScaling (rate ÷ 1 worker × 1 task; and ÷ bare producer):")
    for r in results:
        print(f"  {r.name:<44} {r.rate:>10,.0f} rec/s   x{r.rate / base.rate:4.2f}   vs bare {r.rate / raw.rate:4.2f}")
    return [(raw, r) for r in results]


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
