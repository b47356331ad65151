"""topic → JdbcSink → PostgreSQL, against a bare psycopg ``COPY`` of the same rows into the same server.

Run: ``python -m benchmarks.jdbc_sink`` (``SLUICE_BENCH_RECORDS``, ``SLUICE_BENCH_ROUNDS`` to change
the size; ``SLUICE_BENCH_FORMATS``, default ``schemas,schemaless,avro``, which value formats). Prints
rows/s for the raw COPY, for the sink in ``insert`` mode (COPY straight into the table) and in
``upsert`` mode (COPY into a staging table + ``INSERT … ON CONFLICT``), and their ratios, for each
value format: ``schemas`` is JsonConverter with ``schemas.enable=true`` (each value the
``{"schema": …, "payload": …}`` envelope, as Connect users run the JDBC sink), ``schemaless`` the
plain JSON objects, ``avro`` Confluent's Avro wire format with a Schema Registry (Apicurio, started
for the run) and the AvroConverter. Both sink modes render the COPY data column-wise and send each batch's
transaction without waiting for it (see ``connectors/sink/jdbc/pgcopy.py`` and ``pgsend.py``). The
sink runs in an in-process standalone herder: consume, put (the raw values read into columns by the
native parser), commit. No assertions. Each Sluice run also prints the CPU seconds of the sink's process and of its task
thread (the rest is the JSON helper thread and librdkafka's threads).

A sink's time runs from its connector configuration to the last row being committed, so it
includes starting the task, joining the consumer group and opening the database connection.
One-off costs a running worker has paid long before are paid before timing instead, by a small
warm-up run: importing SQLAlchemy, and the broker creating its internal offsets topic on the
first group commit (seconds on a fresh broker, which would otherwise land on the first mode
measured). Completion is detected with ``max(id)`` (an index lookup) and then confirmed with
``count(*)``: counting a growing table five times a second would take server CPU from the sink.

No measurement pays for an earlier one's leftovers: the server runs without autovacuum (which
would otherwise vacuum and analyze the previous run's million rows during whichever run came
next) and with WAL room for a whole round, the previous run's table is dropped and a
``CHECKPOINT`` is taken before each timed run. On two shared cores these leftovers made the bare
``COPY`` vary 1.7x from round to round.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

import orjson
import psycopg
from confluent_kafka import Producer

import sluice.connectors.sink.jdbc.task  # noqa: F401 - imported before timing, as a running worker has it
from benchmarks.common import (
    RECORDS,
    ROUNDS,
    Result,
    broker,
    cpu_seconds,
    create_topic,
    median_result,
    thread_times,
    wait_until,
)
from sluice.connectors.jdbc_common.connection import import_sqlalchemy
from sluice.converters.avro import AvroConverter
from sluice.converters.json import JsonConverter
from sluice.deploy.schema_registry import SchemaRegistryServer
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.worker.config.models import WorkerConfig
from sluice.worker.runtime import tune_gc
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.worker import Worker
from tests.services.postgres import PostgresServer

COLUMNS = "id bigint, name text, email text, amount double precision, qty integer, active boolean, city text, score double precision"
SINK = "sluice.connectors.sink.jdbc.connector.JdbcSinkConnector"


def make_rows(count: int) -> list[tuple[object, ...]]:
    return [
        (i, f"name-{i}", f"user{i}@example.com", i * 1.25, i % 1000, i % 2 == 0, "Lisbon", i / 7) for i in range(count)
    ]


#: The value formats measured (``SLUICE_BENCH_FORMATS``): JSON with schemas, schemaless JSON, Avro.
FORMATS = [f.strip() for f in os.environ.get("SLUICE_BENCH_FORMATS", "schemas,schemaless,avro").split(",") if f.strip()]
#: The Schema Registry's URL while an ``avro`` run needs one (set by :func:`main`).
REGISTRY: dict[str, str] = {}
NAMES = ["id", "name", "email", "amount", "qty", "active", "city", "score"]
#: The Connect schema of a row as JsonConverter writes it (``schemas.enable=true``).
SCHEMA = orjson.dumps(
    {
        "type": "struct",
        "fields": [
            {"type": kind, "optional": name != "id", "field": name}
            for name, kind in zip(
                NAMES, ["int64", "string", "string", "double", "int32", "boolean", "string", "double"], strict=True
            )
        ],
        "optional": False,
        "name": "bench.Row",
    }
)


def encode_value(row: tuple[object, ...], fmt: str) -> bytes:
    """A row as the value a JsonConverter producer writes: the envelope for ``schemas``."""
    payload = orjson.dumps(dict(zip(NAMES, row)))
    return b'{"schema":' + SCHEMA + b',"payload":' + payload + b"}" if fmt == "schemas" else payload


def avro_values(topic: str, rows: list[tuple[object, ...]]) -> list[bytes]:
    """The rows as the AvroConverter writes them (registering the schema)."""
    converter = AvroConverter()
    converter.configure({"schema.registry.url": REGISTRY["url"]}, False)
    schema = JsonConverter().as_connect_schema(orjson.loads(SCHEMA))
    values = converter.from_connect_batch(topic, [schema] * len(rows), [dict(zip(NAMES, row)) for row in rows])
    converter.close()
    return values  # type: ignore[return-value]


def fill_topic(bootstrap: str, rows: list[tuple[object, ...]], fmt: str = "schemaless") -> str:
    topic = create_topic(bootstrap, f"bench-jdbc-{fmt}-{time.time_ns()}")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    encoded = avro_values(topic, rows) if fmt == "avro" else None
    for i, row in enumerate(rows):
        value = encoded[i] if encoded is not None else encode_value(row, fmt)
        while True:
            try:
                producer.produce(topic, value)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush()
    return topic


#: Server settings for the benchmark: no background work that one run leaves to land on the next.
BENCH_SETTINGS = {"autovacuum": "off", "max_wal_size": "8GB", "checkpoint_timeout": "1h"}
TABLES = ("raw_copy", "sink_insert", "sink_upsert")


def create_table(pg: PostgresServer, name: str, primary_key: bool) -> None:
    """A fresh, empty table ``name``, after dropping every table a timed run wrote and a checkpoint."""
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        for table in {name, *TABLES}:
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')
        conn.execute(f'CREATE TABLE "{name}" ({COLUMNS}{", PRIMARY KEY (id)" if primary_key else ""})')
        conn.execute("CHECKPOINT")


class Completion:
    """Whether all ``n`` rows (ids 0 … n-1) are in ``table``: a cheap ``max(id)`` poll, then ``count(*)``."""

    def __init__(self, pg: PostgresServer, table: str, n: int) -> None:
        self.conn = psycopg.connect(pg.dsn(), autocommit=True)
        self.table, self.n = table, n
        self.first_row_at: float | None = None

    def __call__(self) -> bool:
        row = self.conn.execute(f'SELECT max(id) FROM "{self.table}"').fetchone()
        top = row[0] if row else None
        if top is not None and self.first_row_at is None:
            self.first_row_at = time.perf_counter()
        if top is None or top < self.n - 1:
            return False
        counted = self.conn.execute(f'SELECT count(*) FROM "{self.table}"').fetchone()
        return bool(counted and counted[0] >= self.n)

    def close(self) -> None:
        self.conn.close()


def raw_copy(pg: PostgresServer, rows: list[tuple[object, ...]]) -> Result:
    """The raw limit: one COPY FROM STDIN with write_row per row, in one transaction."""
    create_table(pg, "raw_copy", primary_key=True)
    start = time.perf_counter()
    with psycopg.connect(pg.dsn()) as conn, conn.cursor() as cur:
        with cur.copy('COPY "raw_copy" FROM STDIN') as copy:
            for row in rows:
                copy.write_row(row)
        conn.commit()
    return Result("bare psycopg COPY write_row", len(rows), 0, time.perf_counter() - start)


def jdbc_herder(bootstrap: str, fmt: str = "schemaless") -> StandaloneHerder:
    """:func:`benchmarks.common.herder` with JSON values."""
    config = WorkerConfig.from_mapping(
        {
            "bootstrap.servers": bootstrap,
            "listeners": "http://127.0.0.1:0",
            "offset.flush.interval.ms": "5000",
            "key.converter": "StringConverter",
            **(
                {
                    "value.converter": "io.confluent.connect.avro.AvroConverter",
                    "value.converter.schema.registry.url": REGISTRY["url"],
                }
                if fmt == "avro"
                else {
                    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                    "value.converter.schemas.enable": str(fmt == "schemas").lower(),
                }
            ),
        }
    )
    h = StandaloneHerder(Worker(config, PluginRegistry(), MemoryOffsetStore()))
    h.start()
    tune_gc()
    return h


def sluice_sink(pg: PostgresServer, bootstrap: str, topic: str, n: int, mode: str, fmt: str = "schemaless") -> Result:
    table = f"sink_{mode}"
    create_table(pg, table, primary_key=True)
    h = jdbc_herder(bootstrap, fmt)
    config = {
        "connector.class": SINK,
        "topics": topic,
        "connection.url": pg.url(),
        "table.name.format": table,
        "insert.mode": mode,
        "batch.size": "10000",
        # Records per put(): the runner hands the task this many at once (Connect's max.poll.records).
        "consumer.override.max.poll.records": "10000",
    }
    if mode == "upsert":
        config.update({"pk.mode": "record_value", "pk.fields": "id"})
    done = Completion(pg, table, n)
    try:
        cpu0 = cpu_seconds()
        start = time.perf_counter()
        h.put_connector_config(f"bench-jdbc-{mode}-{time.time_ns()}", config, allow_replace=False)
        wait_until(done, timeout=900, poll=0.02)
        elapsed = time.perf_counter() - start
        cpu, task_cpu = cpu_seconds() - cpu0, task_thread_cpu()
    finally:
        h.stop()
        done.close()
    if done.first_row_at is not None:
        print(f"    {mode}: first rows committed {done.first_row_at - start:.2f} s after the connector was created")
    print(
        f"    {mode}: sink process {cpu:.2f} CPU s, of which the task thread {task_cpu:.2f} (the rest: JSON helper, librdkafka)"
    )
    return Result(f"Sluice topic → JdbcSink ({mode}, {fmt})", n, 0, elapsed)


def task_thread_cpu() -> float:
    """CPU seconds of this process's live task threads (``task-…``; Linux ``/proc``, else 0).

    The task thread is the sink's critical path; with the JSON helper (connectors/sink/jdbc/task.py)
    it carries about a third of the sink's CPU, so on a worker with a core to spare for the helper
    the rate is bound by the larger of the two, not by their sum as on these two shared cores."""
    times = thread_times()
    ids = {t.native_id for t in threading.enumerate() if t.name.startswith("task-")}
    return sum(seconds for tid, (_, seconds) in times.items() if tid in ids)


def warm_up(pg: PostgresServer, bootstrap: str) -> None:
    """What a running worker has done long before: import SQLAlchemy, make the broker create its
    offsets topic (the first consumer group commit), and run the JSON fast path once. A small insert
    run does all three: 30,000 rows are three batches, and only the first takes the ordinary path
    (it reads the table's column types). With a one-batch warm-up the first timed insert spent
    0.15-0.2 CPU s more than the later rounds (first use of the helper thread, the native parser's
    and Arrow's allocations, NumPy's structured types) and measured 0.65 against 0.70-0.75."""
    import_sqlalchemy()
    rows = make_rows(30_000)
    for fmt in FORMATS:
        sluice_sink(pg, bootstrap, fill_topic(bootstrap, rows, fmt), len(rows), "insert", fmt)


def main() -> list[tuple[Result, Result]]:
    rows = make_rows(RECORDS)
    print(f"topic → JDBC sink (PostgreSQL): {RECORDS:,} rows of 8 columns, {ROUNDS} rounds, formats {FORMATS}")
    results: list[tuple[Result, Result]] = []
    with (
        broker() as bootstrap,
        PostgresServer(extra_settings=BENCH_SETTINGS, kill_with_parent=True) as pg,
        SchemaRegistryServer(kill_with_parent=True) if "avro" in FORMATS else contextlib.nullcontext() as registry,
    ):
        if registry is not None:
            REGISTRY["url"] = registry.url
        warm_up(pg, bootstrap)
        topics = {fmt: fill_topic(bootstrap, rows, fmt) for fmt in FORMATS}
        raws: list[Result] = []
        ours: dict[str, list[Result]] = {f"{m} {f}": [] for f in FORMATS for m in ("insert", "upsert")}
        for i in range(ROUNDS):
            raws.append(raw_copy(pg, rows))
            for key in ours:
                mode, fmt = key.split()
                ours[key].append(sluice_sink(pg, bootstrap, topics[fmt], len(rows), mode, fmt))
            print(
                f"  round {i + 1}: raw COPY {raws[-1].rate:>9,.0f} rows/s   "
                + "   ".join(
                    f"{m} {r[-1].rate:>9,.0f} rows/s (ratio {r[-1].rate / raws[-1].rate:.2f})" for m, r in ours.items()
                )
            )
        print(f"{median_result(raws).name:<42} {median_result(raws).rate:>10,.0f} rows/s (median)")
        for runs in ours.values():
            raw, mine = median_round(raws, runs)
            print(
                f"{mine.name:<42} {median_result(runs).rate:>10,.0f} rows/s (median)  "
                f"ratio {mine.rate / raw.rate:.2f} (median of the rounds' ratios)"
            )
            results.append((raw, mine))
    return results


def median_round(raws: list[Result], ours: list[Result]) -> tuple[Result, Result]:
    """The round with the median ratio. Raw and Sluice runs of one round share the machine's load
    at that time; dividing the median of each (possibly from different rounds) would not."""
    rounds = sorted(zip(raws, ours), key=lambda pair: pair[1].rate / pair[0].rate)
    return rounds[len(rounds) // 2]


if __name__ == "__main__":
    main()
