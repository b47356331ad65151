"""JDBC table → topic backfill on Spark: Sluice's job against bare Spark and the streaming source.

For each table size (``SLUICE_BENCH_BACKFILL_ROWS``, default ``1000000,5000000``) it measures, on one
warm SparkSession (``local[2]``, ``SLUICE_BENCH_BACKFILL_PARTITIONS`` JDBC partitions, default 4):

* **noop** — Spark's partitioned JDBC read into the ``noop`` sink (every column materialized);
* **bare Spark** — the same read, ``to_json(struct(*))`` values keyed by id, written with Spark's
  ``kafka`` sink: what a user would write by hand, no Sluice code;
* **bare Spark, same envelope** — the same job writing what Sluice writes by default, the
  JsonConverter ``{"schema": …, "payload": …}`` envelope, with the schema typed out by hand as a
  literal: the Kafka write of the same records, so the ratio against it is Sluice's own overhead;
* **Sluice** — :func:`sluice.connectors.backfill.run_job` of a ``jdbc_to_topic`` spec (reflection, bounds
  and count query, the CDC position (a temporary slot's exported snapshot), Connect JSON envelope, partitioning as the streaming producer);
* **Sluice, schemas off** — the same without the JSON schema envelope, whose values are about the
  size of bare Spark's (the envelope makes each value several times larger);
* **Sluice, CDC flavour** — the same table written as a PostgreSQL CDC connector's snapshot
  (``target.cdc``: Debezium read events, the connector's keys and partitioner; larger values, as
  the Debezium envelope schema is larger);
* **streaming JDBC source** (first size only; ``SLUICE_BENCH_BACKFILL_STREAMING=0`` skips it) — ``JdbcSource`` in ``mode=bulk`` through a worker.

Two more runs say how far the ``noop`` ratio can go on these cores:

* **Sluice's serialization → noop** — the key, value and partition columns the job builds, by the
  job's own functions, written to ``noop``: the read and the serialization without the Kafka write;
* **raw Kafka write** — Kafka's own load generator (``ProducerPerformance``: Kafka's Java producer,
  no Spark, no Sluice) writing values Sluice wrote, with the job's producer settings, and once
  10-byte values: the CPU per record of the producer and the broker (the difference between
  runs of 1,000,000 and 5,000,000 records, so the JVM's start and JIT are not counted).

When the cores are the limit, rates go as the inverse of CPU per row, so the best Sluice/noop any
writer can reach here is the noop read's CPU per row over (serialization → noop + raw write): the
benchmark prints it, and the same bound for 10-byte records with no serialization at all.

It prints rows/s, the value size of each run, and the ratios Sluice/bare (target ≥ 0.9, against the
bare job writing the same envelope; the ratio against plain ``to_json`` values is printed too),
Sluice/noop (≥ 0.7, next to bare Spark's own ratio to noop and the bound above) and the
speed-up over the streaming source. Figures on a shared 2-core machine are noisy; nothing is asserted.
Bare Spark uses the producer settings the job defaults to
(:data:`sluice.connectors.backfill.jdbc_topic.PRODUCER_DEFAULTS`), so the comparison is of everything else.

Each line also shows the CPU seconds the run cost, split between Spark's JVM, the Kafka broker,
PostgreSQL and this process (read from ``/proc`` for this process's children): on a machine whose
cores are shared, CPU time shows where the work goes better than the wall clock does.

    python -m benchmarks.backfill
"""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg

from benchmarks.common import Result, broker, create_topic, high_watermark, producer_performance, wait_until
from tests.services.postgres import PostgresServer

SIZES = [int(s) for s in os.environ.get("SLUICE_BENCH_BACKFILL_ROWS", "1000000,5000000").split(",") if s]
PARTITIONS = int(os.environ.get("SLUICE_BENCH_BACKFILL_PARTITIONS", "4"))
TOPIC_PARTITIONS = 4


def _producer() -> dict[str, str]:
    from sluice.connectors.backfill.jdbc_topic import PRODUCER_DEFAULTS

    return dict(PRODUCER_DEFAULTS)


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds() -> dict[str, float]:
    """CPU seconds so far of this process and its descendants, by role (exited PostgreSQL backends
    are in the postmaster's children time)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    roles = {"spark": 0.0, "broker": 0.0, "postgres": 0.0, "python": 0.0}
    todo = [os.getpid()]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        used = sum(int(x) for x in fields[11:15]) / _TICK  # utime, stime, cutime, cstime
        if pid == os.getpid():
            roles["python"] += sum(int(x) for x in fields[11:13]) / _TICK
        elif b"kafka.Kafka" in cmd:
            roles["broker"] += used
        elif b"java" in cmd:
            roles["spark"] += used
        elif b"postgres" in cmd:
            roles["postgres"] += used
    return roles


def with_cpu(run: Any, *args: Any, **kwargs: Any) -> tuple[Result, dict[str, float]]:
    before = cpu_seconds()
    result: Result = run(*args, **kwargs)
    after = cpu_seconds()
    return result, {k: after[k] - before[k] for k in before}


def cpu_line(result: Result, cpu: dict[str, float]) -> str:
    total = sum(cpu.values())
    split = "  ".join(f"{k} {v:.1f}" for k, v in cpu.items())
    size = f"{result.bytes // result.records} B/value, " if result.bytes else ""
    return f"    {size}CPU {total:6.1f}s ({total / result.seconds:.2f} cores busy): {split}"


def load_table(pg: PostgresServer, rows: int) -> str:
    table = f"backfill_src_{rows}"
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {table}")
        conn.execute(
            f"CREATE TABLE {table} (id bigint PRIMARY KEY, customer text NOT NULL, amount numeric(12,2) NOT NULL, "
            "status text, created_at timestamptz NOT NULL, note text)"
        )
        conn.execute(
            f"INSERT INTO {table} SELECT i, 'customer-' || (i % 10000), (i % 100000) / 100.0, "
            "CASE WHEN i % 3 = 0 THEN 'paid' ELSE 'open' END, timestamptz '2024-01-01' + i * interval '1 second', "
            f"md5(i::text) FROM generate_series(1, {rows}) i"
        )
        conn.execute(f"VACUUM ANALYZE {table}")
        # Write the load's dirty pages now: the checkpointer would otherwise do it during (and be
        # charged to) the first timed run.
        conn.execute("CHECKPOINT")
        backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
    # The loading backend's CPU reaches the postmaster's children time when it has exited: wait
    # for that, or it is charged to the first timed run.
    wait_until(lambda: not os.path.exists(f"/proc/{backend}"), timeout=10, poll=0.05)
    return table


def jdbc_reader(spark: Any, pg: PostgresServer, table: str, rows: int) -> Any:
    return (
        spark.read.format("jdbc")
        .option("url", pg.jdbc_url())
        .option("driver", "org.postgresql.Driver")
        .option("user", "postgres")
        .option("dbtable", f"public.{table}")
        .option("partitionColumn", "id")
        .option("lowerBound", "1")
        .option("upperBound", str(rows + 1))
        .option("numPartitions", str(PARTITIONS))
        .option("fetchsize", "10000")
        .load()
    )


def noop(spark: Any, pg: PostgresServer, table: str, rows: int) -> Result:
    start = time.perf_counter()
    jdbc_reader(spark, pg, table, rows).write.format("noop").mode("overwrite").save()
    return Result(f"Spark JDBC read → noop ({rows:,})", rows, 0, time.perf_counter() - start)


#: What a user who wants Connect-readable records writes by hand for this table: the JsonConverter
#: envelope around Spark's own ``to_json``, with the schemas typed out once as literals.
def _value_schema(table: str) -> str:
    decimal = {"name": "org.apache.kafka.connect.data.Decimal", "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "12"}}
    timestamp = {"name": "org.apache.kafka.connect.data.Timestamp", "version": 1}
    fields = [
        {"field": "id", "type": "int64", "optional": False},
        {"field": "customer", "type": "string", "optional": False},
        {"field": "amount", "type": "bytes", "optional": False, **decimal},
        {"field": "status", "type": "string", "optional": True},
        {"field": "created_at", "type": "int64", "optional": False, **timestamp},
        {"field": "note", "type": "string", "optional": True},
    ]
    return orjson.dumps({"type": "struct", "optional": False, "name": table, "fields": fields}).decode()


_KEY_SCHEMA = orjson.dumps({"type": "struct", "optional": False, "fields": [{"field": "id", "type": "int64", "optional": False}]}).decode()


def envelope_columns(table: str) -> tuple[str, str]:
    return (
        f"""concat('{{"schema":{_KEY_SCHEMA},"payload":{{"id":', CAST(id AS STRING), '}}}}') AS key""",
        f"""concat('{{"schema":{_value_schema(table)},"payload":', to_json(struct(*)), '}}') AS value""",
    )


PLAIN_COLUMNS = ("CAST(id AS STRING) AS key", "to_json(struct(*)) AS value")


def bare_spark(
    spark: Any, pg: PostgresServer, bootstrap: str, table: str, rows: int, envelope: bool = False
) -> Result:
    start = time.perf_counter()  # making the topic is part of the job, as it is of Sluice's
    topic = create_topic(bootstrap, f"bench-bare-{uuid.uuid4().hex[:8]}", TOPIC_PARTITIONS)
    writer = (
        jdbc_reader(spark, pg, table, rows)
        .selectExpr(*(envelope_columns(table) if envelope else PLAIN_COLUMNS))
        .write.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", topic)
    )
    for key, value in _producer().items():
        writer = writer.option(f"kafka.{key}", value)
    writer.save()
    elapsed = time.perf_counter() - start
    assert high_watermark(bootstrap, topic, TOPIC_PARTITIONS) == rows
    label = ", same envelope" if envelope else ""
    return Result(f"bare Spark JDBC → Kafka ({rows:,}{label})", rows, rows * first_value_size(bootstrap, topic), elapsed)


def first_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    """Up to ``count`` values from the start of ``topic``'s partition 0."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-values-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    values: list[bytes] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        while len(values) < count:
            message = consumer.poll(10)
            if message is None:
                break
            if message.error() is None:
                values.append(message.value() or b"")
    finally:
        consumer.close()
    return values


def first_value_size(bootstrap: str, topic: str) -> int:
    """The size of one value the run wrote (the runs' values differ in size, and bytes cost time)."""
    return sum(map(len, first_values(bootstrap, topic, 1)))


class _Ctx:
    job_group = "bench"
    cancelled = False

    def progress(self, **kw: Any) -> None:
        pass

    def record(self, key: str, value: Any) -> None:
        pass


def _spec(pg: PostgresServer, bootstrap: str, table: str, topic: str, schemas: bool = True) -> Any:
    from sluice.worker.backfill.models import parse_spec

    return parse_spec({
        "id": "bench",
        "kind": "jdbc_to_topic",
        "source": {"connection.url": pg.jdbc_url(), "connection.user": "postgres", "table": f"public.{table}", "num.partitions": PARTITIONS},
        "target": {
            "topic": topic, "partitions": TOPIC_PARTITIONS, "bootstrap.servers": bootstrap,
            "key.converter.schemas.enable": schemas, "value.converter.schemas.enable": schemas,
        },
    })


def sluice(
    provider: Any, pg: PostgresServer, bootstrap: str, table: str, rows: int, schemas: bool = True, topic: str | None = None
) -> Result:
    from sluice.connectors.backfill import run_job
    from sluice.connectors.backfill.builtin_kinds import JDBC_TO_TOPIC

    topic = topic or f"bench-sluice-{uuid.uuid4().hex[:8]}"
    spec = _spec(pg, bootstrap, table, topic, schemas)
    start = time.perf_counter()
    summary = run_job(provider, spec, _Ctx(), kind=JDBC_TO_TOPIC, bootstrap_servers=bootstrap)
    elapsed = time.perf_counter() - start
    assert summary["rows"] == rows, summary
    label = "" if schemas else ", schemas off"
    return Result(f"Sluice backfill JDBC → topic ({rows:,}{label})", rows, rows * first_value_size(bootstrap, topic), elapsed)


def sluice_cdc(provider: Any, pg: PostgresServer, bootstrap: str, table: str, rows: int) -> Result:
    """The same table as the PostgreSQL CDC connector's snapshot records (``target.cdc``)."""
    from sluice.connectors.backfill import run_job
    from sluice.connectors.backfill.builtin_kinds import JDBC_TO_TOPIC
    from sluice.worker.backfill.models import parse_spec

    tag = uuid.uuid4().hex[:8]
    prefix = f"bench-cdc-{tag}"
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        database = conn.info.dbname
    config = {
        "connector.class": "PostgresCdcSource", "database.dbname": database, "topic.prefix": prefix,
        "table.include.list": f"public\\.{table}", "slot.name": f"bench_{tag}", "publication.name": f"bench_{tag}",
        "publication.autocreate.mode": "filtered", "key.converter": "JsonConverter", "value.converter": "JsonConverter",
    }  # fmt: skip
    spec = parse_spec({
        "id": "bench-cdc",
        "kind": "jdbc_to_topic",
        "source": {"connection.url": pg.jdbc_url(), "connection.user": "postgres", "table": f"public.{table}", "num.partitions": PARTITIONS},
        "target": {"partitions": TOPIC_PARTITIONS, "bootstrap.servers": bootstrap, "cdc": {"name": "bench", "config": config}},
    })
    start = time.perf_counter()
    try:
        summary = run_job(provider, spec, _Ctx(), kind=JDBC_TO_TOPIC, bootstrap_servers=bootstrap)
    finally:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:  # the slot would retain WAL
            conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s", (f"bench_{tag}",))
            conn.execute(f'DROP PUBLICATION IF EXISTS "bench_{tag}"')
    elapsed = time.perf_counter() - start
    assert summary["rows"] == rows, summary
    topic = summary["topic"]
    return Result(f"Sluice backfill JDBC → CDC topic ({rows:,}, target.cdc)", rows, rows * first_value_size(bootstrap, topic), elapsed)


def sluice_serialization(spark: Any, pg: PostgresServer, bootstrap: str, table: str, rows: int) -> Result:
    """The key, value and partition columns the job writes, built by its own functions, into ``noop``."""
    from sluice.connectors.backfill.jdbc_topic import measure, plan_table, read_table, records_frame

    spec = _spec(pg, bootstrap, table, "unused")
    start = time.perf_counter()
    plan = measure(spec.source, plan_table(spec.source), None)
    frame = records_frame(read_table(spark, spec.source, plan), spec.source, spec.target, plan, TOPIC_PARTITIONS)
    frame.write.format("noop").mode("overwrite").save()
    return Result(f"Sluice's serialization → noop ({rows:,})", rows, 0, time.perf_counter() - start)


def raw_write(bootstrap: str, payload: Path) -> tuple[float, float]:
    """Kafka's ProducerPerformance writing ``payload``'s values with the job's producer settings: its
    rate, and the CPU seconds per record of the producer and the broker together, from the
    difference between runs of 1M and 5M records (so the JVM's start and JIT are not counted)."""
    rate = 0.0
    cpu: dict[int, float] = {}
    for count in (1_000_000, 5_000_000):
        topic = create_topic(bootstrap, f"bench-raw-{uuid.uuid4().hex[:8]}", TOPIC_PARTITIONS)
        before = cpu_seconds()["broker"]
        rate, producer = producer_performance(bootstrap, topic, payload, count, _producer())
        cpu[count] = producer + cpu_seconds()["broker"] - before
        assert high_watermark(bootstrap, topic, TOPIC_PARTITIONS) == count
    return rate, (cpu[5_000_000] - cpu[1_000_000]) / 4_000_000


def streaming(pg: PostgresServer, bootstrap: str, table: str, rows: int) -> Result:
    from benchmarks.common import herder

    topic_prefix = f"bench-stream-{uuid.uuid4().hex[:6]}-"
    h = herder(bootstrap, **{"value.converter": "JsonConverter", "key.converter": "JsonConverter"})
    try:
        start = time.perf_counter()
        h.put_connector_config(
            f"bench-stream-{uuid.uuid4().hex[:6]}",
            {
                "connector.class": "JdbcSource",
                "connection.url": pg.jdbc_url(),
                "connection.user": "postgres",
                "mode": "bulk",
                "table.whitelist": f"public.{table}",
                "topic.prefix": topic_prefix,
                "poll.interval.ms": "3600000",
                "batch.max.rows": "10000",
            },
            allow_replace=False,
        )
        wait_until(lambda: _topic_rows(bootstrap, topic_prefix + table) >= rows, timeout=1800, poll=0.5)
        elapsed = time.perf_counter() - start
    finally:
        h.stop()
    return Result(f"streaming JdbcSource bulk ({rows:,})", rows, 0, elapsed)


def _topic_rows(bootstrap: str, topic: str) -> int:
    try:
        return high_watermark(bootstrap, topic, 1)
    except Exception:  # noqa: BLE001 - a topic not there yet holds no rows
        return 0


def main() -> None:
    from sluice.connectors.backfill import SparkSessionProvider
    from sluice.deploy.spark import provisioned_jars

    provider = SparkSessionProvider({"spark.master": "local[2]", "spark.driver.memory": "2g"}, jars=provisioned_jars)
    with broker() as bootstrap, PostgresServer(kill_with_parent=True) as pg:
        spark = provider.session()
        # JIT and connection warm-up of every path measured (not reported): the first large Kafka
        # write after a cold start ran up to 2x slower than the next ones.
        warm = load_table(pg, 200_000)
        noop(spark, pg, warm, 200_000)
        bare_spark(spark, pg, bootstrap, warm, 200_000)
        bare_spark(spark, pg, bootstrap, warm, 200_000, envelope=True)
        warm_topic = f"bench-sluice-{uuid.uuid4().hex[:8]}"
        sluice(provider, pg, bootstrap, warm, 200_000, topic=warm_topic)
        sluice_serialization(spark, pg, bootstrap, warm, 200_000)
        print(f"JDBC → topic backfill, local[2], {PARTITIONS} JDBC partitions, {TOPIC_PARTITIONS} topic partitions")
        # The raw Kafka write, once: what it costs per record does not depend on the table's size.
        with tempfile.TemporaryDirectory(prefix="sluice-bench-backfill-") as scratch:
            values, tiny = Path(scratch) / "values.txt", Path(scratch) / "tiny.txt"
            written = first_values(bootstrap, warm_topic, 50_000)  # one per line: Connect JSON has no raw newline
            values.write_bytes(b"\n".join(written))
            tiny.write_bytes(b"\n".join(b"%010d" % i for i in range(50_000)))
            raw_rate, raw_cpu = raw_write(bootstrap, values)
            tiny_rate, tiny_cpu = raw_write(bootstrap, tiny)
            size = sum(map(len, written)) // len(written)
        print(
            f"raw Kafka write (Kafka's ProducerPerformance, the job's producer settings): Sluice's ~{size}-byte values "
            f"{raw_rate:,.0f} rec/s, {raw_cpu * 1e6:.2f} CPU µs per record (producer + broker); "
            f"10-byte values {tiny_rate:,.0f} rec/s, {tiny_cpu * 1e6:.2f} µs"
        )
        for i, rows in enumerate(SIZES):
            table = load_table(pg, rows)
            base, base_cpu = with_cpu(noop, spark, pg, table, rows)
            bare, bare_cpu = with_cpu(bare_spark, spark, pg, bootstrap, table, rows)
            same, same_cpu = with_cpu(bare_spark, spark, pg, bootstrap, table, rows, envelope=True)
            ours, ours_cpu = with_cpu(sluice, provider, pg, bootstrap, table, rows)
            plain, plain_cpu = with_cpu(sluice, provider, pg, bootstrap, table, rows, schemas=False)
            serialized, serialized_cpu = with_cpu(sluice_serialization, spark, pg, bootstrap, table, rows)
            cdc, cdc_cpu = with_cpu(sluice_cdc, provider, pg, bootstrap, table, rows)
            runs = (
                (base, base_cpu, None), (bare, bare_cpu, None), (same, same_cpu, None), (ours, ours_cpu, same),
                (plain, plain_cpu, bare), (serialized, serialized_cpu, base), (cdc, cdc_cpu, same),
            )
            for result, cpu, baseline in runs:
                print(result.line(baseline))
                print(cpu_line(result, cpu))
            print(
                f"  Sluice / bare Spark writing the same envelope: {ours.rate / same.rate:.2f} (target ≥ 0.9)   "
                f"Sluice / bare Spark writing plain to_json: {ours.rate / bare.rate:.2f}"
            )
            print(
                f"  Sluice / noop read: {ours.rate / base.rate:.2f} (target ≥ 0.7); bare Spark's own: "
                f"{same.rate / base.rate:.2f} (same envelope), {bare.rate / base.rate:.2f} (plain)"
            )
            read = sum(base_cpu.values()) / rows
            print(
                f"  the best Sluice / noop these cores allow (noop CPU per row {read * 1e6:.2f} µs over read + "
                f"serialization {sum(serialized_cpu.values()) / rows * 1e6:.2f} µs + raw write {raw_cpu * 1e6:.2f} µs): "
                f"{read / (sum(serialized_cpu.values()) / rows + raw_cpu):.2f}; "
                f"for 10-byte records and no serialization at all: {read / (read + tiny_cpu):.2f}"
            )
            print(f"  without the schema envelope (values about as large as bare Spark's): Sluice / bare {plain.rate / bare.rate:.2f}")
            print(
                f"  the CDC flavour (Debezium read events, ~{cdc.bytes // rows} B/value, their envelope schema included): "
                f"{cdc.rate / same.rate:.2f} of bare Spark writing the JDBC flavour's envelope"
            )
            if i == 0 and os.environ.get("SLUICE_BENCH_BACKFILL_STREAMING", "1") != "0":
                stream = streaming(pg, bootstrap, table, rows)
                print(stream.line())
                print(f"  speed-up over the streaming JDBC source (bulk): {ours.rate / stream.rate:.1f}x")
    provider.stop()


if __name__ == "__main__":
    main()
