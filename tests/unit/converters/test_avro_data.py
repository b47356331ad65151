"""Connect ↔ Avro schema and value mapping (``sluice.converters.avro_data``), without a registry.

The expected Avro schemas are the ones Confluent's ``AvroData`` produces for the same Connect
schemas (its documented conventions: ``connect.type`` for int8/int16, ``connect.*`` metadata,
``ConnectDefault`` for unnamed structs, ``MapEntry`` arrays for non-string keys, null-first
unions for optional fields).
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
from typing import Any

import fastavro
import pytest

from sluice.connectors.api.errors import DataError
from sluice.connectors.api.schema import (
    BOOLEAN_SCHEMA,
    BYTES_SCHEMA,
    FLOAT32_SCHEMA,
    FLOAT64_SCHEMA,
    INT8_SCHEMA,
    INT16_SCHEMA,
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    Date,
    Decimal,
    Schema,
    Time,
    Timestamp,
    Type,
)
from sluice.converters.avro_data import UNION_NAME, AvroData, strip_logical_types

DATA = AvroData()


def roundtrip(schema: Schema, value: Any) -> tuple[Schema, Any]:
    """Write ``value`` as Avro bytes with fastavro and read them back through the Connect mapping."""
    avro = DATA.avro_schema(schema)
    parsed = fastavro.parse_schema(strip_logical_types(avro))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, DATA.encoder(schema)(value))
    buf.seek(0)
    datum = fastavro.schemaless_reader(buf, parsed, None, return_record_name=True, return_record_name_override=True)
    read_schema, decode = DATA.connect_schema(avro)
    return read_schema, datum if decode is None else decode(datum)


def test_primitives_map_to_their_avro_names_and_int8_int16_keep_their_connect_type() -> None:
    assert DATA.avro_schema(INT32_SCHEMA) == "int"
    assert DATA.avro_schema(INT64_SCHEMA) == "long"
    assert DATA.avro_schema(FLOAT32_SCHEMA) == "float"
    assert DATA.avro_schema(FLOAT64_SCHEMA) == "double"
    assert DATA.avro_schema(BOOLEAN_SCHEMA) == "boolean"
    assert DATA.avro_schema(STRING_SCHEMA) == "string"
    assert DATA.avro_schema(BYTES_SCHEMA) == "bytes"
    assert DATA.avro_schema(INT8_SCHEMA) == {"type": "int", "connect.type": "int8"}
    assert DATA.avro_schema(INT16_SCHEMA) == {"type": "int", "connect.type": "int16"}
    assert DATA.avro_schema(OPTIONAL_STRING_SCHEMA) == ["null", "string"]


def test_logical_types_carry_avro_logical_types_and_connect_metadata() -> None:
    assert DATA.avro_schema(Decimal.schema(2)) == {
        "type": "bytes",
        "scale": 2,
        "precision": 64,
        "connect.version": 1,
        "connect.parameters": {"scale": "2"},
        "connect.name": "org.apache.kafka.connect.data.Decimal",
        "logicalType": "decimal",
    }
    assert DATA.avro_schema(Decimal.schema(3, precision=10))["precision"] == 10
    assert DATA.avro_schema(Date.SCHEMA) == {
        "type": "int",
        "connect.version": 1,
        "connect.name": "org.apache.kafka.connect.data.Date",
        "logicalType": "date",
    }
    assert DATA.avro_schema(Time.SCHEMA)["logicalType"] == "time-millis"
    assert DATA.avro_schema(Timestamp.SCHEMA) == {
        "type": "long",
        "connect.version": 1,
        "connect.name": "org.apache.kafka.connect.data.Timestamp",
        "logicalType": "timestamp-millis",
    }


def test_a_struct_is_a_record_named_after_the_schema_and_optional_fields_default_to_null() -> None:
    schema = Schema.struct(
        [("id", INT64_SCHEMA), ("note", OPTIONAL_STRING_SCHEMA), ("n", Schema(Type.INT32, default=7))],
        name="shop.public.orders.Value",
        version=2,
        doc="an order",
    )
    assert DATA.avro_schema(schema) == {
        "type": "record",
        "name": "Value",
        "namespace": "shop.public.orders",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "n", "type": {"type": "int", "connect.default": 7}, "default": 7},
        ],
        "connect.doc": "an order",
        "connect.version": 2,
        "connect.name": "shop.public.orders.Value",
    }


def test_unnamed_structs_are_connect_default_records_numbered_when_several_differ() -> None:
    a = Schema.struct([("x", INT32_SCHEMA)])
    b = Schema.struct([("y", STRING_SCHEMA)])
    outer = Schema.struct([("a", a), ("a2", a), ("b", b)])
    avro = DATA.avro_schema(outer)
    assert (avro["name"], avro["namespace"]) == ("ConnectDefault", "io.confluent.connect.avro")
    inner = [f["type"] for f in avro["fields"]]
    assert inner[0]["name"] == "ConnectDefault2"
    assert inner[1] == "io.confluent.connect.avro.ConnectDefault2"  # the same struct again: a reference
    assert inner[2]["name"] == "ConnectDefault3"
    read, _ = DATA.connect_schema(avro)
    assert read == outer  # the generated names read back as no name


def test_maps_with_string_keys_are_avro_maps_and_others_arrays_of_map_entries() -> None:
    assert DATA.avro_schema(Schema.map(STRING_SCHEMA, INT32_SCHEMA)) == {"type": "map", "values": "int"}
    assert DATA.avro_schema(Schema.map(INT32_SCHEMA, STRING_SCHEMA)) == {
        "type": "array",
        "items": {
            "type": "record",
            "name": "MapEntry",
            "namespace": "io.confluent.connect.avro",
            "fields": [{"name": "key", "type": "int"}, {"name": "value", "type": "string"}],
        },
    }


def test_every_connect_type_round_trips_schema_and_value() -> None:
    inner = Schema.struct([("x", INT32_SCHEMA), ("when", Timestamp.OPTIONAL_SCHEMA)], name="com.example.Inner")
    schema = Schema.struct(
        [
            ("i8", INT8_SCHEMA),
            ("i16", INT16_SCHEMA),
            ("i32", INT32_SCHEMA),
            ("i64", OPTIONAL_INT64_SCHEMA),
            ("f32", FLOAT32_SCHEMA),
            ("f64", FLOAT64_SCHEMA),
            ("flag", BOOLEAN_SCHEMA),
            ("text", OPTIONAL_STRING_SCHEMA),
            ("raw", BYTES_SCHEMA),
            ("price", Decimal.schema(2)),
            ("neg", Decimal.schema(0, optional=True)),
            ("day", Date.SCHEMA),
            ("clock", Time.SCHEMA),
            ("at", Timestamp.SCHEMA),
            ("tags", Schema.array(STRING_SCHEMA)),
            ("scores", Schema.map(STRING_SCHEMA, FLOAT64_SCHEMA)),
            ("by_id", Schema.map(INT64_SCHEMA, OPTIONAL_STRING_SCHEMA, optional=True)),
            ("inner", inner),
            ("maybe", inner.as_optional()),
            ("n", Schema(Type.INT32, default=7)),
        ],
        name="com.example.Everything",
        version=4,
        parameters={"origin": "test"},
    )
    value = {
        "i8": -128,
        "i16": 32767,
        "i32": -(2**31),
        "i64": None,
        "f32": 1.5,
        "f64": -2.25e300,
        "flag": True,
        "text": "ünïcødé ✓",
        "raw": b"\x00\xff",
        "price": decimal.Decimal("-12345.67"),
        "neg": decimal.Decimal("-5"),
        "day": dt.date(1969, 12, 31),
        "clock": dt.time(23, 59, 59, 999000),
        "at": dt.datetime(2024, 2, 29, 12, 30, 0, 123000, tzinfo=dt.UTC),
        "tags": ["a", "b"],
        "scores": {"x": 1.0},
        "by_id": {1: "one", 2: None},
        "inner": {"x": 1, "when": None},
        "maybe": {"x": 2, "when": dt.datetime(1970, 1, 1, tzinfo=dt.UTC)},
        "n": 3,
    }
    read_schema, read_value = roundtrip(schema, value)
    assert read_schema == schema
    assert read_value == value


def test_a_null_field_with_a_default_is_written_as_the_default() -> None:
    schema = Schema.struct([("n", Schema(Type.INT32, default=7, optional=True))])
    _, value = roundtrip(schema, {"n": None})
    assert value == {"n": 7}
    assert DATA.avro_schema(schema)["fields"][0]["type"][1] == "null"  # the default's type comes first


@pytest.mark.parametrize(
    ("schema", "value", "message"),
    [
        (
            Schema.struct([("id", INT32_SCHEMA)]),
            {"id": "7"},
            "Invalid value for value.id: a str where the schema says int32",
        ),
        (Schema.struct([("id", INT32_SCHEMA)]), {"id": 2**31}, "2147483648 is out of range for int32"),
        (Schema.struct([("id", INT8_SCHEMA)]), {"id": 128}, "out of range for int8"),
        (Schema.struct([("id", INT32_SCHEMA)]), {"id": None}, "null used for a required int32 field"),
        (Schema.struct([("id", INT32_SCHEMA)]), {"id": 1, "extra": 2}, "fields ['extra'] are not in the struct schema"),
        (Schema.struct([("ok", BOOLEAN_SCHEMA)]), {"ok": 1}, "a int where the schema says boolean"),
        (Schema.struct([("p", Decimal.schema(1))]), {"p": decimal.Decimal("1.25")}, "more than 1 fractional digits"),
        (
            Schema.struct([("d", Date.SCHEMA)]),
            {"d": 19000},
            "a int where the schema says org.apache.kafka.connect.data.Date",
        ),
    ],
)
def test_values_that_do_not_fit_the_schema_are_refused_with_the_field_named(
    schema: Schema, value: Any, message: str
) -> None:
    with pytest.raises(DataError, match=message.replace("[", r"\[").replace("]", r"\]")):
        DATA.encoder(schema)(value)


def test_foreign_avro_schemas_read_as_connect_schemas() -> None:
    avro = {
        "type": "record",
        "name": "Reading",
        "namespace": "iot",
        "doc": "one reading",
        "fields": [
            {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["TEMP", "HUMIDITY"]}},
            {"name": "mac", "type": {"type": "fixed", "name": "Mac", "size": 6}},
            {
                "name": "value",
                "type": [
                    "null",
                    "int",
                    "string",
                    {"type": "record", "name": "Pair", "fields": [{"name": "a", "type": "int"}]},
                ],
            },
            {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 3}},
            {"name": "count", "type": "long", "default": 5},
            {"name": "micros", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        ],
    }
    schema, decode = DATA.connect_schema(avro)
    assert schema.name == "iot.Reading"
    assert schema.parameters == {"io.confluent.connect.avro.record.doc": "one reading"}
    kind = schema.field("kind")
    assert kind is not None and kind.schema.type is Type.STRING
    assert kind.schema.parameters == {
        "io.confluent.connect.avro.Enum": "iot.Kind",
        "io.confluent.connect.avro.Enum.TEMP": "TEMP",
        "io.confluent.connect.avro.Enum.HUMIDITY": "HUMIDITY",
    }
    mac = schema.field("mac")
    assert mac is not None and mac.schema.type is Type.BYTES and mac.schema.parameters == {"connect.fixed.size": "6"}
    union = schema.field("value")
    assert union is not None and union.schema.name == UNION_NAME and union.schema.optional
    assert [f.name for f in union.schema.fields] == ["int", "string", "Pair"]
    amount = schema.field("amount")
    assert amount is not None and amount.schema == Decimal.schema(3, precision=9)
    count = schema.field("count")
    assert count is not None and count.schema.default == 5
    micros = schema.field("micros")
    assert micros is not None and micros.schema == INT64_SCHEMA  # as Confluent: no Connect type for micros

    parsed = fastavro.parse_schema(strip_logical_types(avro))
    values = [
        {
            "kind": "TEMP",
            "mac": b"\x01" * 6,
            "value": 21,
            "amount": (1234).to_bytes(2, "big"),
            "count": 1,
            "micros": 10,
        },
        {"kind": "HUMIDITY", "mac": b"\x02" * 6, "value": "high", "amount": b"\xff", "count": 2, "micros": 11},
        {"kind": "TEMP", "mac": b"\x03" * 6, "value": {"a": 4}, "amount": b"\x00", "count": 3, "micros": 12},
        {"kind": "TEMP", "mac": b"\x04" * 6, "value": None, "amount": b"\x00", "count": 4, "micros": 13},
    ]
    read = []
    for datum in values:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, datum)
        buf.seek(0)
        raw = fastavro.schemaless_reader(buf, parsed, None, return_record_name=True, return_record_name_override=True)
        read.append(raw if decode is None else decode(raw))
    assert [r["value"] for r in read] == [{"int": 21}, {"string": "high"}, {"Pair": {"a": 4}}, None]
    assert [r["amount"] for r in read] == [
        decimal.Decimal("1.234"),
        decimal.Decimal("-0.001"),
        decimal.Decimal("0.000"),
        decimal.Decimal("0.000"),
    ]
    assert read[0]["kind"] == "TEMP" and read[0]["mac"] == b"\x01" * 6


def test_a_connect_union_struct_writes_the_branch_that_is_set() -> None:
    union = Schema.struct([("int", INT32_SCHEMA.as_optional()), ("string", OPTIONAL_STRING_SCHEMA)], name=UNION_NAME)
    schema = Schema.struct([("v", union)])
    assert DATA.avro_schema(schema)["fields"][0]["type"] == ["int", "string"]
    assert roundtrip(schema, {"v": {"int": None, "string": "x"}})[1] == {"v": {"string": "x"}}
    assert roundtrip(schema, {"v": {"int": 3, "string": None}})[1] == {"v": {"int": 3}}


def test_two_different_structs_with_one_name_are_refused() -> None:
    a = Schema.struct([("x", INT32_SCHEMA)], name="same.Name")
    b = Schema.struct([("y", INT32_SCHEMA)], name="same.Name")
    with pytest.raises(DataError, match="both named 'same.Name'"):
        DATA.avro_schema(Schema.struct([("a", a), ("b", b)]))


def test_scrub_invalid_names_makes_names_avro_accepts() -> None:
    scrubbing = AvroData(scrub_invalid_names=True)
    schema = Schema.struct([("order-id", INT32_SCHEMA), ("1st", STRING_SCHEMA)], name="my-db.public.line items")
    avro = scrubbing.avro_schema(schema)
    assert (avro["namespace"], avro["name"]) == ("my_db.public", "line_items")
    assert [f["name"] for f in avro["fields"]] == ["order_id", "_1st"]
    parsed = fastavro.parse_schema(strip_logical_types(avro))
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, scrubbing.encoder(schema)({"order-id": 1, "1st": "a"}))
    buf.seek(0)
    assert fastavro.schemaless_reader(buf, parsed, None) == {"order_id": 1, "_1st": "a"}


def test_without_connect_metadata_only_avro_attributes_are_written() -> None:
    plain = AvroData(connect_meta_data=False)
    schema = Schema.struct([("d", Decimal.schema(2)), ("t", INT8_SCHEMA)], name="a.B", version=3)
    assert plain.avro_schema(schema) == {
        "type": "record",
        "name": "B",
        "namespace": "a",
        "fields": [
            {"name": "d", "type": {"type": "bytes", "scale": 2, "precision": 64, "logicalType": "decimal"}},
            {"name": "t", "type": "int"},
        ],
    }


def test_names_avro_refuses_are_named_with_the_setting_that_fixes_them() -> None:
    hyphen = Schema.struct([("id", INT32_SCHEMA)], name="my-server.public.items.Key")
    with pytest.raises(
        DataError, match="schema name 'my-server.public.items.Key' is not a valid Avro name.*scrub.invalid.names=true"
    ):
        DATA.avro_schema(hyphen)
    field = Schema.struct([("order id", INT32_SCHEMA)], name="shop.Order")
    with pytest.raises(DataError, match="field name 'order id' of 'shop.Order' is not a valid Avro name"):
        DATA.avro_schema(field)
    scrubbed = AvroData(scrub_invalid_names=True).avro_schema(hyphen)
    assert (scrubbed["namespace"], scrubbed["name"], scrubbed["connect.name"]) == (
        "my_server.public.items",
        "Key",
        "my-server.public.items.Key",
    )
    read, _ = AvroData(scrub_invalid_names=True).connect_schema(scrubbed)
    assert read == hyphen  # connect.name keeps the original name
