"""JsonConverter: byte equality with Kafka Connect's converter, round trips, and error messages.

``vectors/json_converter.jsonl`` is the output of Kafka Connect 4.1's own JsonConverter for the
cases in ``tests/compat/JsonConverterVectors.java`` (regenerate with
``python tests/compat/generate_vectors.py``). ``CASES`` below defines the same cases by name.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import random
import struct
from decimal import Decimal as D
from pathlib import Path
from typing import Any

import pytest

from sluice.connectors.api.errors import ConfigError, DataError
from sluice.connectors.api.schema import (
    BOOLEAN_SCHEMA,
    BYTES_SCHEMA,
    FLOAT32_SCHEMA,
    FLOAT64_SCHEMA,
    INT8_SCHEMA,
    INT16_SCHEMA,
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_BYTES_SCHEMA,
    OPTIONAL_FLOAT32_SCHEMA,
    OPTIONAL_INT32_SCHEMA,
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    Date,
    Decimal,
    Schema,
    SchemaAndValue,
    Time,
    Timestamp,
    Type,
)
from sluice.converters.json import (
    ENVELOPE_ERROR,
    REQUIRED_NULL_ERROR,
    JsonConverter,
    java_decimal_str,
    java_double_str,
    java_float_str,
)

VECTORS = Path(__file__).parent / "vectors" / "json_converter.jsonl"
UTC = dt.UTC
F32_MAX = struct.unpack("<f", bytes.fromhex("ffff7f7f"))[0]
F32_MIN_SUBNORMAL = struct.unpack("<f", bytes.fromhex("01000000"))[0]


def _struct(name: str | None, *fields: tuple[str, Schema], **kw: Any) -> Schema:
    return Schema.struct(fields, name=name, **kw)


LINE = _struct("com.example.Line", ("sku", STRING_SCHEMA), ("qty", INT32_SCHEMA), ("price", Decimal.schema(2)))
CUSTOMER = _struct("com.example.Customer", ("name", STRING_SCHEMA), ("email", OPTIONAL_STRING_SCHEMA), optional=True)
ORDER = _struct(
    "com.example.Order",
    ("id", INT64_SCHEMA),
    ("tags", Schema.array(STRING_SCHEMA)),
    ("attrs", Schema.map(STRING_SCHEMA, STRING_SCHEMA)),
    ("counts", Schema.map(INT32_SCHEMA, INT64_SCHEMA)),
    ("lines", Schema.array(LINE)),
    ("customer", CUSTOMER),
    ("amount", FLOAT64_SCHEMA),
    ("ratio", OPTIONAL_FLOAT32_SCHEMA),
    ("placed", Timestamp.SCHEMA),
    ("due", Date.OPTIONAL_SCHEMA),
    ("raw", OPTIONAL_BYTES_SCHEMA),
    ("paid", BOOLEAN_SCHEMA),
    version=3,
    doc="An order.",
    parameters={"owner": "sales"},
)
WITH_DEFAULTS = _struct(
    "com.example.WithDefaults",
    ("a", INT32_SCHEMA.with_(default=5)),
    ("b", OPTIONAL_STRING_SCHEMA.with_(default="x")),
    ("c", FLOAT64_SCHEMA.with_(optional=True, default=2.5)),
    ("d", Decimal.schema(2, optional=True).with_(default=D("1.50"))),
)
CONTROLS = "".join(chr(c) + "|" for c in range(0x20)) + "\x7f"

#: name → (schema, value); the same names and values as JsonConverterVectors.java.
CASES: dict[str, tuple[Schema | None, Any]] = {
    "int8_min": (INT8_SCHEMA, -128),
    "int8_max": (INT8_SCHEMA, 127),
    "int16_min": (INT16_SCHEMA, -32768),
    "int16_max": (INT16_SCHEMA, 32767),
    "int32_min": (INT32_SCHEMA, -(2**31)),
    "int32_max": (INT32_SCHEMA, 2**31 - 1),
    "int32_zero": (INT32_SCHEMA, 0),
    "int64_min": (INT64_SCHEMA, -(2**63)),
    "int64_max": (INT64_SCHEMA, 2**63 - 1),
    "float32_0_1": (FLOAT32_SCHEMA, 0.1),
    "float32_1": (FLOAT32_SCHEMA, 1.0),
    "float32_pi": (FLOAT32_SCHEMA, 3.14159),
    "float32_1e_5": (FLOAT32_SCHEMA, 1e-5),
    "float32_12345_678": (FLOAT32_SCHEMA, 12345.678),
    "float32_1e7": (FLOAT32_SCHEMA, 1e7),
    "float32_neg_1_5e_7": (FLOAT32_SCHEMA, -1.5e-7),
    "float32_max": (FLOAT32_SCHEMA, F32_MAX),
    "float32_min_subnormal": (FLOAT32_SCHEMA, F32_MIN_SUBNORMAL),
    "float32_neg_zero": (FLOAT32_SCHEMA, -0.0),
    "float32_nan": (FLOAT32_SCHEMA, math.nan),
    "float32_neg_inf": (FLOAT32_SCHEMA, -math.inf),
    "float64_0_1": (FLOAT64_SCHEMA, 0.1),
    "float64_1": (FLOAT64_SCHEMA, 1.0),
    "float64_zero": (FLOAT64_SCHEMA, 0.0),
    "float64_neg_zero": (FLOAT64_SCHEMA, -0.0),
    "float64_1e20": (FLOAT64_SCHEMA, 1e20),
    "float64_1_5e_7": (FLOAT64_SCHEMA, 1.5e-7),
    "float64_12345678_9": (FLOAT64_SCHEMA, 12345678.9),
    "float64_1e_3": (FLOAT64_SCHEMA, 1e-3),
    "float64_9_99e_4": (FLOAT64_SCHEMA, 9.99e-4),
    "float64_1e7": (FLOAT64_SCHEMA, 1e7),
    "float64_9999999": (FLOAT64_SCHEMA, 9999999.0),
    "float64_123456_789": (FLOAT64_SCHEMA, -123456.789),
    "float64_2_pow_53": (FLOAT64_SCHEMA, 9007199254740992.0),
    "float64_1_234e_300": (FLOAT64_SCHEMA, 1.234e-300),
    "float64_max": (FLOAT64_SCHEMA, 1.7976931348623157e308),
    "float64_min_subnormal": (FLOAT64_SCHEMA, 5e-324),
    "float64_min_normal": (FLOAT64_SCHEMA, 2.2250738585072014e-308),
    "float64_nan": (FLOAT64_SCHEMA, math.nan),
    "float64_inf": (FLOAT64_SCHEMA, math.inf),
    "float64_neg_inf": (FLOAT64_SCHEMA, -math.inf),
    "boolean_true": (BOOLEAN_SCHEMA, True),
    "boolean_false": (BOOLEAN_SCHEMA, False),
    "string_ascii": (STRING_SCHEMA, "hello world"),
    "string_empty": (STRING_SCHEMA, ""),
    "string_unicode": (STRING_SCHEMA, "h\u00e9llo w\u00f6rld \u2713 \u65e5\u672c\u8a9e \U0001f600 \u2028\u2029"),
    "string_quotes_backslashes": (STRING_SCHEMA, "say \"hi\" \\ C:\\path\\to </script> 'x'"),
    "string_control_chars": (STRING_SCHEMA, CONTROLS),
    "string_escape_lookalike": (STRING_SCHEMA, "literal \\u001b and \\\x1b and \\\\u001f"),
    "bytes_all": (BYTES_SCHEMA, bytes(range(256))),
    "bytes_empty": (BYTES_SCHEMA, b""),
    "optional_int32_null": (OPTIONAL_INT32_SCHEMA, None),
    "optional_string_null": (OPTIONAL_STRING_SCHEMA, None),
    "optional_string_value": (OPTIONAL_STRING_SCHEMA, "present"),
    "int32_required_null": (INT32_SCHEMA, None),
    "tombstone": (None, None),
    "int32_default_null": (OPTIONAL_INT32_SCHEMA.with_(default=42), None),
    "string_default_null": (STRING_SCHEMA.with_(default="dflt"), None),
    "int32_default_value": (OPTIONAL_INT32_SCHEMA.with_(default=42), 7),
    "array_default_null": (Schema.array(INT32_SCHEMA, optional=True, default=[1, 2]), None),
    "struct_field_defaults": (WITH_DEFAULTS, {"a": None, "b": None, "c": 0.25, "d": None}),
    "decimal_positive": (Decimal.schema(2), D("12.34")),
    "decimal_negative": (Decimal.schema(2), D("-12.34")),
    "decimal_zero": (Decimal.schema(2), D("0.00")),
    "decimal_255": (Decimal.schema(2), D("2.55")),
    "decimal_minus_128": (Decimal.schema(0), D("-128")),
    "decimal_scale0_big": (Decimal.schema(0), D("12345678901234567890")),
    "decimal_tiny": (Decimal.schema(7), D("0.0000001")),
    "decimal_40_digits": (Decimal.schema(10), D("-123456789012345678901234567890.1234567890")),
    "decimal_optional_null": (Decimal.schema(2, optional=True), None),
    "date_leap_day": (Date.SCHEMA, dt.date(2024, 2, 29)),
    "date_before_epoch": (Date.SCHEMA, dt.date(1969, 12, 31)),
    "date_epoch": (Date.SCHEMA, dt.date(1970, 1, 1)),
    "time_afternoon": (Time.SCHEMA, dt.time(13, 45, 30, 123000)),
    "time_midnight": (Time.SCHEMA, dt.time(0, 0)),
    "time_last_ms": (Time.SCHEMA, dt.time(23, 59, 59, 999000)),
    "timestamp_2024": (Timestamp.SCHEMA, dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC)),
    "timestamp_before_epoch": (Timestamp.SCHEMA, dt.datetime(1969, 7, 20, 20, 17, 40, tzinfo=UTC)),
    "timestamp_epoch": (Timestamp.SCHEMA, dt.datetime(1970, 1, 1, tzinfo=UTC)),
    "string_with_metadata": (
        STRING_SCHEMA.with_(
            name="com.example.Name",
            version=2,
            doc='A name.\nWith "quotes" and a tab\t.',
            parameters={"b.second": "2", "a.first": 'one "quoted"'},
        ),
        "Ada",
    ),
    "int64_with_metadata_optional": (
        OPTIONAL_INT64_SCHEMA.with_(name="com.example.Count", version=1, doc="count"),
        3,
    ),
    "array_int32": (Schema.array(INT32_SCHEMA), [1, 2, 3]),
    "array_empty": (Schema.array(STRING_SCHEMA), []),
    "array_optional_items": (Schema.array(OPTIONAL_INT64_SCHEMA, optional=True), [1, None, 3]),
    "array_float64": (Schema.array(FLOAT64_SCHEMA), [0.5, 1e21, -3e-9]),
    "map_string_keys": (Schema.map(STRING_SCHEMA, INT32_SCHEMA), {"one": 1, "two": 2, "": 0}),
    "map_int_keys": (Schema.map(INT32_SCHEMA, STRING_SCHEMA), {1: "a", -2: "b"}),
    "map_optional_values": (Schema.map(STRING_SCHEMA, OPTIONAL_FLOAT32_SCHEMA), {"x": 1.5, "y": None}),
    "map_empty": (Schema.map(STRING_SCHEMA, STRING_SCHEMA), {}),
    "struct_nested": (
        ORDER,
        {
            "id": 9_000_000_001,
            "tags": ["new", "priority"],
            "attrs": {"channel": "web", "note": "leave at door"},
            "counts": {7: 70, 8: 80},
            "lines": [
                {"sku": "A-1", "qty": 2, "price": D("9.99")},
                {"sku": "B-2", "qty": 1, "price": D("-0.50")},
            ],
            "customer": {"name": "Ada", "email": None},
            "amount": 19.48,
            "ratio": 0.25,
            "placed": dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC),
            "due": dt.date(2024, 3, 1),
            "raw": b"\x01\x02\x03",
            "paid": True,
        },
    ),
    "struct_nested_customer_null": (
        ORDER,
        {
            "id": 1,
            "tags": [],
            "attrs": {},
            "counts": {},
            "lines": [],
            "customer": None,
            "amount": 0.0,
            "placed": dt.datetime(1970, 1, 1, tzinfo=UTC),
            "paid": False,
        },
    ),
    "array_of_structs": (
        Schema.array(LINE),
        [{"sku": "X", "qty": 0, "price": D("0.01")}, {"sku": "Y", "qty": -1, "price": D("100.00")}],
    ),
    "struct_empty": (Schema.struct([]), {}),
    "schemaless_map": (None, {"a": 1, "b": "x", "c": [1, 2.5, True, None], "d": {"e": None}}),
    "schemaless_list": (None, [1, "two", 3.0, None, False, 1e-7]),
    "schemaless_int": (None, 42),
    "schemaless_negative_int": (None, -9_000_000_000),
    "schemaless_double": (None, 3.14),
    "schemaless_double_large": (None, 1e20),
    "schemaless_string": (None, 'plain "text"'),
    "schemaless_bytes": (None, b"\x01\x02\xff"),
    "schemaless_boolean": (None, True),
    "schemaless_int_keys": (None, {1: "a", 2: {"nested": []}}),
    "schemaless_nan": (None, math.nan),
}


def _load_vectors() -> list[dict[str, Any]]:
    return [json.loads(line) for line in VECTORS.read_text(encoding="utf-8").splitlines()]


VECTOR_LINES = _load_vectors()


def _vector_id(line: dict[str, Any]) -> str:
    extras = ",".join(f"{k}={v}" for k, v in line["config"].items() if k != "schemas.enable")
    return f"{line['case']}[{'envelope' if line['config']['schemas.enable'] == 'true' else 'plain'}{',' + extras if extras else ''}]"


def _converter(config: dict[str, str]) -> JsonConverter:
    converter = JsonConverter()
    converter.configure(config, is_key=False)
    return converter


def test_every_case_has_vectors_and_every_vector_a_case() -> None:
    assert {line["case"] for line in VECTOR_LINES} == set(CASES)


@pytest.mark.parametrize("line", VECTOR_LINES, ids=_vector_id)
def test_bytes_identical_to_kafka_connect(line: dict[str, Any]) -> None:
    schema, value = CASES[line["case"]]
    converter = _converter(line["config"])
    if "error" in line:
        with pytest.raises(DataError) as caught:
            converter.from_connect_data("vectors", schema, value)
        assert str(caught.value) == line["error"]
        return
    produced = converter.from_connect_data("vectors", schema, value)
    expected = None if line["bytes_b64"] is None else base64.b64decode(line["bytes_b64"])
    assert produced == expected


@pytest.mark.parametrize("config", [{"schemas.enable": "true"}, {"schemas.enable": "false"}], ids=["envelope", "plain"])
def test_batch_bytes_identical_to_single_records(config: dict[str, str]) -> None:
    names = [
        n for n, (s, v) in CASES.items() if not (s is not None and v is None and not s.optional and s.default is None)
    ]
    schemas = [CASES[n][0] for n in names] * 2
    values = [CASES[n][1] for n in names] * 2
    converter = _converter(config)
    assert converter.from_connect_batch("t", schemas, values) == [
        _converter(config).from_connect_data("t", s, v) for s, v in zip(schemas, values)
    ]


@pytest.mark.parametrize("line", [ln for ln in VECTOR_LINES if ln["bytes_b64"]], ids=_vector_id)
def test_connect_bytes_read_back_and_rewrite_identically(line: dict[str, Any]) -> None:
    """Reading Connect's bytes and writing the result again reproduces Connect's bytes."""
    converter = _converter(line["config"])
    data = base64.b64decode(line["bytes_b64"])
    read = converter.to_connect_data("vectors", data)
    if line["config"]["schemas.enable"] == "false":
        if read.value is None:
            assert data == b"null"  # plain null reads back as no value at all, which writes a tombstone
            return
        if line["config"].get("decimal.format") == "NUMERIC":
            return  # without a schema a NUMERIC decimal reads back as a double, as in Connect
    assert converter.from_connect_data("vectors", read.schema, read.value) == data
    assert converter.to_connect_batch("vectors", [data, data]) == ([read.schema] * 2, [read.value] * 2)


# -- round trips ----------------------------------------------------------------------------------


def _f32(x: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", x))[0])


def _normalized(schema: Schema | None, value: Any, replace_null: bool) -> Any:
    """The value Connect reads back: defaults for nulls, float32 precision, NaN comparable."""
    if schema is None:
        return value
    if value is None:
        if replace_null and schema.default is not None:
            return _normalized(schema, schema.default, replace_null)
        return None
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if schema.type is Type.FLOAT32 and schema.name is None:
        return _f32(value)
    if schema.type is Type.STRUCT:
        return {f.name: _normalized(f.schema, value.get(f.name), replace_null) for f in schema.fields}
    if schema.type is Type.ARRAY:
        return [_normalized(schema.value_schema, v, replace_null) for v in value]
    if schema.type is Type.MAP:
        return {k: _normalized(schema.value_schema, v, replace_null) for k, v in value.items()}
    return value


TYPED_CASES = [n for n, (s, v) in CASES.items() if s is not None and n != "int32_required_null"]


@pytest.mark.parametrize("decimal_format", ["BASE64", "NUMERIC"])
@pytest.mark.parametrize("replace_null", [True, False])
@pytest.mark.parametrize("name", TYPED_CASES)
def test_round_trip_with_schemas(name: str, replace_null: bool, decimal_format: str) -> None:
    schema, value = CASES[name]
    assert schema is not None
    converter = _converter({"decimal.format": decimal_format, "replace.null.with.default": str(replace_null).lower()})
    try:
        data = converter.from_connect_data("t", schema, value)
    except DataError as exc:
        assert not replace_null and str(exc) == REQUIRED_NULL_ERROR
        return
    read = converter.to_connect_data("t", data)
    assert read.schema == schema
    # Writing substituted defaults already when replace_null is on; reading leaves nulls as null.
    assert _normalized(schema, read.value, replace_null) == _normalized(schema, value, replace_null)


def test_round_trip_types_are_python_values() -> None:
    converter = JsonConverter()
    schema, value = CASES["struct_nested"]
    read = converter.to_connect_data("t", converter.from_connect_data("t", schema, value))
    assert read.value == value
    assert list(read.value) == [f.name for f in ORDER.fields]
    assert type(read.value["lines"][0]["price"]) is D
    assert read.value["placed"].tzinfo is not None and read.value["placed"] == value["placed"]
    assert type(read.value["due"]) is dt.date
    assert read.value["counts"] == {7: 70, 8: 80}


def test_schemaless_inference() -> None:
    converter = _converter({"schemas.enable": "false"})
    read = converter.to_connect_data("t", b'{"i":1,"f":1.5,"big":1.0E20,"o":{"a":[true,null]},"s":"x"}')
    assert read == SchemaAndValue(None, {"i": 1, "f": 1.5, "big": 1e20, "o": {"a": [True, None]}, "s": "x"})
    assert type(read.value["i"]) is int and type(read.value["f"]) is float


def test_numeric_decimal_reads_back_exactly() -> None:
    converter = _converter({"decimal.format": "NUMERIC"})
    value = D("-123456789012345678901234567890.1234567890")
    data = converter.from_connect_data("t", Decimal.schema(10), value)
    assert data is not None and data.endswith(b'"payload":-123456789012345678901234567890.1234567890}')
    for _ in range(2):  # the second read takes the known-schema fast path
        assert converter.to_connect_data("t", data).value == value


def test_numeric_decimal_rescales_to_schema_scale() -> None:
    converter = _converter({"schemas.enable": "false", "decimal.format": "NUMERIC"})
    assert converter.from_connect_data("t", Decimal.schema(2), D("1.5")) == b"1.50"
    assert converter.from_connect_data("t", Decimal.schema(2), 3) == b"3.00"
    assert converter.from_connect_data("t", Decimal.schema(-2), D("12300")) == b"1.23E+4"


def test_non_finite_floats_read_back() -> None:
    converter = JsonConverter()
    read = converter.to_connect_data("t", converter.from_connect_data("t", FLOAT64_SCHEMA, math.inf))
    assert read.value == math.inf


def test_null_default_on_read() -> None:
    schema = OPTIONAL_INT32_SCHEMA.with_(default=42)
    data = b'{"schema":{"type":"int32","optional":true,"default":42},"payload":null}'
    assert JsonConverter().to_connect_data("t", data) == SchemaAndValue(schema, 42)
    keep_null = _converter({"replace.null.with.default": "false"})
    assert keep_null.to_connect_data("t", data) == SchemaAndValue(schema, None)


def test_tombstone_both_ways() -> None:
    for enabled in ("true", "false"):
        converter = _converter({"schemas.enable": enabled})
        assert converter.from_connect_data("t", None, None) is None
        assert converter.to_connect_data("t", None) == SchemaAndValue(None, None)


def test_headers_use_the_record_format() -> None:
    converter = JsonConverter()
    converter.configure({"converter.type": "header"})
    data = converter.from_connect_header("t", "h", STRING_SCHEMA, "v")
    assert data == b'{"schema":{"type":"string","optional":false},"payload":"v"}'
    assert converter.to_connect_header("t", "h", data) == SchemaAndValue(STRING_SCHEMA, "v")


def test_small_cache_stays_correct() -> None:
    converter = _converter({"schemas.cache.size": "1"})
    schemas = [INT32_SCHEMA, STRING_SCHEMA.with_(name="n"), Decimal.schema(2), INT32_SCHEMA.as_optional()]
    values = [1, "s", D("1.00"), None]
    for _ in range(3):
        for schema, value in zip(schemas, values):
            data = converter.from_connect_data("t", schema, value)
            assert converter.to_connect_data("t", data) == SchemaAndValue(schema, value)


def test_equal_schema_objects_share_output() -> None:
    converter = JsonConverter()
    a = Schema.struct([("x", INT32_SCHEMA)], name="s")
    b = Schema.struct([("x", INT32_SCHEMA)], name="s")
    assert a is not b
    assert (
        converter.from_connect_batch("t", [a, b, a], [{"x": 1}] * 3)
        == [
            b'{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"x"}],'
            b'"optional":false,"name":"s"},"payload":{"x":1}}'
        ]
        * 3
    )


def test_as_connect_schema_and_as_json_schema() -> None:
    converter = JsonConverter()
    as_json = converter.as_json_schema(ORDER)
    assert converter.as_connect_schema(json.loads(as_json)) == ORDER


# -- errors ------------------------------------------------------------------------------------------


def test_plain_json_with_schemas_enabled_explains_the_fix() -> None:
    with pytest.raises(DataError) as caught:
        JsonConverter().to_connect_data("t", b'{"id": 1, "name": "x"}')
    message = str(caught.value)
    assert message == ENVELOPE_ERROR
    assert 'requires "schema" and "payload" fields' in message
    assert "set schemas.enable=false" in message


@pytest.mark.parametrize("data", [b'{"schema":{"type":"int32"}}', b"[1,2]", b"42", b"", b"  "])
def test_non_envelopes_are_rejected(data: bytes) -> None:
    with pytest.raises(DataError, match='requires "schema" and "payload"'):
        JsonConverter().to_connect_data("t", data)


def test_extra_envelope_field_after_a_known_schema_is_rejected() -> None:
    converter = JsonConverter()
    good = converter.from_connect_data("t", INT32_SCHEMA, 1)
    assert good is not None
    assert converter.to_connect_data("t", good).value == 1
    with pytest.raises(DataError, match="may not contain additional fields"):
        converter.to_connect_data("t", good[:-1] + b',"extra":2}')


@pytest.mark.parametrize("enabled", ["true", "false"])
def test_invalid_json_names_the_problem(enabled: str) -> None:
    with pytest.raises(DataError) as caught:
        _converter({"schemas.enable": enabled}).to_connect_data("t", b'{"schema": {"type": "int32"}, "payload": ')
    message = str(caught.value)
    assert message.startswith("Converting byte[] to Kafka Connect data failed due to serialization error: ")
    assert "line 1" in message  # the parser's own description of where it failed


def test_empty_input_without_schemas_is_no_value() -> None:
    assert _converter({"schemas.enable": "false"}).to_connect_data("t", b"") == SchemaAndValue(None, None)


@pytest.mark.parametrize(
    ("schema_json", "payload", "message"),
    [
        ('{"type":"boo"}', "1", "Unknown schema type: boo"),
        ('{"optional":true}', "1", "Schema must contain 'type' field"),
        ('{"type":"array"}', "[]", "Array schema did not specify the element type"),
        ('{"type":"map","values":{"type":"int8"}}', "{}", "Map schema did not specify the key type"),
        ('{"type":"struct","fields":{}}', "{}", 'Struct schema\'s "fields" argument is not an array.'),
        ('{"type":"struct","fields":[{"type":"int8"}]}', "{}", "Struct schema's field name not specified properly"),
        ('{"type":"string","parameters":{"a":1}}', '"x"', "Schema parameters must have string values."),
        ('{"type":"int32"}', '"x"', "Expected a JSON integer for INT32: STRING"),
        ('{"type":"int8"}', "300", "Value 300 is out of range for INT8 [-128, 127]"),
        ('{"type":"string"}', "5", "Expected a JSON string for STRING: NUMBER"),
        ('{"type":"boolean"}', "null", "Invalid null value for required BOOLEAN field"),
        ('{"type":"bytes"}', '"!!"', "Invalid bytes field"),
        ('{"type":"struct","fields":[]}', "[]", "Structs should be encoded as JSON objects, but found ARRAY"),
        (
            '{"type":"struct","fields":[{"type":"int32","field":"a"}]}',
            "{}",
            "Invalid null value for required INT32 field",
        ),
        (
            '{"type":"map","keys":{"type":"string"},"values":{"type":"int8"}}',
            "[]",
            "Maps with string fields should be encoded as JSON objects, but found ARRAY",
        ),
        (
            '{"type":"map","keys":{"type":"int8"},"values":{"type":"int8"}}',
            "[[1]]",
            "Found invalid map entry, expected length 2 but found :1",
        ),
        (
            '{"type":"int32","name":"org.apache.kafka.connect.data.Time"}',
            "86400000",
            "Time values must use number of milliseconds greater than 0 and less than 86400000",
        ),
        (
            '{"type":"bytes","name":"org.apache.kafka.connect.data.Decimal","parameters":{"scale":"2"}}',
            "true",
            "Invalid type for Decimal, underlying representation should be numeric or bytes but was BOOLEAN",
        ),
    ],
)
def test_malformed_payloads_say_what_was_expected(schema_json: str, payload: str, message: str) -> None:
    with pytest.raises(DataError) as caught:
        JsonConverter().to_connect_data("t", f'{{"schema":{schema_json},"payload":{payload}}}'.encode())
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("schema", "value", "message"),
    [
        (INT32_SCHEMA, "x", "Invalid type for INT32: <class 'str'>"),
        (INT32_SCHEMA, True, "Invalid type for INT32: <class 'bool'>"),
        (INT8_SCHEMA, 128, "Value 128 is out of range for INT8 [-128, 127]"),
        (STRING_SCHEMA, 5, "Invalid type for STRING: <class 'int'>"),
        (FLOAT32_SCHEMA, 1e300, "Value 1e+300 is out of range for FLOAT32"),
        (BYTES_SCHEMA, "x", "Invalid type for bytes type: <class 'str'>"),
        (
            Decimal.schema(2),
            D("1.234"),
            "Decimal value has mismatching scale for given Decimal schema. Schema has scale 2, value has scale 3.",
        ),
        (Decimal.schema(2), 1.5, "Invalid type for Decimal, expected Decimal but was <class 'float'>"),
        (Date.SCHEMA, dt.datetime(2024, 1, 1, 12, tzinfo=UTC), "should not have any time fields set"),
        (Timestamp.SCHEMA, 0, "Invalid type for Timestamp"),
        (Schema.struct([("a", INT32_SCHEMA)]), {"a": 1, "b": 2}, "'b' is not a valid field name"),
        (Schema.struct([("a", INT32_SCHEMA)]), [1], "Invalid type for STRUCT: <class 'list'>"),
        (Schema.struct([("a", INT32_SCHEMA)]), {"a": "1"}, "Invalid type for INT32: <class 'str'>"),
        (Schema.array(INT32_SCHEMA), {"a": 1}, "Invalid type for ARRAY"),
        (None, D("1"), "Python type decimal.Decimal does not have corresponding schema type."),
        (None, 2**64, "out of range for INT64"),
        (STRING_SCHEMA, "\ud800", "serialization error"),
    ],
)
def test_unwritable_values_raise_data_error(schema: Schema | None, value: Any, message: str) -> None:
    with pytest.raises(DataError) as caught:
        JsonConverter().from_connect_data("t", schema, value)
    assert message in str(caught.value)


def test_config_is_validated() -> None:
    assert _converter({"decimal.format": "numeric"}).config.decimal_format == "NUMERIC"
    with pytest.raises(ConfigError) as caught:
        _converter({"decimal.format": "HEX"})
    assert caught.value.key == "decimal.format"
    with pytest.raises(ConfigError):
        _converter({"schemas.enabled": "true"})  # a typo is an error, not silently ignored


def test_plugin_metadata() -> None:
    assert JsonConverter.aliases == ("org.apache.kafka.connect.json.JsonConverter",)
    assert JsonConverter.version == "0.1.0"


# -- Java number formatting ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "double", "single"),
    [
        (0.1, "0.1", "0.1"),
        (1.0, "1.0", "1.0"),
        (100.0, "100.0", "100.0"),
        (1e-3, "0.001", "0.001"),
        (9.999e-4, "9.999E-4", "9.999E-4"),
        (1e7, "1.0E7", "1.0E7"),
        (9999999.0, "9999999.0", "9999999.0"),
        (12345678.9, "1.23456789E7", "1.2345679E7"),
        (1e20, "1.0E20", "1.0E20"),
        (-1.5e-7, "-1.5E-7", "-1.5E-7"),
        (5e-324, "4.9E-324", "0.0"),
        (1e-323, "9.9E-324", "0.0"),
        (F32_MIN_SUBNORMAL, "1.401298464324817E-45", "1.4E-45"),
        (F32_MAX, "3.4028234663852886E38", "3.4028235E38"),
        (-0.0, "-0.0", "-0.0"),
        (math.nan, "NaN", "NaN"),
        (-math.inf, "-Infinity", "-Infinity"),
        # JDK 19+ (and so Sluice) print the shortest form; JDK 17 printed 1.15292150460684698E18
        # and 1.15292150E18 (JDK-4511638), which read back as the same numbers.
        (2.0**60, "1.152921504606847E18", "1.1529215E18"),
    ],
)
def test_java_number_strings(value: float, double: str, single: str) -> None:
    assert java_double_str(value) == double
    assert java_float_str(value) == single


def test_java_number_strings_read_back_exactly() -> None:
    rng = random.Random(20240506)
    for _ in range(20_000):
        x = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(x):
            assert float(java_double_str(x)) == x
        f = struct.unpack("<f", rng.getrandbits(32).to_bytes(4, "little"))[0]
        if math.isfinite(f):
            text = java_float_str(f)
            assert _f32(float(text)) == f
            # shortest: the nearest decimal with one digit fewer is a different float
            digits = text.split("E")[0].replace("-", "").replace(".", "").strip("0")
            if len(digits) > 2:
                assert _f32(float(f"{f:.{len(digits) - 2}e}")) != f


@pytest.mark.parametrize(
    ("unscaled", "scale", "text"),
    [(1234, 2, "12.34"), (0, 2, "0.00"), (1, 7, "1E-7"), (123, -2, "1.23E+4"), (0, -2, "0E+2"), (-5, 1, "-0.5")],
)
def test_java_decimal_strings(unscaled: int, scale: int, text: str) -> None:
    assert java_decimal_str(unscaled, scale) == text
