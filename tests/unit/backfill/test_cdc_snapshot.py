"""The backfill that writes a CDC connector's snapshot records: its SQL and the constant parts of its
records, checked without Spark or a database (the byte comparison with the connector's own
snapshot is ``tests/integration/test_backfill_cdc_topic.py``)."""

from __future__ import annotations

import decimal
from types import SimpleNamespace
from typing import Any

import pytest

from sluice.connectors.api import ConfigError
from sluice.connectors.backfill.cdc_snapshot import (
    PARTITION_ALIAS,
    column_conversion,
    key_json,
    read_sql,
    struct_json,
    wrap,
)
from sluice.connectors.backfill.cdc_topic import key_parts, parse_handoff, record_parts
from sluice.connectors.source.postgres_cdc import types as pg
from sluice.connectors.source.postgres_cdc.tables import Column, Table
from sluice.converters.json import JsonConverter
from sluice.worker.backfill.models import masked_spec, parse_spec

BASE = {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "database.dbname": "shop",
    "topic.prefix": "dbserver1",
    "table.include.list": "public\\.orders",
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
}


def target(**config: Any) -> Any:
    spec = parse_spec(
        {
            "id": "job",
            "kind": "jdbc_to_topic",
            "source": {"connection.url": "jdbc:postgresql://db/shop", "table": "public.orders"},
            "target": {"cdc": {"name": "orders-cdc", "config": {**BASE, **config}}},
        }
    )
    return spec.target


DEFAULT_MODES = pg.TypeModes()


def table(modes: pg.TypeModes = DEFAULT_MODES, prefix: str = "dbserver1") -> Table:
    def column(name: str, oid: int, typmod: int = -1, optional: bool = True, element: int | None = None) -> Column:
        ctype = pg.column_type(element, typmod, modes) if element is not None else None
        return Column(name, oid, typmod, optional, pg.column_type(oid, typmod, modes, element=ctype))

    columns = [
        column("id", pg.INT8, optional=False),
        column("price", pg.NUMERIC, (12 << 16 | 2) + 4),
        column("free", pg.NUMERIC),
        column("at", pg.TIMESTAMPTZ, 3),
        column("local", pg.TIMESTAMP),
        column("day", pg.DATE),
        column("doc", pg.JSONB),
        column("tags", 1009, element=pg.TEXT),
        column("blob", pg.BYTEA),
    ]
    return Table(1, "public", "orders", columns, ["id"], "f", prefix, [True] * len(columns))


def test_the_conversions_follow_the_connectors_modes() -> None:
    t = {c.name: c for c in table().columns}
    zoned = column_conversion(t["at"], decimal_format="BASE64")
    assert zoned.pg('"at"') == """to_char("at" AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.FF3"Z"')"""
    micros = column_conversion(t["local"], decimal_format="BASE64")
    assert (
        micros.pg('"local"') == 'floor(EXTRACT(EPOCH FROM "local") * 1000000)::int8' and micros.spark_type == "BIGINT"
    )
    assert column_conversion(t["day"], decimal_format="BASE64").pg('"day"') == "(\"day\" - DATE '1970-01-01')"
    # json is read as its output text (NULL stays NULL), bytea as it is
    assert (
        column_conversion(t["doc"], decimal_format="BASE64").pg("c")
        == "CASE WHEN c IS NULL THEN NULL ELSE format('%s', c) END"
    )
    assert column_conversion(t["blob"], decimal_format="BASE64").spark_type == "BINARY"
    # precise decimals: base64 of the unscaled value, or the number with decimal.format=NUMERIC
    price = column_conversion(t["price"], decimal_format="BASE64")
    assert (
        price.pg("p") == "NULLIF(p, 'NaN')::text"
        and "base64(" in price.json("x")
        and "* 100 AS BIGINT" in price.json("x")
    )
    assert column_conversion(t["price"], decimal_format="NUMERIC").json("x") == "CAST(x AS DECIMAL(12,2))"
    # unconstrained numeric: Debezium's VariableScaleDecimal struct
    assert "named_struct('scale'" in column_conversion(t["free"], decimal_format="BASE64").json("x")
    # arrays: element by element, in order
    tags = column_conversion(t["tags"], decimal_format="BASE64")
    assert "WITH ORDINALITY" in tags.pg('"tags"') and tags.json("`tags`").startswith("transform(`tags`, x -> ")

    connect = {c.name: c for c in table(pg.TypeModes("double", "connect")).columns}
    assert column_conversion(connect["price"], decimal_format="BASE64").pg("p") == "p::float8"
    assert (
        column_conversion(connect["local"], decimal_format="BASE64").pg("l")
        == "floor(EXTRACT(EPOCH FROM l) * 1000)::int8"
    )
    strings = {c.name: c for c in table(pg.TypeModes("string", "adaptive")).columns}
    assert column_conversion(strings["free"], decimal_format="BASE64").spark_type == "STRING"


def test_too_wide_precise_decimals_are_refused_naming_the_mode() -> None:
    modes = pg.TypeModes()
    wide = Column("big", pg.NUMERIC, (50 << 16 | 2) + 4, True, pg.column_type(pg.NUMERIC, (50 << 16 | 2) + 4, modes))
    with pytest.raises(ConfigError) as info:
        column_conversion(wide, decimal_format="BASE64")
    assert info.value.key == "target.cdc.config.decimal.handling.mode"


def test_the_read_and_the_records_sql() -> None:
    t = table()
    conversions = [column_conversion(c, decimal_format="BASE64") for c in t.included_columns]
    query = read_sql(t, conversions, "id")
    assert (
        query.startswith('(SELECT "id"::int8 AS "id", ')
        and f'"id" AS "{PARTITION_ALIAS}" FROM "public"."orders")' in query
    )
    key = key_json(t, conversions)
    assert key == "concat('{\"id\":', coalesce(CAST(CAST(`id` AS BIGINT) AS STRING), 'null'), '}')"
    value = wrap(b'{"a":', struct_json(t.included_columns, conversions), b"}")
    assert value.startswith("CAST(concat('{\"a\":', to_json(named_struct('id', ") and value.endswith(
        ", '}') AS BINARY)"
    )


def test_the_constant_parts_are_the_connectors_own_bytes() -> None:
    """head + after's JSON + tail is exactly what the connector's converter writes for a read event."""
    handoff = parse_handoff(target())
    t = table()
    head, tail = record_parts(t, handoff, "shop", 0x16B6C50, 1_700_000_000_123_456_789)
    after = {
        "id": 7, "price": decimal.Decimal("1.50"), "free": {"scale": 1, "value": b"\x0f"}, "at": "2024-01-02T03:04:05.678Z",
        "local": 1, "day": 2, "doc": '{"a": 1}', "tags": ["x", None], "blob": b"\x00\xff",
    }  # fmt: skip
    source = {
        "version": "2.7.0.Final", "connector": "postgresql", "name": "dbserver1", "ts_ms": 1_700_000_000_123,
        "snapshot": "true", "db": "shop", "sequence": f'[null,"{0x16B6C50}"]', "ts_us": 1_700_000_000_123_456,
        "ts_ns": 1_700_000_000_123_456_789, "schema": "public", "table": "orders", "txId": None, "lsn": 0x16B6C50,
        "xmin": None, "origin": None, "origin_lsn": None,
    }  # fmt: skip
    event = {
        "before": None, "after": after, "source": source, "transaction": None, "op": "r",
        "ts_ms": 1_700_000_000_123, "ts_us": 1_700_000_000_123_456, "ts_ns": 1_700_000_000_123_456_789,
    }  # fmt: skip
    # What the connector's JsonConverter plugin writes for the whole event, and for the row alone.
    whole = JsonConverter().from_connect_data(t.topic, t.envelope_schema, event)
    plain = JsonConverter()
    plain.configure({"schemas.enable": False})
    after_json = plain.from_connect_data(t.topic, t.value_schema, after)
    assert whole == head + (after_json or b"") + tail
    assert handoff.value_converter.value_json(t.envelope_schema, event) == whole
    assert head.startswith(
        b'{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}'
    )
    assert b'"name":"dbserver1.public.orders.Envelope"' in head and b',"op":"r",' in tail
    key_head, key_tail = key_parts(t, handoff)
    assert b'"name":"dbserver1.public.orders.Key"' in key_head and key_tail == b"}"
    assert t.topic == "dbserver1.public.orders"


def test_every_record_setting_comes_from_the_connector_config() -> None:
    handoff = parse_handoff(target(**{"value.converter.schemas.enable": "false", "decimal.handling.mode": "string"}))
    assert handoff.partitioner == "crc32" and handoff.name == "orders-cdc"
    assert (
        handoff.value_converter.config.schemas_enable is False and handoff.key_converter.config.schemas_enable is True
    )
    assert handoff.config.decimal_handling_mode == "string"
    assert parse_handoff(target(**{"producer.override.partitioner": "murmur2_random"})).partitioner == "murmur2"
    # references are the worker's business: not needed for the records
    assert parse_handoff(target(**{"database.password": "${env:PG_PASSWORD}"})).config.database_password is None


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"transforms": "unwrap"}, "target.cdc.config.transforms"),
        ({"value.converter": "io.confluent.connect.avro.AvroConverter"}, "target.cdc.config.value.converter"),
        ({"producer.override.partitioner": "random"}, "target.cdc.config.producer.override.partitioner"),
        ({"decimal.handling.mode": "exact"}, "target.cdc.config.decimal.handling.mode"),
        ({"topic.prefix": "${env:PREFIX}"}, "target.cdc.config.topic.prefix"),
    ],
)
def test_what_the_backfill_cannot_reproduce_is_refused_naming_the_key(config: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_handoff(target(**config))
    assert info.value.key == key


def test_settings_of_the_target_may_not_contradict_the_connector() -> None:
    spec = parse_spec(
        {
            "id": "job",
            "kind": "jdbc_to_topic",
            "source": {"connection.url": "jdbc:postgresql://db/shop", "table": "public.orders"},
            "target": {"partitioner": "murmur2", "cdc": {"name": "c", "config": BASE}},
        }
    )
    with pytest.raises(ConfigError) as info:
        parse_handoff(spec.target)
    assert info.value.key == "target.partitioner"


def test_the_spec_takes_a_cdc_connector_instead_of_a_topic() -> None:
    with pytest.raises(ConfigError) as info:
        parse_spec(
            {
                "id": "j",
                "kind": "jdbc_to_topic",
                "source": {"connection.url": "jdbc:postgresql://db/shop", "table": "t"},
                "target": {},
            }
        )
    assert info.value.key == "target.topic" and "required (or cdc" in str(info.value)
    with pytest.raises(ConfigError) as info:
        parse_spec(
            {"id": "j", "kind": "jdbc_to_topic", "source": {"connection.url": "jdbc:postgresql://db/shop", "table": "t"},
             "target": {"cdc": {"name": "c", "config": {**BASE, "connector.class": "JdbcSource"}}}}
        )  # fmt: skip
    assert info.value.key == "target.cdc.config"
    spec = parse_spec(
        {"id": "j", "kind": "jdbc_to_topic", "source": {"connection.url": "jdbc:postgresql://db/shop", "table": "t"},
         "target": {"cdc": {"name": "c", "config": {**BASE, "database.password": "pw", "database.user": "${env:PG_USER}"}}}}
    )  # fmt: skip
    shown = masked_spec(spec)["target"]["cdc"]["config"]
    assert shown["database.password"] == "[hidden]" and shown["database.user"] == "${env:PG_USER}"


def test_a_table_without_a_key_has_no_key_sql() -> None:
    t = table()
    keyless = Table(2, "public", "log", t.columns, [], "f", "p", t.included)
    assert key_json(keyless, [column_conversion(c, decimal_format="BASE64") for c in keyless.included_columns]) is None
    assert key_parts(keyless, SimpleNamespace(key_converter=parse_handoff(target()).key_converter)) == (b"", b"")  # type: ignore[arg-type]


def test_floats_are_printed_shortest_as_the_connector_does() -> None:
    modes = pg.TypeModes()
    f8 = Column("f8", pg.FLOAT8, -1, True, pg.column_type(pg.FLOAT8, -1, modes))
    i = Column("i", pg.INT4, -1, False, pg.column_type(pg.INT4, -1, modes))
    conversions = [column_conversion(c, decimal_format="BASE64") for c in (i, f8)]
    sql = struct_json([i, f8], conversions)
    assert "reflect('com.fasterxml.jackson.core.io.schubfach.DoubleToDecimal', 'toString'" in sql
    assert sql.startswith("regexp_replace(to_json(") and "'$1')" in sql
    assert not struct_json([i], conversions[:1]).startswith("regexp_replace")
