"""PostgreSQL → CDC source → topic → JDBC sink (upsert) → PostgreSQL: Sluice beside Kafka Connect + Debezium.

Run: ``python -m benchmarks.cdc_to_jdbc``. Size: ``SLUICE_BENCH_CDC_JDBC_CHANGES`` (100,000);
``SLUICE_BENCH_ROUNDS`` rounds (5), medians reported; ``SLUICE_BENCH_CDC_JDBC_TIME_MODE`` the
sources' ``time.precision.mode`` (``connect``, see below; ``adaptive`` is Debezium's default).
Prints, with no assertions, for each system and round: end-to-end changes/s, the lag, the CPU
seconds of its worker process per million changes, and the ratios Sluice ÷ Connect. Issue #40's
target: at least 5× the Connect pipeline's changes/s at no more than 0.2 of its CPU per change.

The pipeline users build most, end to end, twice on the same broker and databases, one system at
a time (the order alternating per round, so neither shares the two cores with the other):

- Sluice: one ``sluice standalone`` worker running its PostgreSQL CDC source (configured as
  Debezium's ``io.debezium.connector.postgresql.PostgresConnector``) and its JDBC sink (as
  Confluent's ``io.confluent.connect.jdbc.JdbcSinkConnector``) with the
  ``io.debezium.transforms.ExtractNewRecordState`` transform (Debezium 3.x defaults: a delete
  becomes a tombstone), ``insert.mode=upsert``, ``pk.mode=record_key``, ``delete.enabled=true``,
  ``auto.create=true``;
- Connect: one Kafka Connect 4.x worker (:class:`tests.services.debezium.DebeziumConnect`) running
  ``debezium-connector-postgres`` 3.6.1 and Debezium's own JDBC sink, ``debezium-connector-jdbc``
  3.5.0 (the newest Maven Central serves here; its own plugin directory), ``insert.mode=upsert``,
  ``primary.key.mode=record_key``, ``delete.enabled=true``, ``schema.evolution=basic``, consuming
  the Debezium envelopes natively, without the SMT, as Debezium documents it: what a Debezium user
  deploys. Its other settings are its defaults (``batch.size`` 500, no reduction buffer).

Both sources get the same configuration: one publication, each system its own slot and topic
prefix, ``snapshot.mode=no_data``, ``JsonConverter`` with schemas for keys and values. Both sinks
consume with Connect's default ``max.poll.records`` of 500 (``consumer.override.max.poll.records``
set on both: Sluice's own default is 2,000). ``time.precision.mode=connect`` by default: the
sources then write dates and timestamps as Connect's ``Date`` and ``Timestamp``, so a Connect-style
JDBC sink (Sluice's, like Confluent's) creates ``date`` and ``timestamp`` columns, as a user
copying a table wants; Debezium's sink creates those from Debezium's own types too. With
``adaptive`` Sluice's sink creates ``integer`` and ``bigint`` columns for them (Confluent's would
too) and the comparison below converts them back. A ``timestamptz`` is a
``io.debezium.time.ZonedTimestamp`` string in either mode: a ``text`` column in Sluice's target, a
``timestamptz`` column in Debezium's.

The target is a second database (``target``) on the same PostgreSQL server: both pipelines copy
between databases, and a second server would only add a second set of processes on the same two
cores (and a second shared buffer pool) without taking load off the first. Its WAL goes through
the same WAL as the source's, which the running slot's walsender reads past (it skips other
databases' records).

Workload, per round: a fresh table of eleven columns (``id bigint`` primary key, ``numeric(12,2)``,
``timestamp`` to the millisecond, ``timestamptz``, ``date``, ``smallint``, a 40-character ``text``,
``text``, ``double precision``, ``boolean``, a nullable ``text`` a quarter null); both systems'
slots are created, then ``CHANGES`` changes are written (60 % inserts, 30 % updates of four
columns, 10 % deletes, in 1,000-row transactions; the deletes remove the highest ids last), then
each pipeline in turn is started on its slot: the sink connector, then the source connector.

Measured, per run, from the sink's creation (both tasks' start-up included):

- *end-to-end time*: until the target table equals the source table. Polled every 50 ms with
  two index lookups, the target's ``max(id)`` and the last updated row (the last changes are the
  deletes of the highest ids, and the inserts pass through the final ``max(id)`` before any update
  is applied, so both hold only near the end), then with an ``md5`` over every row's columns, in id
  order, compared with the source's (at most once a second; a target still different 30 s after
  its first checksum is reported as differing): each target column is cast to the source column's
  type before it is rendered as text (``text`` → ``timestamptz``, ``integer`` days → ``date``, ``bigint`` µs →
  ``timestamp``), so representations that differ but mean the same compare equal, and anything
  else is reported as a mismatch (with the first differing row). Changes/s = ``CHANGES`` ÷ that time.
- *lag*: the time from the source's last event being in the topic (its high watermark reaching the
  changes plus the deletes' tombstones, polled alongside) to the target being equal: how far the
  sink trails the source at the end of the backlog. The source's own changes/s is printed too.
- *CPU*: the CPU seconds of the worker's whole process tree (every thread, the task host processes
  of ``task.executor=process``, reaped children; from ``/proc``) over the end-to-end time, per
  million changes: source and sink together, in one worker for both systems. PostgreSQL's and the
  broker's CPU are not counted for either.

Both workers are started once and left idle between runs; each time includes the tasks' start
(Debezium's first run of its code in a JVM that has not compiled it yet: its first round is
slower; the median over rounds is the steady figure).
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

import psycopg
import psycopg.errors
from confluent_kafka import Consumer

from benchmarks.cdc_source import drop_slot
from benchmarks.cdc_vs_debezium import JSON, SluiceWorker, _order, connector_config, high_watermark, process_tree_cpu
from benchmarks.common import ROUNDS, broker, create_topic, tmpdir
from tests.services.debezium import DEFAULT_JDBC_SINK_VERSION, DebeziumConnect
from tests.services.postgres import PostgresServer

CHANGES = int(os.environ.get("SLUICE_BENCH_CDC_JDBC_CHANGES", "100000"))
TIME_MODE = os.environ.get("SLUICE_BENCH_CDC_JDBC_TIME_MODE", "connect")
#: Which systems run (``sluice,connect``); Sluice alone skips starting Connect, for profiling.
SYSTEMS_RUN = [
    s.strip() for s in os.environ.get("SLUICE_BENCH_CDC_JDBC_SYSTEMS", "sluice,connect").split(",") if s.strip()
]
#: A file prefix: py-spy records the Sluice worker and its task hosts during each of its runs, into
#: ``<prefix>-<round>.txt`` (collapsed stacks); the figures of such a run are not comparable.
PYSPY = os.environ.get("SLUICE_BENCH_CDC_JDBC_PYSPY", "")
#: Connect's default ``max.poll.records``, set on both sinks.
MAX_POLL_RECORDS = "500"
#: Issue #40's targets: Sluice's changes/s at least this many times Connect's, its CPU per change
#: at most this fraction of Connect's.
TARGET_SPEEDUP, TARGET_CPU = 5.0, 0.2
TARGET_DB = "target"
SYSTEMS = ("sluice", "connect")

#: The source table's columns and their types: the target's are cast to these before comparing.
SOURCE_TYPES = {
    "id": "bigint",
    "amount": "numeric(12,2)",
    "created_at": "timestamp",
    "updated_at": "timestamptz",
    "day": "date",
    "qty": "smallint",
    "code": "text",
    "name": "text",
    "score": "double precision",
    "active": "boolean",
    "note": "text",
}
COLUMNS = ", ".join(
    f"{name} {kind}{' PRIMARY KEY' if name == 'id' else '' if name == 'note' else ' NOT NULL'}"
    for name, kind in SOURCE_TYPES.items()
)
ROW_SQL = (
    "SELECT g, ((g * 2654435761) % 3000000000 - 1000000000) / 100.0, "
    "TIMESTAMP '1960-01-01' + ((g * 7777777777) % 1893456000000) * INTERVAL '1 millisecond', "
    "TIMESTAMPTZ '2020-01-01 00:00:00+00' + (g * 1234567) * INTERVAL '1 microsecond', "
    "DATE '1960-01-01' + ((g * 37) % 36525)::int, ((g * 31) % 65535 - 32768)::int2, "
    "rpad('SKU-' || lpad(g::text, 10, '0') || '-', 40, 'abcdefghijklmnopqrstuvwxyz0123456789'), "
    "'customer ' || g, g / 7.0, g % 3 <> 0, CASE WHEN g % 4 = 0 THEN NULL ELSE 'note ' || g % 97 END"
)


def _compared(column: str, target_type: str) -> str:
    """SQL rendering ``column`` of a target table as text, comparable with the source's rendering:
    cast to the source column's type first, converting Debezium's integer encodings back."""
    source_type = SOURCE_TYPES[column]
    expr = f'"{column}"'
    if source_type == "date" and target_type == "integer":  # io.debezium.time.Date: days since 1970
        expr = f"DATE '1970-01-01' + {expr}"
    elif source_type == "timestamp" and target_type == "bigint":  # io.debezium.time.MicroTimestamp
        expr = f"TIMESTAMP '1970-01-01' + {expr} * INTERVAL '1 microsecond'"
    return f"coalesce(({expr})::{source_type}::text, '\\N')"


def rendered(types: dict[str, str]) -> str:
    """SQL rendering a row of a table whose columns have ``types`` as one comparable line."""
    return "concat_ws('|', " + ", ".join(_compared(c, types.get(c, SOURCE_TYPES[c])) for c in SOURCE_TYPES) + ")"


def checksum_sql(table: str, types: dict[str, str]) -> str:
    return f"SELECT count(*), md5(string_agg({rendered(types)}, E'\\n' ORDER BY id)) FROM \"{table}\""


def column_types(conn: psycopg.Connection[Any], table: str) -> dict[str, str]:
    rows = conn.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
        (f'"{table}"',),
    ).fetchall()
    return {name: kind for name, kind in rows}


def first_difference(source: psycopg.Connection[Any], target: psycopg.Connection[Any], table: str,
                     target_table: str, types: dict[str, str]) -> str:  # fmt: skip
    """The first row (by id) the two tables disagree on, both sides rendered as compared."""
    mine = source.execute(f'SELECT {rendered(SOURCE_TYPES)} FROM "{table}" ORDER BY id').fetchall()
    theirs = target.execute(f'SELECT {rendered(types)} FROM "{target_table}" ORDER BY id').fetchall()
    for i, (a, b) in enumerate(zip(mine, theirs, strict=False)):
        if a != b:
            return f"row {i}: source {a[0]!r}, target {b[0]!r}"
    extra = (mine[len(theirs) :] or theirs[len(mine) :] or [("",)])[0][0]
    return f"source {len(mine)} rows, target {len(theirs)} rows; first extra: {extra!r}"


@dataclass
class Run:
    system: str
    changes: int
    seconds: float  # from the sink's creation to the target equal to the source
    source_seconds: float | None  # from the sink's creation to the source's last event in the topic
    cpu: float
    equal: bool
    detail: str = ""

    @property
    def rate(self) -> float:
        return self.changes / self.seconds

    @property
    def source_rate(self) -> float:
        return self.changes / self.source_seconds if self.source_seconds else float("nan")

    @property
    def lag(self) -> float:
        return self.seconds - self.source_seconds if self.source_seconds is not None else float("nan")

    @property
    def cpu_per_million(self) -> float:
        return self.cpu / self.changes * 1e6


def source_config(pg: PostgresServer, prefix: str, slot: str, table: str) -> dict[str, str]:
    """The same source configuration for both systems: the CDC benchmark's, streaming only, in
    ``TIME_MODE``."""
    return {**connector_config(pg, prefix, slot, table, "no_data"), "time.precision.mode": TIME_MODE}


def sink_config(system: str, pg: PostgresServer, topic: str, target_table: str) -> dict[str, str]:
    """Each system's JDBC sink as its users configure it: upsert by the record key, deletes, DDL."""
    common = {
        "tasks.max": "1",
        "topics": topic,
        "connection.url": pg.jdbc_url(TARGET_DB),
        "insert.mode": "upsert",
        "delete.enabled": "true",
        "key.converter": JSON,
        "key.converter.schemas.enable": "true",
        "value.converter": JSON,
        "value.converter.schemas.enable": "true",
        "consumer.override.max.poll.records": MAX_POLL_RECORDS,
    }
    if system == "sluice":
        return {
            **common,
            "connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector",
            "connection.user": "postgres",
            "table.name.format": target_table,
            "pk.mode": "record_key",
            "auto.create": "true",
            "transforms": "unwrap",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        }
    return {
        **common,
        "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
        "connection.username": "postgres",
        "collection.name.format": target_table,
        "primary.key.mode": "record_key",
        "schema.evolution": "basic",
    }


class Target:
    """Whether the target table equals the source table: cheap polls until it can (``max(id)`` at its
    final value, and the last updated row updated: the inserts pass through ``max(id)`` = the final
    one before any update), then the checksum, at most once a second until it matches. A checksum
    that still differs :data:`SETTLE_S` seconds after the first is a mismatch."""

    SETTLE_S = 30.0

    def __init__(self, pg: PostgresServer, table: str, wanted: tuple[Any, ...], final_max: int, updated: int) -> None:
        self.conn = psycopg.connect(pg.dsn(TARGET_DB), autocommit=True)
        self.table, self.wanted, self.final_max, self.updated = table, wanted, final_max, updated
        self.types: dict[str, str] = {}
        self.got: tuple[Any, ...] | None = None
        self._first_mismatch: float | None = None
        self._next_check = 0.0

    def state(self) -> str:
        """``equal``, ``differs`` (for good) or ``pending``."""
        try:
            row = self.conn.execute(f'SELECT max(id) FROM "{self.table}"').fetchone()
        except psycopg.errors.UndefinedTable:  # auto.create: not made yet
            return "pending"
        if row is None or row[0] != self.final_max:
            return "pending"
        name = self.conn.execute(f'SELECT name FROM "{self.table}" WHERE id = %s', (self.updated,)).fetchone()
        now = time.monotonic()
        if name is None or not str(name[0]).endswith("x") or now < self._next_check:
            return "pending"
        self.types = self.types or column_types(self.conn, self.table)
        self.got = self.conn.execute(checksum_sql(self.table, self.types)).fetchone()
        if self.got == self.wanted:
            return "equal"
        self._first_mismatch = self._first_mismatch or now
        self._next_check = now + 1
        return "differs" if now - self._first_mismatch > self.SETTLE_S else "pending"

    def close(self) -> None:
        self.conn.close()


def run_pipeline(
    system: str,
    worker: DebeziumConnect | SluiceWorker,
    bootstrap: str,
    source: dict[str, str],
    sink: dict[str, str],
    target: Target,
    events: int,
    timeout: float = 1800,
) -> tuple[float, float | None, float]:
    """Create the sink, then the source; wait until the target is equal (or differs for good).
    Returns the seconds until then, the seconds until the topic held ``events`` records (None if
    the target was done first: never, as the sink reads the topic) and the worker's CPU seconds."""
    assert worker.pid is not None
    names = [f"{system}-sink-{time.time_ns()}", f"{system}-source-{time.time_ns()}"]
    topic = sink["topics"]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-cdc-jdbc-watermarks"})
    profiler: subprocess.Popen[bytes] | None = None
    try:
        if PYSPY and system == "sluice":
            profiler = _profile(worker.pid)
        cpu0, start = process_tree_cpu(worker.pid), time.perf_counter()
        for name, config in zip(names, (sink, source), strict=True):
            response = worker.request("POST", "/connectors", json={"name": name, "config": config})
            if response.status_code != 201:
                raise RuntimeError(f"creating {name} failed: {response.status_code} {response.text}")
        source_done: float | None = None
        polls = 0
        deadline = time.monotonic() + timeout
        while True:
            now = time.perf_counter()
            if source_done is None and high_watermark(consumer, topic) >= events:
                source_done = now - start
            if target.state() != "pending":
                seconds, cpu = time.perf_counter() - start, process_tree_cpu(worker.pid) - cpu0
                break
            polls += 1
            if polls % 40 == 0:  # every 2 s: a failed task would otherwise only show as a timeout
                _check_tasks(system, worker, names)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{system}: the target was not complete after {timeout:.0f}s{_status(worker, names)}"
                )
            time.sleep(0.05)
    finally:
        if profiler is not None:
            profiler.send_signal(signal.SIGINT)
            profiler.wait(60)
        consumer.close()
        for name in names:
            worker.request("DELETE", f"/connectors/{name}")
    return seconds, source_done, cpu


def _profile(pid: int) -> subprocess.Popen[bytes]:
    """py-spy recording ``pid`` and its task host processes (collapsed stacks, idle threads left out)."""
    out = f"{PYSPY}-{time.time_ns()}.txt"
    spy = Path(sys.executable).with_name("py-spy")
    proc = subprocess.Popen([str(spy), "record", "--pid", str(pid), "--subprocesses", "--rate", "200",
                             "--format", "raw", "--nonblocking", "-o", out], stdout=subprocess.DEVNULL)  # fmt: skip
    time.sleep(1)  # attached before the connectors start
    return proc


def _check_tasks(system: str, worker: DebeziumConnect | SluiceWorker, names: list[str]) -> None:
    for name in names:
        response = worker.request("GET", f"/connectors/{name}/status")
        if response.status_code != 200:
            continue
        for task in response.json().get("tasks", []):
            if task.get("state") == "FAILED":
                raise RuntimeError(f"{system}: task {task.get('id')} of {name} failed: {task.get('trace', '')[:3000]}")


def _status(worker: DebeziumConnect | SluiceWorker, names: list[str]) -> str:
    parts = []
    for name in names:
        try:
            parts.append(worker.request("GET", f"/connectors/{name}/status").text[:2000])
        except Exception as exc:  # noqa: BLE001 - only a diagnostic
            parts.append(f"{name}: {exc}")
    return "\n" + "\n".join(parts)


def make_changes(conn: psycopg.Connection[Any], table: str, total: int) -> tuple[int, int, int]:
    """60 % inserts, 30 % updates, 10 % deletes in 1,000-row transactions, the deletes removing the
    highest ids last: (changes, deletes, rows left = the largest id left, the last id updated)."""
    inserts, updates = total * 6 // 10, total * 3 // 10
    deletes = total - inserts - updates
    for start in range(0, inserts, 1000):
        end = min(inserts, start + 1000)
        conn.execute(f"INSERT INTO {table} {ROW_SQL} FROM generate_series({start + 1}::bigint, {end}::bigint) g")
    for start in range(0, updates, 1000):
        end = min(updates, start + 1000)
        conn.execute(
            f"UPDATE {table} SET qty = qty + 1, name = name || 'x', amount = amount + 1, "
            f"updated_at = updated_at + INTERVAL '1 second' WHERE id > {start} AND id <= {end}"
        )
    for start in range(0, deletes, 1000):
        end = min(deletes, start + 1000)
        conn.execute(f"DELETE FROM {table} WHERE id > {inserts - end} AND id <= {inserts - start}")
    return inserts + updates + deletes, deletes, inserts - deletes, updates


def one_round(
    n: int,
    bootstrap: str,
    pg: PostgresServer,
    conn: psycopg.Connection[Any],
    target_conn: psycopg.Connection[Any],
    workers: dict[str, Any],
    shown: set[str],
) -> list[Run]:
    table = f"cdc_jdbc_{time.time_ns()}"
    conn.execute(f"CREATE TABLE {table} ({COLUMNS})")
    conn.execute(f"ALTER PUBLICATION bench_pub ADD TABLE {table}")
    slots = {system: f"{system[:3]}_jdbc_{n}" for system in workers}
    for slot in slots.values():
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    made, deletes, rows, updated = make_changes(conn, table, CHANGES)
    wanted = conn.execute(checksum_sql(table, SOURCE_TYPES)).fetchone()
    assert wanted is not None and wanted[0] == rows
    runs = []
    for system in _order(n, workers):
        target_table = f"{system}_{table}"
        conn.execute("CHECKPOINT")
        prefix = f"{system[:3]}{time.time_ns()}"
        topic = create_topic(bootstrap, f"{prefix}.public.{table}")
        source = source_config(pg, prefix, slots[system], table)
        sink = sink_config(system, pg, topic, target_table)
        target = Target(pg, target_table, tuple(wanted), rows, updated)
        try:
            seconds, source_seconds, cpu = run_pipeline(
                system, workers[system], bootstrap, source, sink, target, made + deletes
            )
        finally:
            target.close()
        types = column_types(target_conn, target_table)
        equal, detail = target.got == wanted, ""
        if not equal:
            detail = first_difference(conn, target_conn, table, target_table, types)
            print(f"  round {n} {system}: the target DIFFERS from the source ({target.got} vs {wanted}): {detail}")
        if system not in shown:
            shown.add(system)
            print(f"  {system}'s target table: " + ", ".join(f"{c} {t}" for c, t in types.items()))
        runs.append(Run(system, made, seconds, source_seconds, cpu, equal, detail))
        drop_slot(conn, slots[system])
        target_conn.execute(f'DROP TABLE "{target_table}"')
        print(f"  {_line(n, runs[-1])}", flush=True)
    conn.execute(f"DROP TABLE {table}")
    return runs


def _line(n: int, r: Run) -> str:
    return (
        f"round {n} {r.system:<7}: {r.changes:,} changes in {r.seconds:6.2f}s = {r.rate:>8,.0f} changes/s "
        f"(source alone {r.source_rate:>8,.0f}/s, lag {r.lag:5.2f}s); CPU {r.cpu:6.2f}s = "
        f"{r.cpu_per_million:6.2f} s per million changes; target {'equal' if r.equal else 'DIFFERS'}"
    )


def report(runs: list[Run]) -> None:
    """Each system's medians and the ratios Sluice ÷ Connect, against issue #40's targets."""
    medians: dict[str, tuple[float, float, float, float]] = {}
    for system in SYSTEMS:
        mine = [r for r in runs if r.system == system]
        if not mine:
            continue
        medians[system] = (
            statistics.median(r.rate for r in mine),
            statistics.median(r.lag for r in mine),
            statistics.median(r.cpu_per_million for r in mine),
            statistics.median(r.source_rate for r in mine),
        )
        rate, lag, cpu, source_rate = medians[system]
        wrong = sum(not r.equal for r in mine)
        print(
            f"{system:<7} median {rate:>8,.0f} changes/s end to end (source alone {source_rate:>8,.0f}/s), "
            f"lag {lag:5.2f}s, {cpu:6.2f} CPU s per million changes"
            + (f"; {wrong} of {len(mine)} targets DIFFER" if wrong else "; every target equal to its source")
        )
    if len(medians) == 2:
        (s_rate, s_lag, s_cpu, _), (c_rate, c_lag, c_cpu, _) = medians["sluice"], medians["connect"]
        speedup, cpu = s_rate / c_rate, s_cpu / c_cpu
        print(
            f"Sluice / Connect: changes/s {speedup:.2f}x (target ≥ {TARGET_SPEEDUP:.0f}x: "
            f"{'met' if speedup >= TARGET_SPEEDUP else 'MISSED'}), CPU per change {cpu:.2f}x (target ≤ "
            f"{TARGET_CPU}: {'met' if cpu <= TARGET_CPU else 'MISSED'}), lag {s_lag / c_lag:.2f}x"
        )


def main() -> None:
    print(
        f"CDC → JDBC sink, Sluice vs Kafka Connect + Debezium (JDBC sink {DEFAULT_JDBC_SINK_VERSION}): "
        f"{CHANGES:,} changes, {ROUNDS} rounds, time.precision.mode={TIME_MODE} (2 shared cores: noisy)"
    )
    settings = {
        "shared_buffers": "256MB",
        "max_wal_size": "4GB",
        "checkpoint_timeout": "1h",
        "autovacuum": "off",
        "max_replication_slots": "20",
        "max_wal_senders": "20",
    }
    with (
        tmpdir() as scratch,
        broker() as bootstrap,
        PostgresServer(extra_settings=settings, kill_with_parent=True) as pg,
        psycopg.connect(pg.dsn(), autocommit=True) as conn,
    ):
        pg.create_database(TARGET_DB)
        conn.execute("CREATE PUBLICATION bench_pub")
        (Path(scratch) / "connect").mkdir()
        (Path(scratch) / "sluice").mkdir()
        workers: dict[str, Any] = {}
        if "sluice" in SYSTEMS_RUN:
            # Both connectors' task code is imported once by the task hosts' fork server, as
            # Connect loads its plugins' classes when its worker starts: a round then times the
            # pipeline, not the first import of psycopg, SQLAlchemy and the connectors.
            preload = "io.debezium.connector.postgresql.PostgresConnector,io.confluent.connect.jdbc.JdbcSinkConnector"
            workers["sluice"] = SluiceWorker(Path(scratch) / "sluice", bootstrap, **{"task.host.preload": preload}).start()
        if "connect" in SYSTEMS_RUN:
            connect = DebeziumConnect(Path(scratch) / "connect", bootstrap, jdbc_sink_version=DEFAULT_JDBC_SINK_VERSION)
            workers["connect"] = connect.start()
        runs: list[Run] = []
        shown: set[str] = set()
        try:
            with psycopg.connect(pg.dsn(TARGET_DB), autocommit=True) as target_conn:
                for n in range(1, ROUNDS + 1):
                    runs += one_round(n, bootstrap, pg, conn, target_conn, workers, shown)
        finally:
            for worker in workers.values():
                worker.stop()
        report(runs)


if __name__ == "__main__":
    main()
