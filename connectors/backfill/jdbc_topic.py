"""JDBC table → topic: a partitioned Spark JDBC read, serialized in the JVM, written by Spark's Kafka sink.

Steps of a run:

1. Reflect the table with SQLAlchemy and map its columns to Connect schemas with the same code as
   the streaming JDBC source (:func:`sluice.connectors.jdbc_common.types.column_schema`); the value
   schema is a struct named after the table, the key a struct of the key columns (what the
   ``ValueToKey`` transform gives the stream). Their JSON is built once by :mod:`sluice.converters.json_data`.
2. On PostgreSQL with logical decoding, take the read's position from a logical slot's exported
   snapshot (:mod:`sluice.connectors.backfill.pg_position`): every partition reads in that one snapshot,
   and the slot's consistent point is the LSN a CDC connector continues from with no gap.
3. Find the partition column's bounds and the row count with one query (in the same snapshot);
   the count is the total progress is measured against.
4. Read with ``partitionColumn``/``lowerBound``/``upperBound``/``numPartitions``, build key and
   value bytes with Spark SQL (:mod:`sluice.connectors.backfill.connect_json`), choose the partition the
   way the streaming producer would, and write with the ``kafka`` data source.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import quote as url_quote
from urllib.parse import urlencode

from sluice.connectors.api import ConfigError, Schema
from sluice.connectors.backfill.connect_json import ColumnSpec, quote_identifier, record_expression
from sluice.connectors.backfill.context import JobContext
from sluice.connectors.backfill.errors import BackfillJobError
from sluice.connectors.backfill.kafka_admin import TopicGrowthMonitor, ensure_topic
from sluice.connectors.backfill.pg_position import (
    ConsistentPoint,
    consistent_point,
    drop_slot,
    libpq_params,
    logical_decoding_available,
)
from sluice.connectors.jdbc_common.connection import create_engine, to_sqlalchemy_url
from sluice.connectors.jdbc_common.types import NumericMapping, column_schema, timezone
from sluice.connectors.jdbc_common.urls import BACKFILL_BACKENDS, BACKFILL_URL_KEY, parse_connection_url
from sluice.converters.json_data import JsonData

log = logging.getLogger(__name__)

#: Spark's Kafka producer, tuned for bulk (``target.producer`` overrides any of them). The write, not
#: the read, bounds a backfill: every row is a Connect JSON envelope of several hundred bytes, and
#: the broker's work is per batch and per request, so batches are large — close to but under the
#: broker's default ``message.max.bytes`` (1 MiB; an oversized compressed batch would be split and
#: retried) — and a request may carry several. lz4 costs the least CPU for the bytes it saves.
#: ``acks=all`` with idempotence is what at-least-once needs (the model refuses anything weaker).
PRODUCER_DEFAULTS = {
    "acks": "all",
    "enable.idempotence": "true",
    "compression.type": "lz4",
    "linger.ms": "50",
    "batch.size": "1000000",
    "max.request.size": "4194304",
    "buffer.memory": "67108864",
}


@dataclass(frozen=True)
class TablePlan:
    """What the read and the serialization need to know about the table."""

    table: str  # as the database names it (schema-qualified when given so)
    name: str  # unqualified: the value schema's name
    columns: tuple[ColumnSpec, ...]
    key_columns: tuple[ColumnSpec, ...]
    value_schema: Schema
    key_schema: Schema | None
    partition_column: str | None
    lower: int | None
    upper: int | None
    rows: int
    backend: str


def plan_table(source: Any) -> TablePlan:
    """Reflect ``source.table``: columns, schemas, key and partition column (no bounds or count yet)."""
    from sqlalchemy import MetaData, Table
    from sqlalchemy import types as t

    password = source.connection_password.get_secret_value() if source.connection_password else None
    url = to_sqlalchemy_url(source.connection_url, source.connection_user, password)
    engine = create_engine(url, db_timezone=source.db_timezone)
    tz = timezone(source.db_timezone)
    schema_name, _, name = source.table.rpartition(".")
    try:
        with engine.connect() as conn:
            try:
                table = Table(name, MetaData(), schema=schema_name or None, autoload_with=conn)
            except Exception as exc:  # noqa: BLE001 - SQLAlchemy's and the driver's errors alike: the table cannot be read
                raise ConfigError(f"source.table: cannot read table {source.table}: {exc}", key="source.table") from None
            columns = []
            fields = []
            for col in table.columns:
                schema, _ = column_schema(
                    col.type,
                    optional=bool(col.nullable) and not col.primary_key,
                    numeric_mapping=NumericMapping(source.numeric_mapping),
                    tz=tz,
                    backend=engine.dialect.name,
                )
                naive = isinstance(col.type, t.DateTime) and not getattr(col.type, "timezone", False)
                columns.append(ColumnSpec(str(col.name), schema, naive_timestamp=naive))
                fields.append((str(col.name), schema))
            by_name = {c.name: c for c in columns}
            key_names = source.key_columns or [str(c.name) for c in table.primary_key.columns]
            unknown = [k for k in key_names if k not in by_name]
            if unknown:
                raise ConfigError(f"source.key.columns: {', '.join(unknown)} not in {source.table}", key="source.key.columns")
            key_columns = tuple(by_name[k] for k in key_names)
            partition = source.partition_column
            if partition is None:
                pk = list(table.primary_key.columns)
                if len(pk) == 1 and isinstance(pk[0].type, t.Integer):
                    partition = str(pk[0].name)
            elif partition not in by_name:
                raise ConfigError(f"source.partition.column: {partition} is not a column of {source.table}", key="source.partition.column")
            backend = engine.dialect.name
    finally:
        engine.dispose()
    value_schema = Schema.struct(fields, name=name)
    key_schema = Schema.struct([(c.name, c.schema) for c in key_columns]) if key_columns else None
    return TablePlan(
        table=source.table,
        name=name,
        columns=tuple(columns),
        key_columns=key_columns,
        value_schema=value_schema,
        key_schema=key_schema,
        partition_column=partition,
        lower=None,
        upper=None,
        rows=0,
        backend=backend,
    )


def measure(source: Any, plan: TablePlan, point: ConsistentPoint | None) -> TablePlan:
    """The partition column's bounds and the row count, read in ``point``'s snapshot when given."""
    from sqlalchemy import column, func, select, table

    password = source.connection_password.get_secret_value() if source.connection_password else None
    engine = create_engine(
        to_sqlalchemy_url(source.connection_url, source.connection_user, password), db_timezone=source.db_timezone
    )
    schema_name, _, name = plan.table.rpartition(".")
    target = table(name, schema=schema_name or None)
    lower = upper = None
    try:
        with engine.connect() as conn:
            for statement in point.import_statements() if point is not None else ():
                conn.exec_driver_sql(statement)
            if plan.partition_column is not None:
                c: Any = column(plan.partition_column)
                lower, upper, rows = conn.execute(
                    select(func.min(c), func.max(c), func.count()).select_from(target)
                ).one()
            else:
                rows = conn.execute(select(func.count()).select_from(target)).scalar_one()
            conn.rollback()
    finally:
        engine.dispose()
    return replace(
        plan,
        lower=None if lower is None else int(lower),
        upper=None if upper is None else int(upper),
        rows=int(rows or 0),
    )


@contextmanager
def read_position(source: Any, plan: TablePlan) -> Iterator[ConsistentPoint | None]:
    """The exported snapshot every partition reads in, and its LSN (PostgreSQL); else ``None``.

    ``cdc.position=auto`` takes one where logical decoding is available, ``required`` fails
    without it, ``off`` reads each partition in its own snapshot and records no position.
    """
    mode = source.cdc_position
    if plan.backend != "postgresql":
        if source.cdc_slot_name or mode == "required":
            raise ConfigError(
                f"source.cdc.position: a CDC hand-off position needs PostgreSQL, not {plan.backend}",
                key="source.cdc.position",
            )
        yield None
        return
    if mode == "off":
        if source.cdc_slot_name:
            raise ConfigError("source.cdc.slot.name: cannot be used with cdc.position=off", key="source.cdc.slot.name")
        yield None
        return
    password = source.connection_password.get_secret_value() if source.connection_password else None
    params = libpq_params(to_sqlalchemy_url(source.connection_url, source.connection_user, password))
    strict = mode == "required" or bool(source.cdc_slot_name)
    why_not = logical_decoding_available(params)
    if why_not is not None:
        if strict:
            raise ConfigError(f"source.cdc.position: no consistent read position: {why_not}", key="source.cdc.position")
        log.warning("Backfill of %s records no CDC hand-off position: %s", plan.table, why_not)
        yield None
        return
    created: str | None = None
    try:
        with ExitStack() as stack:
            try:
                point: ConsistentPoint | None = stack.enter_context(consistent_point(params, source.cdc_slot_name))
            except ConfigError as exc:
                if strict:
                    raise
                log.warning("Backfill of %s records no CDC hand-off position: %s", plan.table, exc)
                point = None
            if point is not None and point.slot_created:
                created = point.slot
            yield point
    except BaseException:
        # The hand-off did not happen: a slot made for it would only retain WAL. Dropped once the
        # replication connection that created it is closed.
        if created is not None:
            drop_slot(params, created)
        raise


def jdbc_url(connection_url: str) -> str:
    """The JDBC URL Spark's reader gets, rebuilt from the parsed ``source.connection.url``.

    Never the text as given: pgjdbc and Connector/J take parameters that load classes
    (``socketFactory``, ``queryInterceptors``), deserialize (``autoDeserialize``), write files
    (``loggerFile``) or read them (``allowLoadLocalInfile``). Only the host, port, database and
    the allow-listed parameters with a JDBC spelling carry over; LOCAL INFILE is switched off.
    """
    parsed = parse_connection_url(connection_url, key=BACKFILL_URL_KEY, allow_files=False, backends=BACKFILL_BACKENDS)
    host = f"[{parsed.host}]" if parsed.host and ":" in parsed.host else parsed.host
    port = f":{parsed.port}" if parsed.port else ""
    database = url_quote(parsed.database or "", safe="")
    if parsed.backend == "postgresql":
        names = {"sslmode": "sslmode", "connect_timeout": "connectTimeout", "application_name": "ApplicationName"}
        query = {names[k]: v for k, v in parsed.params.items() if k in names}
    else:
        query = {"allowLoadLocalInfile": "false", "allowUrlInLocalInfile": "false", "autoDeserialize": "false"}
        if "connect_timeout" in parsed.params:
            query["connectTimeout"] = str(int(parsed.params["connect_timeout"]) * 1000)
    suffix = f"?{urlencode(query)}" if query else ""
    return f"jdbc:{parsed.backend}://{host}{port}/{database}{suffix}"


_DRIVERS = {"postgresql": "org.postgresql.Driver", "mysql": "com.mysql.cj.jdbc.Driver"}


def read_table(
    spark: Any,
    source: Any,
    plan: TablePlan,
    point: ConsistentPoint | None = None,
    *,
    dbtable: str | None = None,
    partition_column: str | None = None,
    session_sql: tuple[str, ...] = (),
) -> Any:
    """The DataFrame of the partitioned JDBC read (every partition in ``point``'s snapshot when given).

    ``dbtable`` reads a query instead of the table (``partition_column``: its name there of the
    plan's partition column); ``session_sql`` runs on each connection after the snapshot import."""
    url = jdbc_url(source.connection_url)
    protocol = url.split(":")[1]
    reader = spark.read.format("jdbc").option("url", url).option("dbtable", dbtable or plan.table)
    # Without an explicit driver class DriverManager finds none in Spark's class loader.
    if protocol in _DRIVERS:
        reader = reader.option("driver", _DRIVERS[protocol])
    secret = source.connection_password.get_secret_value() if source.connection_password else None
    # Credentials written in the URL (?user=…&password=…) are not in the rebuilt one: given as options.
    credentials = parse_connection_url(source.connection_url, source.connection_user, secret, key=BACKFILL_URL_KEY)
    if credentials.username:
        reader = reader.option("user", credentials.username)
    if credentials.password:
        reader = reader.option("password", credentials.password)
    elif protocol == "postgresql":
        # pgjdbc looks a missing password up in ~/.pgpass (or PGPASSFILE): the worker's, not the caller's.
        reader = reader.option("password", "")
    reader = reader.option("fetchsize", str(source.fetch_size)).option("preferTimestampNTZ", "true")
    init = ([point.session_init_statement()] if point is not None else []) + list(session_sql)
    if init:
        reader = reader.option("sessionInitStatement", "; ".join(init))
    if plan.partition_column is not None and plan.lower is not None and plan.upper is not None and plan.rows > 0:
        partitions = max(1, min(source.num_partitions, plan.upper - plan.lower + 1))
        reader = (
            reader.option("partitionColumn", partition_column or plan.partition_column)
            .option("lowerBound", str(plan.lower))
            .option("upperBound", str(plan.upper + 1))
            .option("numPartitions", str(partitions))
        )
    return reader.load()


def records_frame(df: Any, source: Any, target: Any, plan: TablePlan, partitions: int) -> Any:
    """``key``, ``value`` (and ``partition``) columns of Connect JSON bytes."""
    value_conv = JsonData(
        {
            "schemas.enable": target.value_converter_schemas_enable,
            "decimal.format": target.value_converter_decimal_format,
        }
    )
    key_conv = JsonData(
        {"schemas.enable": target.key_converter_schemas_enable, "decimal.format": target.value_converter_decimal_format}
    )
    fmt = target.value_converter_decimal_format
    value_schema_json = value_conv.as_json_schema(plan.value_schema) if target.value_converter_schemas_enable else None
    value_sql = record_expression(plan.columns, value_schema_json, decimal_format=fmt, db_timezone=source.db_timezone)
    exprs = [f"{value_sql} AS value"]
    if plan.key_schema is not None:
        key_schema_json = key_conv.as_json_schema(plan.key_schema) if target.key_converter_schemas_enable else None
        key_sql = record_expression(
            plan.key_columns, key_schema_json, decimal_format=fmt, db_timezone=source.db_timezone
        )
        exprs.insert(0, f"{key_sql} AS key")
    out = df.selectExpr(*exprs)
    if plan.key_schema is not None and target.partitioner == "crc32":
        # librdkafka's default partitioner (what Sluice's streaming producers use): crc32(key) % n.
        out = out.selectExpr("key", "value", f"CAST(pmod(crc32(key), {partitions}) AS INT) AS partition")
    return out


def run_jdbc_to_topic(spark: Any, spec: Any, ctx: JobContext, bootstrap: str) -> dict[str, Any]:
    """Run one JDBC → topic backfill; return a summary for the status."""
    source, target = spec.source, spec.target
    plan = plan_table(source)
    # The table is valid: the topic is made while the read position and the bounds are taken.
    with ThreadPoolExecutor(1, thread_name_prefix="backfill-topic") as pool:
        topic = pool.submit(
            ensure_topic, bootstrap, target.topic, target.partitions or source.num_partitions, target.replication_factor
        )
        with read_position(source, plan) as point:
            plan = measure(source, plan, point)
            if point is not None:
                ctx.record("source_position", point.position())
            # Spark analyses the read and the serialization while the topic is made; an existing
            # topic with another partition count gets the frame again.
            expected = target.partitions or source.num_partitions
            df = records_frame(read_table(spark, source, plan, point), source, target, plan, expected)
            partitions = topic.result()
            if partitions != expected:
                df = records_frame(read_table(spark, source, plan, point), source, target, plan, partitions)
            return write_records(spec, ctx, bootstrap, plan, df, partitions, target.topic)


def write_records(
    spec: Any, ctx: JobContext, bootstrap: str, plan: TablePlan, df: Any, partitions: int, topic: str
) -> dict[str, Any]:
    """Write ``df`` (key, value, partition) to ``topic`` with Spark's Kafka sink, reporting progress."""
    target = spec.target
    ctx.progress(rows_total=plan.rows, rows_done=0)
    if ctx.cancelled:
        raise BackfillJobError("cancelled before the read began")
    writer = df.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
    producer = {**PRODUCER_DEFAULTS, **target.producer}
    for key, value in producer.items():
        writer = writer.option(f"kafka.{key}", value)
    log.info(
        "Backfilling %s (%d rows, %s) into %s",
        plan.table,
        plan.rows,
        f"partitioned on {plan.partition_column}" if plan.partition_column else "one partition",
        topic,
    )

    # Spark's Kafka sink reports no row or byte metrics (and an Observation on it never completes),
    # so progress is the growth of the topic, and bytes are rows x the mean size of sampled records.
    def report(rows: int) -> None:
        ctx.progress(rows_done=rows, bytes_done=round(rows * monitor.mean_record_bytes()) if rows else 0)

    with TopicGrowthMonitor(bootstrap, topic, partitions, report) as monitor:
        writer.save()
        written = monitor.written()
    report(written)
    ctx.record("bytes_estimated", True)
    return {"topic": topic, "rows": written, "partitions": partitions, "table_rows": plan.rows}


def quote(name: str) -> str:
    """Re-exported for callers building their own projections."""
    return quote_identifier(name)
