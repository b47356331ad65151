"""JDBC table → a CDC connector's topic: the backfill writes what that connector's snapshot would.

Chosen by ``target.cdc`` (``{"name": …, "config": {…the PostgreSQL CDC connector's config…}}``).
Every setting that shapes a record comes from that config, so the backfill and the stream cannot
disagree: the topic (``<topic.prefix>.<schema>.<table>``), the key and value schemas and their
names (``schema.name.adjustment.mode``), the columns (``column.include/exclude.list``), the type
conversions (``decimal.handling.mode``, ``time.precision.mode``), the converters
(``key.converter``/``value.converter`` and their ``schemas.enable``/``decimal.format``), the
partitioner (``producer.override.partitioner``; librdkafka's default ``consistent_random`` hashes
keys with crc32) and the slot (``slot.name``).

Steps of a run:

1. Parse the connector config with the CDC source's own model, refuse what the backfill cannot
   reproduce (transforms, non-JSON converters), and check the table is captured.
2. Describe the table with the CDC source's catalog code (:mod:`sluice.connectors.source.postgres_cdc.catalog`),
   create or update its publication (``publication.autocreate.mode``) *before* the slot, so
   pgoutput finds it at every position the connector decodes.
3. Take the read position at the connector's slot (:mod:`sluice.connectors.backfill.pg_position`; required),
   count the rows and find the bounds in that snapshot.
4. Read with Spark's JDBC reader over the converting query of :mod:`sluice.connectors.backfill.cdc_snapshot`,
   build key and value bytes in the JVM around the constant parts the connector's converters
   rendered, and write them to the partition the connector's producer would choose.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg

from sluice.connectors.api import ConfigError
from sluice.connectors.api.connectivity import connectivity_message, host_port
from sluice.connectors.backfill.cdc_snapshot import (
    PARTITION_ALIAS,
    column_conversion,
    key_json,
    read_sql,
    struct_json,
    wrap,
)
from sluice.connectors.backfill.context import JobContext
from sluice.connectors.backfill.jdbc_topic import TablePlan, measure, read_position, read_table, write_records
from sluice.connectors.backfill.kafka_admin import ensure_topic
from sluice.connectors.backfill.pg_position import libpq_params
from sluice.connectors.jdbc_common.connect_failures import classify_database_error
from sluice.connectors.jdbc_common.connection import to_sqlalchemy_url
from sluice.connectors.source.postgres_cdc import catalog
from sluice.connectors.source.postgres_cdc import types as pg
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig, PublicationMode
from sluice.connectors.source.postgres_cdc.source_block import CONNECTOR, VERSION
from sluice.connectors.source.postgres_cdc.tables import Table
from sluice.converters.json_data import JsonData

log = logging.getLogger(__name__)

#: What the CDC task's SQL sessions run with (``PostgresCdcConfig.conninfo``): the output text of
#: the types the backfill reads as text depends on them.
SESSION_SETTINGS = (
    "SET TimeZone = 'UTC'",
    "SET DateStyle = 'ISO'",
    "SET IntervalStyle = 'postgres'",
    "SET extra_float_digits = 3",
    "SET bytea_output = 'hex'",
)

_CRC32_PARTITIONERS = {None, "consistent", "consistent_random"}
_MURMUR2_PARTITIONERS = {"murmur2", "murmur2_random"}


def _is_reference(value: Any) -> bool:
    return isinstance(value, str) and value.strip().startswith("${")


@dataclass(frozen=True)
class CdcHandoff:
    """The CDC connector a backfill hands off to, and what its config makes of records."""

    name: str
    config: PostgresCdcConfig
    key_converter: JsonData  # the records' bytes as the connector's key.converter writes them
    value_converter: JsonData
    partitioner: str  # crc32 | murmur2


def _json_converter(raw: dict[str, Any], prefix: str) -> JsonData:
    cls = str(raw.get(f"{prefix}.converter") or "JsonConverter")
    if cls.rsplit(".", 1)[-1] != "JsonConverter":
        raise ConfigError(
            f"target.cdc.config.{prefix}.converter: the backfill writes JsonConverter records; {cls} is not supported",
            key=f"target.cdc.config.{prefix}.converter",
        )
    settings = {
        k.removeprefix(f"{prefix}.converter."): v
        for k, v in raw.items()
        if k.startswith(f"{prefix}.converter.") and not _is_reference(v)
    }
    try:
        return JsonData(settings)
    except ConfigError as exc:
        raise ConfigError(
            f"target.cdc.config.{prefix}.converter: {exc}", key=f"target.cdc.config.{prefix}.converter"
        ) from None


def parse_handoff(target: Any) -> CdcHandoff:
    """The hand-off of ``target.cdc``; raises :class:`ConfigError` for what the backfill cannot match."""
    raw = dict(target.cdc.config)
    if str(raw.get("transforms") or "").strip():
        raise ConfigError(
            "target.cdc.config.transforms: the backfill cannot apply the connector's transforms; a hand-off needs a "
            "CDC connector without them (transform in the consumers or a sink's transforms instead)",
            key="target.cdc.config.transforms",
        )
    # Config-provider references are resolved by the worker running the connector; the settings the
    # records depend on must be literal, the others (password, host …) are not needed here.
    for key in ("topic.prefix", "database.dbname"):
        if _is_reference(raw.get(key)) or not raw.get(key):
            raise ConfigError(
                f"target.cdc.config.{key}: required, and literal for a backfill", key=f"target.cdc.config.{key}"
            )
    literal = {k: v for k, v in raw.items() if not _is_reference(v)}
    try:
        config = PostgresCdcConfig.from_task_config(literal)
    except ConfigError as exc:
        raise ConfigError(f"target.cdc.config: {exc}", key=f"target.cdc.config.{exc.key or ''}".rstrip(".")) from None
    choice = raw.get("producer.override.partitioner")
    if choice in _CRC32_PARTITIONERS:
        partitioner = "crc32"
    elif choice in _MURMUR2_PARTITIONERS:
        partitioner = "murmur2"
    else:
        raise ConfigError(
            f"target.cdc.config.producer.override.partitioner: {choice} places keys in no way the backfill can reproduce",
            key="target.cdc.config.producer.override.partitioner",
        )
    if "partitioner" in target.model_fields_set and target.partitioner != partitioner:
        raise ConfigError(
            f"target.partitioner: {target.partitioner} differs from the CDC connector's ({partitioner}); leave it out",
            key="target.partitioner",
        )
    key_converter, value_converter = _json_converter(raw, "key"), _json_converter(raw, "value")
    for field, converter, what in (
        ("key_converter_schemas_enable", key_converter, "key.converter.schemas.enable"),
        ("value_converter_schemas_enable", value_converter, "value.converter.schemas.enable"),
    ):
        if field in target.model_fields_set and getattr(target, field) != converter.config.schemas_enable:
            raise ConfigError(f"target.{what}: set it in target.cdc.config, not here", key=f"target.{what}")
    if "value_converter_decimal_format" in target.model_fields_set:
        raise ConfigError(
            "target.value.converter.decimal.format: set it in target.cdc.config, not here",
            key="target.value.converter.decimal.format",
        )
    return CdcHandoff(target.cdc.name, config, key_converter, value_converter, partitioner)


def describe(source: Any, handoff: CdcHandoff) -> tuple[Table, str]:
    """The table as the CDC connector describes it, and the database the source reads; creates or
    updates the connector's publication (before the read position's slot exists)."""
    password = source.connection_password.get_secret_value() if source.connection_password else None
    params = libpq_params(to_sqlalchemy_url(source.connection_url, source.connection_user, password))
    cfg = handoff.config
    if params["dbname"] != cfg.database_dbname:
        raise ConfigError(
            f"target.cdc.config.database.dbname: {cfg.database_dbname!r} is not the database the backfill reads "
            f"({params['dbname']!r})",
            key="target.cdc.config.database.dbname",
        )
    schema_name, _, name = source.table.rpartition(".")
    schema_name = schema_name or "public"
    table_filter = catalog.TableFilter(cfg)
    if not table_filter.captures(schema_name, name):
        raise ConfigError(
            f"source.table: the CDC connector does not capture {schema_name}.{name} (table.include.list / "
            "schema.include.list and their exclude lists)",
            key="source.table",
        )
    try:
        conn = psycopg.connect(**params, autocommit=True, options="-c TimeZone=UTC -c DateStyle=ISO")
    except psycopg.Error as exc:
        # The category only: libpq's text may quote what a port that is no PostgreSQL sent.
        found = classify_database_error(exc, "postgresql")
        target = host_port(params.get("host"), params.get("port"))
        message = connectivity_message("source.connection.url", target, found.failure)
        raise ConfigError(message, key="source.connection.url") from None
    with conn:
        oid = catalog.table_oid(conn, schema_name, name)
        table = catalog.load_table(conn, oid, cfg, table_filter) if oid is not None else None
        if table is None:
            raise ConfigError(f"source.table: no table {schema_name}.{name}", key="source.table")
        if cfg.publication_autocreate_mode is not PublicationMode.DISABLED:
            captured = [(s, t) for _, s, t in catalog.list_tables(conn, table_filter)]
            if cfg.signal_data_collection:
                signal_schema, _, signal_table = cfg.signal_data_collection.partition(".")
                captured.append((signal_schema, signal_table))
            catalog.ensure_publication(conn, cfg, captured)
    return table, params["dbname"]


def record_parts(table: Table, handoff: CdcHandoff, database: str, lsn: int, now_ns: int) -> tuple[bytes, bytes]:
    """The value's bytes before and after ``after``'s JSON, rendered by the connector's converter.

    A read event of the connector's snapshot with ``after`` left out: what follows ``"after":``
    is the ``source`` block (``snapshot: true``, the read's LSN), ``op: r`` and the times."""
    source = {
        "version": VERSION,
        "connector": CONNECTOR,
        "name": handoff.config.topic_prefix,
        "ts_ms": now_ns // 1_000_000,
        "snapshot": "true",
        "db": database,
        "sequence": f'[null,"{lsn}"]',  # the read's point, as the connector's snapshot rows name theirs
        "ts_us": now_ns // 1000,
        "ts_ns": now_ns,
        "schema": table.schema_name,
        "table": table.name,
        "txId": None,
        "lsn": lsn,
        "xmin": None,
        "origin": None,
        "origin_lsn": None,
    }
    event = {
        "before": None,
        "after": None,
        "source": source,
        "transaction": None,
        "op": "r",
        "ts_ms": now_ns // 1_000_000,
        "ts_us": now_ns // 1000,
        "ts_ns": now_ns,
    }
    whole = handoff.value_converter.value_json(table.envelope_schema, event)
    assert whole is not None
    marker = b'"before":null,"after":'
    at = whole.index(marker) + len(marker)
    assert whole[at : at + 4] == b"null"
    return whole[:at], whole[at + 4 :]


def key_parts(table: Table, handoff: CdcHandoff) -> tuple[bytes, bytes]:
    """The key's bytes around its payload (the schema envelope when the key converter writes one)."""
    converter = handoff.key_converter
    if table.key_schema is None or not converter.config.schemas_enable:
        return b"", b""
    return b'{"schema":' + converter.as_json_schema(table.key_schema) + b',"payload":', b"}"


def records_frame(
    df: Any, table: Table, handoff: CdcHandoff, database: str, lsn: int, partitions: int, now_ns: int
) -> Any:
    """``key``, ``value`` (and ``partition``) columns: the connector's read events, built in the JVM."""
    decimal_format = handoff.value_converter.config.decimal_format
    if handoff.key_converter.config.decimal_format != decimal_format and any(
        c.ctype.schema.name == "org.apache.kafka.connect.data.Decimal"
        for c in table.columns
        if c.name in table.primary_key
    ):
        raise ConfigError(
            "target.cdc.config.key.converter.decimal.format: a decimal key needs the same decimal.format as the value",
            key="target.cdc.config.key.converter.decimal.format",
        )
    columns = table.included_columns
    conversions = [column_conversion(c, decimal_format=decimal_format) for c in columns]
    head, tail = record_parts(table, handoff, database, lsn, now_ns)
    exprs = [f"{wrap(head, struct_json(columns, conversions), tail)} AS value"]
    key_sql = key_json(table, conversions)
    if key_sql is not None:
        key_head, key_tail = key_parts(table, handoff)
        exprs.insert(0, f"{wrap(key_head, key_sql, key_tail)} AS key")
    out = df.selectExpr(*exprs)
    if key_sql is not None and handoff.partitioner == "crc32":
        # librdkafka's consistent_random (the CDC task's producer): crc32(key) % partitions.
        out = out.selectExpr("key", "value", f"CAST(pmod(crc32(key), {partitions}) AS INT) AS partition")
    return out


def _partition_column(source: Any, table: Table) -> str | None:
    ints = {c.name for c in table.columns if c.type_oid in (pg.INT2, pg.INT4, pg.INT8)}
    if source.partition_column is not None:
        if source.partition_column not in ints:
            raise ConfigError(
                f"source.partition.column: {source.partition_column} is not an integer column of {source.table}",
                key="source.partition.column",
            )
        return str(source.partition_column)
    if len(table.primary_key) == 1 and table.primary_key[0] in ints:
        return table.primary_key[0]
    return None


def _check_source(source: Any, handoff: CdcHandoff) -> None:
    """Refuse source settings a CDC hand-off decides itself (the read position, slot and key)."""
    if source.cdc_position == "off":
        raise ConfigError("source.cdc.position: a CDC hand-off needs the read position", key="source.cdc.position")
    if source.cdc_slot_name and source.cdc_slot_name != handoff.config.slot_name:
        raise ConfigError(
            f"source.cdc.slot.name: {source.cdc_slot_name} differs from the CDC connector's slot.name "
            f"{handoff.config.slot_name}; leave it out",
            key="source.cdc.slot.name",
        )
    if source.key_columns:
        raise ConfigError("source.key.columns: the CDC connector's key is the primary key", key="source.key.columns")


def _table_plan(table: Table, partition: str | None) -> TablePlan:
    """The read plan of the captured table, before the source is measured."""
    return TablePlan(
        table=f"{table.schema_name}.{table.name}",
        name=table.name,
        columns=(),
        key_columns=(),
        value_schema=table.value_schema,
        key_schema=table.key_schema,
        partition_column=partition,
        lower=None,
        upper=None,
        rows=0,
        backend="postgresql",
    )


def run_cdc_snapshot(spark: Any, spec: Any, ctx: JobContext, bootstrap: str) -> dict[str, Any]:
    """Run one JDBC → CDC-topic backfill; return a summary for the status."""
    source, target = spec.source, spec.target
    handoff = parse_handoff(target)
    _check_source(source, handoff)
    table, database = describe(source, handoff)
    if target.topic and target.topic != table.topic:
        raise ConfigError(f"target.topic: the CDC connector writes {table.topic}; leave it out", key="target.topic")
    source = source.model_copy(update={"cdc_slot_name": handoff.config.slot_name, "cdc_position": "required"})
    partition = _partition_column(source, table)
    plan = _table_plan(table, partition)
    conversions = [
        column_conversion(c, decimal_format=handoff.value_converter.config.decimal_format)
        for c in table.included_columns
    ]
    query = read_sql(table, conversions, partition)
    expected = target.partitions or source.num_partitions
    with ThreadPoolExecutor(1, thread_name_prefix="backfill-topic") as pool:
        topic_future = pool.submit(ensure_topic, bootstrap, table.topic, expected, target.replication_factor)
        with read_position(source, plan) as point:
            assert point is not None  # cdc.position=required
            plan = measure(source, plan, point)
            position = point.position()
            ctx.record("source_position", position)
            now_ns = time.time_ns()

            def frame(partitions: int) -> Any:
                df = read_table(
                    spark,
                    source,
                    plan,
                    point,
                    dbtable=query,
                    partition_column=PARTITION_ALIAS if partition else None,
                    session_sql=SESSION_SETTINGS,
                )
                return records_frame(df, table, handoff, database, point.lsn, partitions, now_ns)

            df = frame(expected)
            partitions = topic_future.result()
            if partitions != expected:
                df = frame(partitions)
            log.info("Backfilling %s as snapshot records of CDC connector %s", plan.table, handoff.name)
            summary = write_records(spec, ctx, bootstrap, plan, df, partitions, table.topic)
    summary["cdc_connector"] = handoff.name
    return summary
