"""Sluice's PostgreSQL CDC source beside Debezium's, on the same database and broker.

Run: ``python -m benchmarks.cdc_vs_debezium``. Sizes: ``SLUICE_BENCH_DBZ_SNAPSHOT_ROWS`` (200,000),
``SLUICE_BENCH_DBZ_CHANGES`` (100,000); ``SLUICE_BENCH_ROUNDS`` rounds (5), medians reported.
Prints, with no assertions, for each system and phase: the rate, the CPU seconds its worker
process used (every thread and reaped child, from ``/proc``), CPU seconds per million changes, and
the ratios Sluice ÷ Debezium.

Both are real worker processes started once and left idle between runs: a ``sluice standalone``
worker, and Kafka Connect 4.x (``ConnectDistributed``, the JVM's default JIT) with
``debezium-connector-postgres`` from Maven Central (:class:`tests.services.debezium.DebeziumConnect`).
Both connectors get the same configuration: one publication (``bench_pub``) with each system on
its own slot and topic prefix, ``JsonConverter`` with schemas for keys and values, the defaults
for everything else. Runs are one at a time, the order alternating per round, so neither system
shares the two cores with the other:

1. initial snapshot: a table of ``SNAPSHOT_ROWS`` rows of a typical 10-column table; from the
   connector's creation to the last row in its topic;
2. streaming: ``CHANGES`` changes (60 % inserts, 30 % updates, 10 % deletes in 1,000-row
   transactions) written while both slots exist, then each connector started on its slot
   (``snapshot.mode=no_data``); from its creation to its last event (and tombstones) in the topic.

Each time includes the task's start (Debezium's first run of its code in a JVM that has not
compiled it yet: the first round is slower for it; the median over rounds is the steady figure).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg
from confluent_kafka import Consumer, TopicPartition

from benchmarks.cdc_source import drop_slot
from benchmarks.common import ROUNDS, broker, create_topic, tmpdir, wait_until
from sluice.deploy.processes import find_free_port
from tests.services.debezium import DebeziumConnect
from tests.services.postgres import PostgresServer

SNAPSHOT_ROWS = int(os.environ.get("SLUICE_BENCH_DBZ_SNAPSHOT_ROWS", "200000"))
CHANGES = int(os.environ.get("SLUICE_BENCH_DBZ_CHANGES", "100000"))
JSON = "org.apache.kafka.connect.json.JsonConverter"

COLUMNS = (
    "id bigint PRIMARY KEY, name text, email text, amount numeric(12,2), qty int, active boolean, "
    "created timestamptz, score float8, city varchar(40), due date"
)
ROW_SQL = (
    "SELECT g, 'name-' || g, 'user' || g || '@example.com', g * 1.25, g % 1000, g % 2 = 0, now(), g / 7.0, "
    "'city-' || g % 97, DATE '2024-01-01' + (g % 365)::int"
)


def process_tree_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` and its live descendants (threads and reaped children
    included), from ``/proc``."""
    tick = os.sysconf("SC_CLK_TCK")
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        stats[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick)
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += stats.get(current, (0, 0.0))[1]
        todo.extend(child for child, (parent, _) in stats.items() if parent == current)
    return total


class SluiceWorker:
    """``sluice standalone`` in a subprocess, connectors created over its REST API."""

    def __init__(self, workdir: Path, bootstrap: str, **extra: str) -> None:
        """``extra``: more worker properties."""
        self.url = f"http://127.0.0.1:{find_free_port()}"
        self.props = workdir / "worker.properties"
        self.log = workdir / "worker.log"
        settings = {
            "bootstrap.servers": bootstrap,
            "listeners": self.url,
            "offset.storage.file.filename": str(workdir / "offsets.json"),
            "key.converter": JSON,
            "value.converter": JSON,
            **extra,
        }
        self.props.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> SluiceWorker:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sluice.cli", "standalone", str(self.props)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_until(self._healthy, timeout=60, poll=0.2)
        return self

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"the Sluice worker exited: {self.log.read_text(errors='replace')[-3000:]}")
        try:
            return httpx.get(f"{self.url}/health", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(method, self.url + path, timeout=30, **kwargs)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@dataclass
class Timing:
    """One connector run: seconds from its creation to its last record, CPU seconds its worker
    used meanwhile, and when its first records showed (seconds, how many were there)."""

    seconds: float
    cpu: float
    first: float
    first_records: int
    records: int


@dataclass
class Run:
    system: str
    phase: str
    events: int
    timing: Timing

    @property
    def seconds(self) -> float:
        return self.timing.seconds

    @property
    def cpu(self) -> float:
        return self.timing.cpu

    @property
    def rate(self) -> float:
        """From the connector's creation to its last record."""
        return self.events / self.timing.seconds

    @property
    def steady_rate(self) -> float:
        """From its first record in the topic to its last: the task's start left out."""
        t = self.timing
        return self.events * (1 - t.first_records / t.records) / max(t.seconds - t.first, 1e-9)

    @property
    def cpu_per_million(self) -> float:
        return self.cpu / self.events * 1e6


def connector_config(pg: PostgresServer, prefix: str, slot: str, table: str, snapshot_mode: str) -> dict[str, str]:
    """The same configuration for both systems."""
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": "127.0.0.1",
        "database.port": str(pg.port),
        "database.user": "postgres",
        "database.dbname": pg.database,
        "plugin.name": "pgoutput",
        "topic.prefix": prefix,
        "slot.name": slot,
        "publication.name": "bench_pub",
        "publication.autocreate.mode": "disabled",
        "table.include.list": f"public\\.{table}",
        "snapshot.mode": snapshot_mode,
        "key.converter": JSON,
        "key.converter.schemas.enable": "true",
        "value.converter": JSON,
        "value.converter.schemas.enable": "true",
    }


def high_watermark(consumer: Consumer, topic: str) -> int:
    return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])


def run_connector(
    worker: DebeziumConnect | SluiceWorker, config: dict[str, str], bootstrap: str, topic: str, expected: int
) -> Timing:
    """Create the connector, wait for ``expected`` records in ``topic``, delete it."""
    assert worker.pid is not None
    name = f"bench-{config['slot.name']}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-dbz-watermarks"})
    try:
        cpu0, start = process_tree_cpu(worker.pid), time.perf_counter()
        response = worker.request("POST", "/connectors", json={"name": name, "config": config})
        if response.status_code != 201:
            raise RuntimeError(f"creating {name} failed: {response.status_code} {response.text}")
        first: list[tuple[float, int]] = []

        def done() -> bool:
            seen = high_watermark(consumer, topic)
            if seen and not first:
                first.append((time.perf_counter() - start, seen))
            return seen >= expected

        wait_until(done, timeout=1800, poll=0.05)
        seconds, cpu = time.perf_counter() - start, process_tree_cpu(worker.pid) - cpu0
    finally:
        consumer.close()
        worker.request("DELETE", f"/connectors/{name}")
    return Timing(seconds, cpu, first[0][0], first[0][1], expected)


def make_changes(conn: psycopg.Connection[Any], table: str, total: int) -> tuple[int, int]:
    """60 % inserts, 30 % updates, 10 % deletes in 1,000-row transactions: (changes, deletes)."""
    inserts, updates = total * 6 // 10, total * 3 // 10
    deletes = total - inserts - updates
    for start in range(0, inserts, 1000):
        end = min(inserts, start + 1000)
        conn.execute(f"INSERT INTO {table} {ROW_SQL} FROM generate_series({start + 1}::bigint, {end}::bigint) g")
    for start in range(0, updates, 1000):
        end = min(updates, start + 1000)
        conn.execute(f"UPDATE {table} SET qty = qty + 1, name = name || 'x' WHERE id > {start} AND id <= {end}")
    for start in range(0, deletes, 1000):
        end = min(deletes, start + 1000)
        conn.execute(f"DELETE FROM {table} WHERE id > {inserts - end} AND id <= {inserts - start}")
    return inserts + updates + deletes, deletes


def snapshot_round(
    n: int, bootstrap: str, pg: PostgresServer, conn: psycopg.Connection[Any], workers: dict[str, Any]
) -> list[Run]:
    table = f"dbz_snap_{time.time_ns()}"
    conn.execute(f"CREATE TABLE {table} ({COLUMNS})")
    conn.execute(f"INSERT INTO {table} {ROW_SQL} FROM generate_series(1::bigint, {SNAPSHOT_ROWS}::bigint) g")
    conn.execute(f"ALTER PUBLICATION bench_pub ADD TABLE {table}")
    conn.execute(f"VACUUM ANALYZE {table}")
    runs = []
    for system in _order(n, workers):
        prefix, slot = f"{system[:3]}{time.time_ns()}", f"{system[:3]}_snap_{n}"
        topic = create_topic(bootstrap, f"{prefix}.public.{table}")
        config = connector_config(pg, prefix, slot, table, "initial")
        timing = run_connector(workers[system], config, bootstrap, topic, SNAPSHOT_ROWS)
        runs.append(Run(system, "snapshot", SNAPSHOT_ROWS, timing))
        drop_slot(conn, slot)
    conn.execute(f"DROP TABLE {table}")
    return runs


def streaming_round(
    n: int, bootstrap: str, pg: PostgresServer, conn: psycopg.Connection[Any], workers: dict[str, Any]
) -> list[Run]:
    table = f"dbz_stream_{time.time_ns()}"
    conn.execute(f"CREATE TABLE {table} ({COLUMNS})")
    conn.execute(f"ALTER PUBLICATION bench_pub ADD TABLE {table}")
    slots = {system: f"{system[:3]}_stream_{n}" for system in workers}
    for slot in slots.values():
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    made, deletes = make_changes(conn, table, CHANGES)
    runs = []
    for system in _order(n, workers):
        prefix = f"{system[:3]}{time.time_ns()}"
        topic = create_topic(bootstrap, f"{prefix}.public.{table}")
        config = connector_config(pg, prefix, slots[system], table, "no_data")
        timing = run_connector(workers[system], config, bootstrap, topic, made + deletes)
        runs.append(Run(system, "streaming", made, timing))  # changes; their tombstones not counted
        drop_slot(conn, slots[system])
    conn.execute(f"DROP TABLE {table}")
    return runs


def _order(n: int, workers: dict[str, Any]) -> list[str]:
    names = sorted(workers)
    return names if n % 2 else names[::-1]


def report(runs: list[Run]) -> None:
    """Every run, then per phase each system's medians and the ratios Sluice ÷ Debezium."""
    for phase, unit in (("snapshot", "rows"), ("streaming", "changes")):
        medians: dict[str, tuple[float, float, float]] = {}
        for system in ("sluice", "debezium"):
            mine = [r for r in runs if r.phase == phase and r.system == system]
            for i, r in enumerate(mine, 1):
                print(
                    f"  {phase} round {i} {system:<8}: {r.events:,} {unit} in {r.seconds:6.2f}s = {r.rate:>9,.0f} {unit}/s "
                    f"({r.steady_rate:>9,.0f}/s after the first record at {r.timing.first:.2f}s); "
                    f"CPU {r.cpu:6.2f}s = {r.cpu_per_million:6.2f} s per million"
                )
            if mine:
                medians[system] = (
                    statistics.median(r.rate for r in mine),
                    statistics.median(r.steady_rate for r in mine),
                    statistics.median(r.cpu_per_million for r in mine),
                )
        for system, (rate, steady, cpu) in medians.items():
            print(
                f"{phase:<9} {system:<8} median {rate:>9,.0f} {unit}/s ({steady:>9,.0f}/s after the first record), "
                f"{cpu:6.2f} CPU s per million {unit}"
            )
        if len(medians) == 2:
            (s_rate, s_steady, s_cpu), (d_rate, d_steady, d_cpu) = medians["sluice"], medians["debezium"]
            print(
                f"{phase:<9} Sluice / Debezium: throughput {s_rate / d_rate:.2f}x ({s_steady / d_steady:.2f}x after the "
                f"first record), CPU per {unit[:-1]} {s_cpu / d_cpu:.2f}x"
            )


def main() -> None:
    print(f"CDC vs Debezium: snapshot of {SNAPSHOT_ROWS:,} rows, {CHANGES:,} streamed changes, {ROUNDS} rounds "
          "(2 shared cores: noisy)")  # fmt: skip
    settings = {
        "shared_buffers": "256MB",
        "max_wal_size": "4GB",
        "max_replication_slots": "20",
        "max_wal_senders": "20",
    }
    with (
        tmpdir() as scratch,
        broker() as bootstrap,
        PostgresServer(extra_settings=settings, kill_with_parent=True) as pg,
        psycopg.connect(pg.dsn(), autocommit=True) as conn,
    ):
        conn.execute("CREATE PUBLICATION bench_pub")
        (Path(scratch) / "connect").mkdir()
        (Path(scratch) / "sluice").mkdir()
        sluice = SluiceWorker(Path(scratch) / "sluice", bootstrap).start()
        debezium = DebeziumConnect(Path(scratch) / "connect", bootstrap).start()
        workers: dict[str, Any] = {"sluice": sluice, "debezium": debezium}
        runs: list[Run] = []
        try:
            for n in range(1, ROUNDS + 1):
                if SNAPSHOT_ROWS > 0:
                    runs += snapshot_round(n, bootstrap, pg, conn, workers)
                if CHANGES > 0:
                    runs += streaming_round(n, bootstrap, pg, conn, workers)
        finally:
            sluice.stop()
            debezium.stop()
        report(runs)


if __name__ == "__main__":
    main()
