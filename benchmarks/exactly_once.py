"""Exactly-once against at-least-once delivery (KIP-618) for the sequence, JDBC, PostgreSQL CDC,
FileStream and S3 restore sources, at the default transaction boundary (``poll``) and at
``interval`` (100 ms), in the same run.

Run: ``python -m benchmarks.exactly_once``. Sizes: ``SLUICE_BENCH_EOS_RECORDS`` (600,000 sequence
records and as many file lines; a quarter as many rows, changes and restored records for JDBC, CDC
and S3, rounded down to whole objects), ``SLUICE_BENCH_ROUNDS`` (3).
Prints records/s per source and mode, the median of the rounds (the modes alternate within each
round, so drift on this shared machine hits both), the ratio exactly-once / at-least-once of those
medians and the median of each round's own ratio (steadier: a CDC run's rate alone wanders ±25 %
between rounds here, PostgreSQL, the broker and the task sharing two cores). No assertions.

Each run drives one :class:`~worker.runners.source.SourceTaskRunner` on this thread against a real
broker and a Kafka offset store, as a distributed worker's task thread would, with the worker's
defaults: the source producer's settings, ``offset.flush.interval.ms=60000`` at least once (so
within a run only the final commit), a transaction per poll exactly once, and each source's own
default batch size (1,000 sequence records, ``batch.max.rows=1000``, ``max.batch.size=2048``,
``batch.size=2000`` lines, ``record.batch.max.size=2000``).
A last line gives the raw limit: a bare producer committing a
transaction per 1,000 records against the same producer without transactions.
The time runs from the task's first poll until its records are delivered and their offsets
committed (the final ``commit_offsets``: a flush and an offset write, or the last transaction's
commit); starting the task (``init_transactions``, the slot, the table reflection, the read of the
offsets topic) is left out, and so is the new topic's leader election (each run waits for it).

The data: the sequence source's records (JSON with schemas; the friendliest case); a PostgreSQL
table of eight typed columns read in ``mode=incrementing``; the same table's inserts, updates and
deletes (in 1,000-row transactions) streamed by the CDC source, each run from a slot of its own
created before the changes, so every run reads the same WAL; a file of 200-byte lines for the
FileStream source (string values, no keys), every run reading it from the start; and an archive
the S3 sink wrote once before the runs (gzipped JSON objects of 10,000 records, a topic of three
partitions, string keys and timestamps in sidecars, rows of six fields of about 200 bytes) on the
local S3 server (S3Proxy), which every restore run replays from offsets of its own (its connector
name) into that same topic. Keys and values go through the JsonConverter with schemas, as a
user's Connect-compatible setup has them.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from benchmarks.cdc_source import drop_slot, make_changes
from benchmarks.common import broker, create_topic, make_lines, tmpdir, write_file
from benchmarks.jdbc_source import fill_table
from benchmarks.s3_sink import make_rows
from sluice.connectors.api import SinkRecord, SinkRecordBatch, SourceConnector
from sluice.connectors.sink.s3.task import S3SinkTask
from sluice.connectors.source.file.connector import FileStreamSourceConnector
from sluice.connectors.source.jdbc.connector import JdbcSourceConnector
from sluice.connectors.source.postgres_cdc.connector import PostgresCdcSourceConnector
from sluice.connectors.source.s3.connector import S3SourceConnector
from sluice.connectors.source.sequence.connector import SequenceSourceConnector
from sluice.connectors.testkit.harness import runtime_task_configs
from sluice.converters.header import SimpleHeaderConverter
from sluice.converters.json import JsonConverter
from sluice.offsets.kafka import KafkaOffsetStore
from sluice.worker.config.local_paths import NO_LOCAL_FILES, PathGrant
from sluice.worker.execution.clients import SOURCE_PRODUCER_DEFAULTS
from sluice.worker.runners.source import SourceTaskRunner
from sluice.worker.runners.source_transactions import ExactlyOnce
from sluice.worker.runtime import tune_gc
from sluice.worker.status import ConnectorTaskId, TargetState
from tests.services.postgres import PostgresServer
from tests.services.s3_server import S3Server

RECORDS = int(os.environ.get("SLUICE_BENCH_EOS_RECORDS", "600000"))
ROUNDS = int(os.environ.get("SLUICE_BENCH_ROUNDS", "3"))
#: Mode -> its tag in run names: at least once; exactly once at the default boundary (the figure
#: the target is about); exactly once at ``transaction.boundary=interval`` every 100 ms, for comparison.
MODES = {"at-least-once": "al", "exactly-once": "eo", "exactly-once interval": "ei"}
INTERVAL_MS = 100
OFFSETS_TOPIC = "bench-eos-offsets"
TABLE = "bench_eos"
#: The restore source's archive: a topic of this many partitions the S3 sink wrote to the bucket in
#: objects of ``S3_OBJECT_RECORDS`` records; every restore run replays it into that same topic.
S3_TOPIC = "bench-eos-s3"
S3_PARTITIONS = 3
S3_OBJECT_RECORDS = 10_000
#: The file source's lines (about 200 bytes each), and the restore source's records (whole objects only).
FILE_LINES = RECORDS
S3_RECORDS = max(1, RECORDS // 4 // (S3_PARTITIONS * S3_OBJECT_RECORDS)) * S3_PARTITIONS * S3_OBJECT_RECORDS
S3_FORMAT = {"format.class": "json", "s3.compression.type": "gzip"}
CDC_COLUMNS = "id bigint PRIMARY KEY, name text, email text, amount numeric(12,2), qty int, active boolean, created timestamptz, score float8"


class _Listener:
    """The herder's status listener: nothing to report to here."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        return lambda *args: None


@dataclass
class Source:
    """One source under test: its connector and how to configure one run of it."""

    name: str
    connector: type[SourceConnector]
    records: int
    config: Callable[[str], dict[str, Any]]  # run name -> connector config
    topic: Callable[[str], str]  # run name -> the topic its records go to
    #: Whether each run writes to a topic of its own (created by the run), or to one made beforehand.
    topic_per_run: bool = True
    #: What the task may open: a worker's ``connector.allowed.paths``.
    local_files: PathGrant = NO_LOCAL_FILES


def _converter(is_key: bool) -> JsonConverter:
    converter = JsonConverter()
    converter.configure({"schemas.enable": True}, is_key)
    return converter


def _runner(source: Source, run: str, bootstrap: str, store: KafkaOffsetStore, mode: str) -> SourceTaskRunner:
    task_id = ConnectorTaskId(run, 0)
    config = source.config(run)
    task_config = runtime_task_configs(source.connector, config, 1)[0]
    producer = {
        **SOURCE_PRODUCER_DEFAULTS,
        "bootstrap.servers": bootstrap,
        "client.id": f"connector-producer-{task_id}",
    }
    exactly_once = None
    if mode != "at-least-once":
        boundary = "interval" if mode.endswith("interval") else "poll"
        exactly_once = ExactlyOnce(f"bench-{run}-0", OFFSETS_TOPIC, boundary, INTERVAL_MS)
        producer = exactly_once.producer_config(producer)
    headers = SimpleHeaderConverter()
    headers.configure({})
    return SourceTaskRunner(
        task_id, source.connector.task_class(), task_config,  # type: ignore[arg-type]
        listener=_Listener(), initial_state=TargetState.STARTED,  # type: ignore[arg-type]
        producer_config=producer, offset_store=store, key_converter=_converter(True),
        value_converter=_converter(False), header_converter=headers, exactly_once=exactly_once,
        local_files=source.local_files,
    )  # fmt: skip


def _wait_for_leader(bootstrap: str, topic: str, timeout: float = 30.0) -> None:
    """Until the new topic's partitions have leaders. A task at least once starts producing at once,
    and its first records would wait out the topic's election inside the timed run (about half a
    second: most of a run of the fast file source); exactly once, ``init_transactions`` hides it."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is not None and metadata.error is None and metadata.partitions:
            if all(p.leader >= 0 for p in metadata.partitions.values()):
                return
        time.sleep(0.02)
    raise TimeoutError(f"{topic} has no leader after {timeout:.0f} s")


def timed_run(source: Source, run: str, bootstrap: str, store: KafkaOffsetStore, mode: str) -> float:
    """Records/s of one run: from the first poll until every record is delivered and committed."""
    if source.topic_per_run:
        create_topic(bootstrap, source.topic(run))
        _wait_for_leader(bootstrap, source.topic(run))
    runner = _runner(source, run, bootstrap, store, mode)
    started = time.perf_counter()
    runner.initialize()
    start_s = time.perf_counter() - started
    polls = 0  # that returned records: at boundary=poll, one transaction each
    try:
        started = time.perf_counter()
        while runner.records_produced < source.records:
            before = runner.records_produced
            runner.iteration()
            polls += runner.records_produced > before
        assert runner.commit_offsets(), f"{run}: the last commit failed"
        elapsed = time.perf_counter() - started
    finally:
        runner.task.stop()
        runner.close()
    per_poll = runner.records_produced / max(polls, 1)
    print(
        f"  {run}: {runner.records_produced / elapsed:,.0f} records/s, {per_poll:,.0f} records a poll, task start {start_s:.2f} s",
        flush=True,
    )
    return runner.records_produced / elapsed


def sources(pg: PostgresServer, slots: dict[str, str], lines: Path, s3: dict[str, str]) -> list[Source]:
    """The five sources; ``slots`` maps a CDC run's name to the slot created for it, ``lines`` is the
    file source's file and ``s3`` the restore source's bucket keys."""
    database = {
        "database.hostname": "127.0.0.1",
        "database.port": str(pg.port),
        "database.user": "postgres",
        "database.dbname": pg.database,
    }
    return [
        Source("sequence", SequenceSourceConnector, RECORDS, lambda run: {"topic": run}, lambda run: run),
        Source(
            "jdbc", JdbcSourceConnector, RECORDS // 4,
            lambda run: {"connection.url": pg.url(), "mode": "incrementing", "incrementing.column.name": "id",
                         "table.whitelist": TABLE, "topic.prefix": f"{run}-"},
            lambda run: f"{run}-{TABLE}",
        ),
        Source(
            "cdc", PostgresCdcSourceConnector, RECORDS // 4,
            lambda run: {**database, "topic.prefix": run, "slot.name": slots[run], "publication.name": "bench_eos_pub",
                         "publication.autocreate.mode": "disabled", "table.include.list": rf"public\.{TABLE}_cdc",
                         "snapshot.mode": "no_data"},
            lambda run: f"{run}.public.{TABLE}_cdc",
        ),
        Source("file", FileStreamSourceConnector, FILE_LINES, lambda run: {"file": str(lines), "topic": run},
               lambda run: run, local_files=PathGrant((lines.parent.resolve(),))),
        Source(
            "s3", S3SourceConnector, S3_RECORDS,
            lambda run: {**s3, **S3_FORMAT, "topics": S3_TOPIC}, lambda run: S3_TOPIC, topic_per_run=False,
        ),
    ]  # fmt: skip


def prepare_s3(server: S3Server, bootstrap: str) -> dict[str, str]:
    """The restore source's archive, written once by the S3 sink (keys and timestamps in sidecars,
    gzipped JSON objects): rows of about 200 bytes with string keys over ``S3_PARTITIONS``
    partitions. Returns the connector keys that reach the bucket."""
    bucket = server.create_bucket(f"bench-eos-{uuid.uuid4().hex[:8]}")
    connection = server.connector_config(bucket)
    create_topic(bootstrap, S3_TOPIC, partitions=S3_PARTITIONS)
    sink = S3SinkTask()
    sidecars = {"store.kafka.keys": "true", "store.kafka.timestamps": "true"}
    # Uploads on this thread: every object is in the bucket when put() returns.
    sink.start({**connection, **S3_FORMAT, **sidecars, "flush.size": str(S3_OBJECT_RECORDS), "s3.upload.threads": "0"},
               None)  # type: ignore[arg-type]  # fmt: skip
    rows = make_rows(S3_RECORDS)
    records = [
        SinkRecord(
            S3_TOPIC, i % S3_PARTITIONS, i // S3_PARTITIONS, row, key=f"customer-{i % 5000:05d}", timestamp=row["ts"]
        )
        for i, row in enumerate(rows)
    ]
    for start in range(0, len(records), S3_OBJECT_RECORDS):
        sink.put(SinkRecordBatch.of(records[start : start + S3_OBJECT_RECORDS]))
    sink.stop()
    print(f"S3: {S3_RECORDS:,} records archived in objects of {S3_OBJECT_RECORDS:,}", flush=True)
    return connection


def prepare_cdc(pg: PostgresServer, runs: list[str]) -> dict[str, str]:
    """A slot per CDC run, then the changes every one of them streams."""
    slots = {run: f"bench_{uuid.uuid4().hex[:8]}" for run in runs}
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {TABLE}_cdc ({CDC_COLUMNS})")
        conn.execute(f"CREATE PUBLICATION bench_eos_pub FOR TABLE {TABLE}_cdc")
        for slot in slots.values():
            conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        changes = make_changes(conn, f"{TABLE}_cdc", RECORDS // 4)
    print(f"CDC: {changes:,} changes in the WAL for {len(slots)} slots", flush=True)
    return slots


def main() -> None:
    tune_gc()
    print(
        f"Exactly-once vs at-least-once, transaction.boundary=poll, {ROUNDS} rounds (2 shared cores: noisy)", flush=True
    )
    with (
        broker() as bootstrap,
        PostgresServer(kill_with_parent=True) as pg,
        S3Server(kill_with_parent=True) as s3,
        tmpdir() as d,
    ):
        create_topic(bootstrap, OFFSETS_TOPIC, partitions=5)
        store = KafkaOffsetStore(OFFSETS_TOPIC, bootstrap, client_id="bench-eos")
        store.start()
        fill_table(pg, RECORDS // 4, TABLE)
        slots = prepare_cdc(pg, [f"cdc-{tag}-{r}" for r in range(ROUNDS + 1) for tag in MODES.values()])
        lines = write_file(make_lines(FILE_LINES), Path(d))
        bucket = prepare_s3(s3, bootstrap)
        rates: dict[tuple[str, str], list[float]] = {}
        for source in sources(pg, slots, lines, bucket):
            # Round 0 warms up: imports, the broker's transaction coordinator, the table's pages.
            for round_ in range(ROUNDS + 1):
                for mode in list(MODES)[:: 1 if round_ % 2 else -1]:
                    rate = timed_run(source, f"{source.name}-{MODES[mode]}-{round_}", bootstrap, store, mode)
                    if round_:
                        rates.setdefault((source.name, mode), []).append(rate)
        raw = raw_producer(bootstrap)
        store.stop()
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            for slot in slots.values():
                drop_slot(conn, slot)
    print()
    for name in ("sequence", "jdbc", "cdc", "file", "s3"):
        print_figures(name, rates)
    print(
        f"raw producer, 1,000 records a transaction: {raw[1]:,.0f}/s against {raw[0]:,.0f}/s without: ratio {raw[1] / raw[0]:.2f}"
    )


def print_figures(name: str, rates: dict[tuple[str, str], list[float]]) -> None:
    """One source's line: the medians of its modes and their ratios to at least once."""
    at_least, exactly, interval = (statistics.median(rates[(name, mode)]) for mode in MODES)
    # Within a round the modes ran back to back: the median of the rounds' own ratios is steadier
    # than the ratio of medians when the machine's speed wanders between rounds (CDC: ±25 %).
    paired = statistics.median(e / a for e, a in zip(rates[(name, "exactly-once")], rates[(name, "at-least-once")]))
    print(
        f"{name:9s} at-least-once {at_least:>9,.0f}/s  exactly-once (poll) {exactly:>9,.0f}/s ratio {exactly / at_least:.2f}"
        f" (per round {paired:.2f})  (interval {INTERVAL_MS} ms) {interval:>9,.0f}/s ratio {interval / at_least:.2f}"
    )


def raw_producer(bootstrap: str, records: int = 300_000, per_transaction: int = 1000) -> tuple[float, float]:
    """The protocol's own limit: records/s of a bare idempotent producer (200-byte values, the
    source producer's settings) without transactions, and committing a transaction of
    ``per_transaction`` records plus one offset record at a time, as a source task at
    ``transaction.boundary=poll`` does with polls of that size."""
    payload = b"x" * 200
    rates = []
    for transactional in (False, True):
        topic = create_topic(bootstrap, f"bench-eos-raw-{uuid.uuid4().hex[:6]}")
        config = {**SOURCE_PRODUCER_DEFAULTS, "bootstrap.servers": bootstrap}
        if transactional:
            config = ExactlyOnce(topic, OFFSETS_TOPIC, "poll", 0).producer_config(config)
        producer = Producer(config)
        if transactional:
            producer.init_transactions(30)
        started = time.perf_counter()
        for _ in range(records // per_transaction):
            if transactional:
                producer.begin_transaction()
            for _ in range(per_transaction):
                producer.produce(topic, payload)
            producer.poll(0)
            if transactional:
                producer.produce(OFFSETS_TOPIC, b"{}", b"raw", partition=0)
                producer.commit_transaction(30)
        producer.flush(30)
        rates.append(records / (time.perf_counter() - started))
    return rates[0], rates[1]


if __name__ == "__main__":
    main()
