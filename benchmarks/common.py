"""Shared set-up for the benchmarks: a broker, a data file, an in-process herder, a results table."""

from __future__ import annotations

import contextlib
import os
import re
import resource
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.deploy.kafka_stack import KafkaBroker, ensure_kafka_jars, ensure_kafka_tools_jars, find_java
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.worker.config.models import WorkerConfig
from sluice.worker.runtime import tune_gc
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.worker import Worker

RECORDS = int(os.environ.get("SLUICE_BENCH_RECORDS", "1000000"))
ROUNDS = int(os.environ.get("SLUICE_BENCH_ROUNDS", "5"))
RECORD_BYTES = 200


@dataclass
class Result:
    name: str
    records: int
    bytes: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def mb_s(self) -> float:
        return self.bytes / self.seconds / 1e6

    def line(self, baseline: Result | None = None) -> str:
        ratio = f"  ratio {self.rate / baseline.rate:.2f}" if baseline is not None else ""
        return f"{self.name:<42} {self.records:>9,} rec in {self.seconds:6.2f}s  {self.rate:>10,.0f} rec/s  {self.mb_s:7.1f} MB/s{ratio}"


@contextlib.contextmanager
def broker() -> Iterator[str]:
    """A bootstrap address: $SLUICE_BENCH_BOOTSTRAP, or a fresh local broker for this run.

    The fresh broker runs with C1 only (``-XX:TieredStopAtLevel=1``). A broker that has served
    traffic for days has long finished compiling; a fresh one keeps its C2 compiler busy for
    minutes, and on this 2-core machine that CPU lands in whatever run happens to be timed.
    Measured while a consumer read 1M records, repeated over 5-7 rounds: the tiered broker used
    0.35-1.07 CPU s per round, 0.10-0.46 s of it in its compiler threads; C1 only used 0.2-0.3 s,
    with its request handlers no slower (0.10-0.18 s against 0.10-0.32 s). The raw baselines
    (bare COPY, bare boto3, ...) never touch the broker, so this noise only ever counted against
    Sluice. ``SLUICE_BENCH_BROKER_TIERED=1`` keeps the JVM default.
    """
    if os.environ.get("SLUICE_BENCH_BOOTSTRAP"):
        yield os.environ["SLUICE_BENCH_BOOTSTRAP"]
        return
    jvm = () if os.environ.get("SLUICE_BENCH_BROKER_TIERED") == "1" else ("-XX:TieredStopAtLevel=1",)
    with KafkaBroker(num_partitions=1, heap_max="1g", kill_with_parent=True, jvm_options=jvm) as kafka:
        yield kafka.bootstrap_servers


def producer_performance(
    bootstrap: str, topic: str, payload_file: Path, records: int, settings: Mapping[str, str]
) -> tuple[float, float]:
    """Kafka's own load generator (``ProducerPerformance``, Kafka's Java producer, nothing else)
    writing ``records`` values picked from ``payload_file`` (one per line) to ``topic``.

    Returns the rate it reports (records/s, its JVM's start excluded) and the CPU seconds its JVM
    used, start and JIT included. The kafka-tools jar is fetched once from Maven Central.
    """
    classpath = f"{ensure_kafka_tools_jars()}/*:{ensure_kafka_jars()}/*"
    props = [f"bootstrap.servers={bootstrap}", *(f"{k}={v}" for k, v in settings.items())]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [find_java(), "-Xmx1g", "-cp", classpath, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
         "--num-records", str(records), "--throughput", "-1", "--payload-file", str(payload_file),
         "--producer-props", *props],
        capture_output=True, text=True, check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = re.search(r"^\d+ records sent, ([\d.]+) records/sec", done.stdout, re.MULTILINE)
    if done.returncode != 0 or summary is None:
        raise RuntimeError(f"ProducerPerformance failed (exit {done.returncode}): {(done.stderr or done.stdout)[-2000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return float(summary.group(1)), cpu


def make_lines(count: int = RECORDS) -> list[bytes]:
    """``count`` distinct lines of about RECORD_BYTES bytes (newline excluded)."""
    filler = ("abcdefghijklmnopqrstuvwxyz0123456789" * 8)[: RECORD_BYTES - 20]
    return [f"{i:012d} {filler}".encode()[:RECORD_BYTES] for i in range(count)]


def write_file(lines: list[bytes], directory: Path) -> Path:
    path = directory / "input.txt"
    with path.open("wb") as f:
        f.write(b"\n".join(lines) + b"\n")
    return path


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)]).values():
        fut.result(30)
    return name


def high_watermark(bootstrap: str, topic: str, partitions: int = 1) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        return sum(consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    finally:
        consumer.close()


def herder(bootstrap: str, **settings: Any) -> StandaloneHerder:
    config = WorkerConfig.from_mapping(
        {
            "bootstrap.servers": bootstrap,
            "listeners": "http://127.0.0.1:0",
            "offset.flush.interval.ms": "5000",
            "key.converter": "StringConverter",
            "value.converter": "StringConverter",
            # The benchmarks' files live in their temporary directories; tasks run in this process.
            "connector.allowed.paths": "*",
            **settings,
        }
    )
    h = StandaloneHerder(Worker(config, PluginRegistry(), MemoryOffsetStore()))
    h.start()
    tune_gc()  # as `sluice standalone` does after start-up
    return h


def tmpdir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="sluice-bench-")


def wait_until(predicate: Any, timeout: float, poll: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark did not finish in time")
        time.sleep(poll)


def median_result(results: list[Result]) -> Result:
    """The run with the median rate (runs on 2 shared cores vary by ±30 %)."""
    ordered = sorted(results, key=lambda r: r.rate)
    return ordered[len(ordered) // 2]


def compare(name: str, raw_runs: list[Result], our_runs: list[Result]) -> tuple[Result, Result]:
    """Print every run and the medians; return the median raw and Sluice results."""
    for i, (raw, ours) in enumerate(zip(raw_runs, our_runs), 1):
        print(f"  round {i}: raw {raw.rate:>10,.0f} rec/s   sluice {ours.rate:>10,.0f} rec/s   ratio {ours.rate / raw.rate:.2f}")
    raw, ours = median_result(raw_runs), median_result(our_runs)
    print(raw.line())
    print(ours.line(raw))
    return raw, ours


def cpu_seconds() -> float:
    """CPU seconds this process has used, every thread included (ended ones too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def thread_times() -> dict[int, tuple[str, float]]:
    """CPU seconds of each live thread of this process by native id, with its name (Linux ``/proc``;
    empty elsewhere)."""
    out: dict[int, tuple[str, float]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out
