"""Column default expressions (as ``pg_get_expr`` prints them) → the field schemas' defaults,
following Debezium's rules; the parity test checks the same cases against Debezium itself."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import orjson
import pytest

from sluice.connectors.source.postgres_cdc import types as t
from sluice.connectors.source.postgres_cdc.defaults import column_default, literal
from sluice.connectors.source.postgres_cdc.tables import Column, Table
from sluice.converters.json_write import json_schema

ADAPTIVE = t.TypeModes()
NUMERIC_10_3 = (10 << 16 | 3) + 4
NAMES = {
    t.INT2: "int2", t.INT4: "int4", t.INT8: "int8", t.FLOAT4: "float4", t.FLOAT8: "float8", t.NUMERIC: "numeric",
    t.BOOL: "bool", t.TEXT: "text", t.VARCHAR: "varchar", t.BPCHAR: "bpchar", t.JSONB: "jsonb", t.UUID: "uuid",
    t.DATE: "date", t.TIME: "time", t.TIMESTAMP: "timestamp", t.TIMESTAMPTZ: "timestamptz", t.INTERVAL: "interval",
    t.BIT: "bit", t.MONEY: "money", t.BYTEA: "bytea",
}  # fmt: skip


def default(oid: int, expression: str | None, typmod: int = -1, modes: t.TypeModes = ADAPTIVE) -> Any:
    return column_default(expression, NAMES[oid], typmod, t.column_type(oid, typmod, modes))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("42", "42"),
        ("'-7'::integer", "-7"),
        ("'x'::character varying", "x"),
        ("'it''s'::text", "it"),  # the first quoted run, as Debezium's lazy match reads it
        ("nextval('t_id_seq'::regclass)", "<generated>"),
        ("now()", "<generated>"),
        ("(now())::date", "<generated>"),
        ("pg_catalog.now()", "<generated>"),
        ("CURRENT_TIMESTAMP", "<generated>"),
        ("LOCALTIME", "<generated>"),
        ("(1 + 2)", "(1 + 2)"),
    ],
)
def test_the_literal_of_an_expression(expression: str, expected: str) -> None:
    assert literal(expression, "<generated>") == expected


def test_numbers() -> None:
    assert default(t.INT4, "42") == 42
    assert default(t.INT4, "'-7'::integer") == -7
    assert default(t.INT8, "nextval('t_id_seq'::regclass)") == 0  # a serial key's default
    assert default(t.INT2, "'3'::smallint") == 3
    assert default(t.FLOAT8, "'-2.25'::double precision") == -2.25
    assert default(t.FLOAT8, "random()") == 0.0
    assert default(t.NUMERIC, "12.5", NUMERIC_10_3) == decimal.Decimal("12.500")  # padded to the scale
    assert default(t.NUMERIC, "12.5", NUMERIC_10_3, t.TypeModes("string")) == "12.500"
    assert default(t.NUMERIC, "12.5", NUMERIC_10_3, t.TypeModes("double")) == 12.5
    assert default(t.NUMERIC, "1.25") is None  # VariableScaleDecimal is a struct: no default
    assert default(t.INT4, "(1 + 2)") is None  # an expression is not evaluated
    assert default(t.INT4, "NULL::integer") is None


def test_text_booleans_and_uuids() -> None:
    assert default(t.BOOL, "true") is True
    assert default(t.BOOL, "false") is False
    assert default(t.TEXT, "'hello'::text") == "hello"
    assert default(t.VARCHAR, "'x'::character varying") == "x"
    assert default(t.BPCHAR, "'ab'::bpchar") == "ab"
    assert default(t.TEXT, "NULL::text") is None
    assert default(t.TEXT, "now()") == ""
    assert default(t.JSONB, "'{\"a\": 1}'::jsonb") == '{"a": 1}'
    assert default(t.UUID, "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'::uuid") == "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
    assert default(t.UUID, "gen_random_uuid()") == "00000000-0000-0000-0000-000000000000"


def test_dates_and_times_follow_the_time_precision_mode() -> None:
    assert default(t.DATE, "'2024-02-29'::date") == 19782
    assert default(t.DATE, "CURRENT_DATE") == 0
    assert default(t.TIMESTAMP, "'1969-12-31 23:59:59.5'::timestamp without time zone") == -500_000
    assert default(t.TIMESTAMP, "CURRENT_TIMESTAMP") == 0
    assert default(t.TIMESTAMPTZ, "'2024-02-29 11:45:30+00'::timestamp with time zone") == "2024-02-29T11:45:30.000000Z"
    assert default(t.TIME, "'13:45:30.5'::time without time zone") == 49_530_500_000
    assert default(t.INTERVAL, "'1 day 02:00:00'::interval") == 93_600_000_000
    connect = t.TypeModes(time_precision_mode="connect")
    second = default(t.TIMESTAMP, "'1970-01-01 00:00:01'::timestamp without time zone", modes=connect)
    assert second == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)  # Connect's Timestamp: epoch millis in JSON
    assert default(t.DATE, "'2024-02-29'::date", modes=connect) == dt.date(2024, 2, 29)


def test_types_without_a_parser_and_enums() -> None:
    assert default(t.MONEY, "3.50") is None
    assert default(t.BYTEA, "'\\x00'::bytea") is None
    assert default(t.BIT, "'1'::\"bit\"", 1) is True
    mood = t.column_type(t.TEXT, -1, ADAPTIVE)
    assert column_default("'ok'::mood", "mood", -1, mood, enum=True) == "ok"
    assert column_default("'ok'::text", "mood", -1, mood, enum=True) is None
    assert column_default("'ok'::mood", "mood", -1, mood) is None  # not an enum: no parser for the name


def test_defaults_reach_the_key_and_value_schemas() -> None:
    int8 = t.column_type(t.INT8, -1, ADAPTIVE)
    text = t.column_type(t.TEXT, -1, ADAPTIVE)
    columns = [
        Column("id", t.INT8, -1, False, int8, default=0),
        Column("region", t.TEXT, -1, False, text, default="eu"),
        Column("note", t.TEXT, -1, True, text),
    ]
    table = Table(1, "public", "things", columns, ["id", "region"], "d", "pfx", [True] * 3)
    assert table.key_schema is not None
    key = orjson.loads(json_schema(table.key_schema))
    assert [(f["field"], f.get("default")) for f in key["fields"]] == [("id", 0), ("region", "eu")]
    value = orjson.loads(json_schema(table.value_schema))
    assert [f.get("default", "-") for f in value["fields"]] == [0, "eu", "-"]
    changed = Table(1, "public", "things", [*columns[:2], Column("note", t.TEXT, -1, True, text, default="x")],
                    ["id", "region"], "d", "pfx", [True] * 3)  # fmt: skip
    assert not table.same_shape(changed)
