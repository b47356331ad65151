"""Sluice's MariaDB binlog CDC source beside Debezium's MariaDB connector, on the same server and broker.

Run: ``python -m benchmarks.binlog_cdc``. Size: ``SLUICE_BENCH_RECORDS`` inserted rows per round
(200,000), in transactions of ``SLUICE_BENCH_BINLOG_TXN_ROWS`` rows (100: what an application's
batch writes look like, between one-row OLTP commits and bulk loads); ``SLUICE_BENCH_ROUNDS``
rounds (5), medians reported. ``SLUICE_BENCH_PROFILE=<file>`` also samples Sluice's worker with
``py-spy`` (``pip install py-spy``; every thread of every process of its tree, Python frames
only) during its runs, writes the collapsed stacks to that file and prints the functions that cost
the most samples. Prints, with no
assertions, for each system and round: changes/s, CPU seconds of its worker's process tree, µs of
CPU per change, and the ratios Sluice ÷ Debezium (issue #41's target: at least 3× Debezium's
changes per CPU-second).

The systems, real worker processes started once for the whole run and idle between runs: a
``sluice standalone`` worker (tasks in its task host processes, as the CLI runs them) running the
binlog source as ``io.debezium.connector.mariadb.MariaDbConnector``, and Kafka Connect 4.x
(``ConnectDistributed``, the JVM's default JIT) with ``debezium-connector-mariadb`` 3.5.0 from
Maven Central (:class:`tests.services.debezium.DebeziumConnect`). One private MariaDB (Debian's
``mariadbd``, :class:`tests.services.mariadb.MariaDbServer`) with the binary log CDC reads: row
format, full images and metadata, GTIDs.

Both connectors get the same configuration but their topic prefix and replica server id:
``snapshot.mode=no_data``, one table and a ``ping`` table captured, ``JsonConverter`` with schemas
for keys and values, Debezium's schema history in a topic (Sluice accepts those keys), the
defaults for everything else. Per round:

1. a fresh table of twelve columns (``BIGINT`` key, ``INT``, ``SMALLINT``, ``TINYINT(1)``,
   ``DECIMAL(12,2)``, two ``VARCHAR``, ``DATETIME(6)``, ``TIMESTAMP``, ``DOUBLE``, ``TEXT``, a nullable
   ``DATE`` a quarter null);
2. both connectors are created and pinged (a ``ping`` row inserted until each has one in its
   topic: each reads the binlog), then stopped (``PUT /connectors/<name>/stop``: tasks gone,
   offsets stored);
3. ``SLUICE_BENCH_RECORDS`` rows are inserted while neither runs;
4. one system at a time (the order alternating per round, so neither shares the two cores with the
   other) is resumed and timed from its resume to its last change in the topic (its high
   watermark, polled every 50 ms): its task's restart from the stored offset is included (for
   Debezium that means reading its schema history back), as is its first run of the code in a
   JVM that has not compiled it yet (its first round is slower: the median is the steady figure).
   CPU is the worker's process tree over the same interval (every thread, task hosts, reaped
   children; from ``/proc``); MariaDB's and the broker's CPU are counted for neither.

Measured on the 2-core development machine (two runs of 5 rounds, medians), with the native row
decoder (``connectors/source/binlog_cdc/native_rows.py``): Sluice 40,200-42,200 changes/s at 24 µs
of CPU per change, Debezium 8,100 changes/s at 82-85 µs: 5.0-5.2x the changes/s, 3.4-3.6x the
changes per CPU-second (the 3x target met). Without it (``mysql-replication`` decoding every
column in Python, as before; the same runs on the same day): Sluice 14,000-14,500 changes/s at
71-73 µs, 1.14x Debezium's changes per CPU-second. Where Sluice's CPU goes now
(``SLUICE_BENCH_PROFILE``, own time, share of its worker's samples): the JSON envelope writer and
its generated converters about 30 %, handing records to the producer 12 %, the native decoding 9 %,
``mysql-replication``'s packet and table map parsing about 10 %, building the events (``_emit``,
``_source``) 8 %. The JSON envelope writer is the next lever.
"""

from __future__ import annotations

import collections
import os
import random
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pymysql
from confluent_kafka import Consumer, TopicPartition

from benchmarks.cdc_vs_debezium import JSON, SluiceWorker, process_tree_cpu
from benchmarks.common import ROUNDS, broker, tmpdir, wait_until
from tests.services.debezium import MARIADB_SOURCE, DebeziumConnect
from tests.services.mariadb import MariaDbServer

RECORDS = int(os.environ.get("SLUICE_BENCH_RECORDS", "200000"))
TXN_ROWS = int(os.environ.get("SLUICE_BENCH_BINLOG_TXN_ROWS", "100"))
PROFILE = os.environ.get("SLUICE_BENCH_PROFILE", "")
DATABASE = "bench"
COLUMNS = (
    "id BIGINT PRIMARY KEY, customer INT NOT NULL, qty SMALLINT NOT NULL, active TINYINT(1) NOT NULL, "
    "amount DECIMAL(12,2), name VARCHAR(64), email VARCHAR(96), created DATETIME(6), updated TIMESTAMP NULL, "
    "score DOUBLE, note TEXT, due DATE"
)
CITIES = ("Lisbon", "Oslo", "Turin", "Kraków", "Ghent", "Tartu", "Cork", "Brno")


def connector_config(server: MariaDbServer, bootstrap: str, prefix: str, table: str, server_id: int) -> dict[str, str]:
    """The same configuration for both systems (but the prefix and the replica id)."""
    return {
        "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
        "tasks.max": "1",
        "database.hostname": "127.0.0.1",
        "database.port": str(server.port),
        "database.user": "root",
        "database.server.id": str(server_id),
        "topic.prefix": prefix,
        "database.include.list": DATABASE,
        "table.include.list": rf"{DATABASE}\.({table}|ping)",
        "snapshot.mode": "no_data",
        "schema.history.internal.kafka.bootstrap.servers": bootstrap,
        "schema.history.internal.kafka.topic": f"{prefix}-history",
        "key.converter": JSON,
        "key.converter.schemas.enable": "true",
        "value.converter": JSON,
        "value.converter.schemas.enable": "true",
    }


def insert_rows(conn: Any, table: str, first: int, count: int) -> None:
    """``count`` rows from id ``first``, ``TXN_ROWS`` per transaction (one multi-row INSERT each)."""
    rnd = random.Random(first)
    placeholders = "(" + ",".join(["%s"] * 12) + ")"
    with conn.cursor() as cur:
        for start in range(first, first + count, TXN_ROWS):
            rows = []
            for i in range(start, min(first + count, start + TXN_ROWS)):
                city = CITIES[i % len(CITIES)]
                rows += [
                    i, rnd.randrange(1, 100_000), rnd.randrange(1, 50), i % 3 == 0, f"{rnd.randrange(1, 10**6)}.{i % 100:02d}",
                    f"customer {i} of {city}", f"user{i}@{city.lower()}.example.com",
                    f"2024-03-{1 + i % 28:02d} 10:{i % 60:02d}:{(i * 7) % 60:02d}.{i % 10**6:06d}",
                    f"2024-03-{1 + i % 28:02d} 11:{i % 60:02d}:00", rnd.random() * 1000,
                    f"order note {i}: deliver to the back door in {city}", None if i % 4 == 0 else f"2024-{1 + i % 12:02d}-15",
                ]  # fmt: skip
            cur.execute("BEGIN")
            cur.execute(f"INSERT INTO {table} VALUES " + ",".join([placeholders] * (len(rows) // 12)), rows)
            cur.execute("COMMIT")


def watermark(consumer: Consumer, topic: str) -> int:
    topics = consumer.list_topics(topic, timeout=10).topics
    if topic not in topics or topics[topic].error is not None or not topics[topic].partitions:
        return 0
    return sum(
        int(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]) for p in topics[topic].partitions
    )


@dataclass
class Run:
    """One system's run: seconds from its resume to its last change in the topic, CPU seconds of
    its worker meanwhile, and when its first changes showed (seconds, how many were there)."""

    system: str
    changes: int
    seconds: float
    cpu: float
    first: float
    first_changes: int

    @property
    def rate(self) -> float:
        return self.changes / self.seconds

    @property
    def steady_rate(self) -> float:
        """From its first change in the topic to its last: the task's restart left out."""
        return (self.changes - self.first_changes) / max(self.seconds - self.first, 1e-9)

    @property
    def cpu_us(self) -> float:
        """µs of CPU per change."""
        return self.cpu / self.changes * 1e6


class Profiler:
    """``py-spy record`` of a process tree into collapsed stacks (``--format raw``), when asked."""

    def __init__(self, path: str) -> None:
        self.path = Path(path) if path else None
        self.proc: subprocess.Popen[bytes] | None = None
        self.parts: list[Path] = []

    def start(self, pid: int) -> None:
        if self.path is None:
            return
        part = self.path.with_suffix(f".{len(self.parts)}.txt")
        self.parts.append(part)
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("py-spy")), "record", "--pid", str(pid), "--subprocesses", "--threads", "--nonblocking", "--rate", "200",
             "--format", "raw", "--output", str(part)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(1.0)  # py-spy attaches before the measured run starts

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.send_signal(2)  # SIGINT: py-spy writes its output and exits
            proc.wait(60)

    def report(self) -> None:
        """Merge the rounds' stacks into ``path``; print the costliest functions by own and total samples."""
        if self.path is None or not self.parts:
            return
        stacks: collections.Counter[str] = collections.Counter()
        for part in self.parts:
            for line in part.read_text(errors="replace").splitlines() if part.exists() else []:
                stack, _, samples = line.rpartition(" ")
                if samples.isdigit():
                    stacks[stack] += int(samples)
        self.path.write_text("".join(f"{stack} {count}\n" for stack, count in stacks.items()))
        # py-spy leaves idle threads out: every sample is a thread running Python (or a C call from it).
        total = sum(stacks.values()) or 1
        own: collections.Counter[str] = collections.Counter()
        inclusive: collections.Counter[str] = collections.Counter()
        threads: collections.Counter[str] = collections.Counter()
        for stack, count in stacks.items():
            frames = stack.split(";")
            threads[next((f.partition(": ")[2] for f in frames if f.startswith("thread (")), "?")] += count
            frames = [f for f in frames if _FRAME.fullmatch(f)]  # a process's command line may hold a ";"
            if frames:
                own[_frame(frames[-1])] += count
            for name in {_frame(f) for f in frames}:
                inclusive[name] += count
        print(
            f"\nprofile of Sluice's worker tree, {total:,} samples over {len(self.parts)} runs (all stacks: {self.path})"
        )
        for title, counter, top in (
            ("threads", threads, 5),
            ("own time", own, 20),
            ("including callees", inclusive, 30),
        ):
            print(f"  {title}:")
            for name, count in counter.most_common(top):
                print(f"    {count / total:6.1%}  {name}")


_FRAME = re.compile(r".+ \(.+:\d+\)")


def _frame(frame: str) -> str:
    """``fn (path/to/module.py:123)`` → ``fn (module.py)``: a function's samples summed over its lines."""
    name, _, where = frame.partition(" (")
    file = where.rsplit(":", 1)[0].rstrip(")")
    return f"{name} ({'/'.join(Path(file).parts[-2:])})"


def wait_state(worker: Any, name: str, state: str) -> None:
    def reached() -> bool:
        # STOPPED: its tasks are gone too, so none reads a change of the rows inserted next.
        response = worker.request("GET", f"/connectors/{name}/status")
        body = response.json() if response.status_code == 200 else {}
        return body.get("connector", {}).get("state") == state and (state != "STOPPED" or not body.get("tasks"))

    wait_until(reached, timeout=120, poll=0.1)


def timed_run(system: str, worker: Any, name: str, consumer: Consumer, topic: str, profiler: Profiler) -> Run:
    """Resume the stopped connector ``name``; time it until its topic holds every change; stop it again."""
    if system == "sluice":
        profiler.start(worker.pid)
    first: list[tuple[float, int]] = []
    cpu0, start = process_tree_cpu(worker.pid), time.perf_counter()
    worker.request("PUT", f"/connectors/{name}/resume")

    def done() -> bool:
        seen = watermark(consumer, topic)
        if seen and not first:
            first.append((time.perf_counter() - start, seen))
        return seen >= RECORDS

    wait_until(done, timeout=1800, poll=0.05)
    seconds, cpu = time.perf_counter() - start, process_tree_cpu(worker.pid) - cpu0
    profiler.stop()
    worker.request("PUT", f"/connectors/{name}/stop")
    return Run(system, RECORDS, seconds, cpu, first[0][0], first[0][1])


def bench_round(
    n: int, bootstrap: str, server: MariaDbServer, conn: Any, workers: dict[str, Any], profiler: Profiler
) -> list[Run]:
    table = f"orders_{n}"
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {DATABASE}.{table} ({COLUMNS})")
    names, topics, pings = {}, {}, {}
    for i, (system, worker) in enumerate(sorted(workers.items())):
        prefix = f"{system[:3]}{time.time_ns()}"
        names[system] = f"bench-{prefix}"
        topics[system], pings[system] = f"{prefix}.{DATABASE}.{table}", f"{prefix}.{DATABASE}.ping"
        config = connector_config(server, bootstrap, prefix, table, 6000 + 10 * n + i)
        response = worker.request("POST", "/connectors", json={"name": names[system], "config": config})
        if response.status_code != 201:
            raise RuntimeError(f"creating {names[system]} failed: {response.status_code} {response.text}")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-binlog-watermarks"})
    runs = []
    try:
        with conn.cursor() as cur:
            deadline = time.monotonic() + 180
            while not all(watermark(consumer, topic) for topic in pings.values()):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no ping in {pings} after 180s")
                cur.execute(f"INSERT INTO {DATABASE}.ping VALUES ()")
                time.sleep(0.5)
        for system, worker in workers.items():
            worker.request("PUT", f"/connectors/{names[system]}/stop")
            wait_state(worker, names[system], "STOPPED")
        t0 = time.perf_counter()
        insert_rows(conn, f"{DATABASE}.{table}", 1, RECORDS)
        print(f"  round {n}: {RECORDS:,} rows inserted in {time.perf_counter() - t0:.1f}s", flush=True)
        for system in sorted(workers) if n % 2 else sorted(workers)[::-1]:
            runs.append(timed_run(system, workers[system], names[system], consumer, topics[system], profiler))
    finally:
        consumer.close()
        for system, worker in workers.items():
            worker.request("DELETE", f"/connectors/{names[system]}")
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE {DATABASE}.{table}")
    return runs


def report(runs: list[Run]) -> None:
    """Every run, each system's medians, the ratios Sluice ÷ Debezium."""
    medians: dict[str, tuple[float, float, float]] = {}
    for system in ("sluice", "debezium"):
        mine = [r for r in runs if r.system == system]
        for i, r in enumerate(mine, 1):
            print(
                f"  round {i} {system:<8}: {r.changes:,} changes in {r.seconds:6.2f}s = {r.rate:>8,.0f} changes/s "
                f"({r.steady_rate:>8,.0f}/s after the first {r.first_changes:,} at {r.first:.2f}s); CPU {r.cpu:6.2f}s = {r.cpu_us:6.1f} µs/change"
            )
        if mine:
            medians[system] = (
                statistics.median(r.rate for r in mine),
                statistics.median(r.steady_rate for r in mine),
                statistics.median(r.cpu_us for r in mine),
            )
    for system, (rate, steady, cpu_us) in medians.items():
        print(f"{system:<8} median {rate:>8,.0f} changes/s ({steady:>8,.0f}/s after the first), {cpu_us:6.1f} µs CPU per "
              f"change = {1e6 / cpu_us:>8,.0f} changes per CPU-second")  # fmt: skip
    if len(medians) == 2:
        (s_rate, s_steady, s_cpu), (d_rate, d_steady, d_cpu) = medians["sluice"], medians["debezium"]
        print(f"Sluice / Debezium: changes/s {s_rate / d_rate:.2f}x ({s_steady / d_steady:.2f}x after the first change), "
              f"changes per CPU-second {d_cpu / s_cpu:.2f}x (target: 3x)")  # fmt: skip


def main() -> None:
    print(f"binlog CDC vs Debezium (MariaDB): {RECORDS:,} inserted rows per round in {TXN_ROWS}-row transactions, "
          f"{ROUNDS} rounds (2 shared cores: noisy)")  # fmt: skip
    settings = {"innodb-buffer-pool-size": "512M", "max-binlog-size": "1G"}
    profiler = Profiler(PROFILE)
    with (
        tmpdir() as scratch,
        broker() as bootstrap,
        MariaDbServer(binlog=True, kill_with_parent=True, extra_settings=settings) as server,
    ):
        conn = pymysql.connect(host="127.0.0.1", port=server.port, user="root", autocommit=True, local_infile=False)
        with conn.cursor() as cur:
            cur.execute(f"CREATE DATABASE {DATABASE}")
            cur.execute(f"CREATE TABLE {DATABASE}.ping (id INT AUTO_INCREMENT PRIMARY KEY)")
        (Path(scratch) / "connect").mkdir()
        (Path(scratch) / "sluice").mkdir()
        sluice = SluiceWorker(Path(scratch) / "sluice", bootstrap).start()
        debezium = DebeziumConnect(Path(scratch) / "connect", bootstrap, source=MARIADB_SOURCE).start()
        workers: dict[str, Any] = {"sluice": sluice, "debezium": debezium}
        runs: list[Run] = []
        try:
            for n in range(1, ROUNDS + 1):
                runs += bench_round(n, bootstrap, server, conn, workers, profiler)
        finally:
            profiler.stop()
            sluice.stop()
            debezium.stop()
            conn.close()
        report(runs)
        profiler.report()


if __name__ == "__main__":
    main()
