"""The native Avro writer (``sluice_native.AvroRecordWriter``) against the Python path, byte for byte.

The Python path is the Connect → datum encoder plus fastavro; the native writer must produce the
same bytes for every value it takes, and take nothing the Python path would refuse or convert
differently (it answers ``None`` and the converter falls back).
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import random
import struct
from typing import Any

import fastavro
import pytest

from sluice.connectors.api.schema import (
    BOOLEAN_SCHEMA,
    BYTES_SCHEMA,
    FLOAT32_SCHEMA,
    FLOAT64_SCHEMA,
    INT8_SCHEMA,
    INT16_SCHEMA,
    INT32_SCHEMA,
    INT64_SCHEMA,
    Date,
    Decimal,
    Schema,
    Time,
    Timestamp,
    Type,
)
from sluice.converters.avro_data import AvroData, native_plan, native_read_plan, strip_logical_types

try:
    import sluice_native
except ImportError:  # pragma: no cover
    sluice_native = None


@pytest.fixture(autouse=True)
def _native() -> None:
    if sluice_native is None or not hasattr(sluice_native, "AvroRecordWriter"):
        pytest.fail("sluice_native is not installed or is out of date: run `make setup` (it builds native/ with cargo)")


HEADER = b"\x00\x00\x00\x01\x02"

SCHEMA = Schema.struct(
    [
        ("i8", INT8_SCHEMA),
        ("i16", INT16_SCHEMA.as_optional()),
        ("i32", INT32_SCHEMA),
        ("i64", INT64_SCHEMA.as_optional()),
        ("f32", FLOAT32_SCHEMA),
        ("f64", FLOAT64_SCHEMA.as_optional()),
        ("flag", BOOLEAN_SCHEMA),
        ("text", Schema(Type.STRING, optional=True)),
        ("raw", BYTES_SCHEMA.as_optional()),
        ("price", Decimal.schema(3, optional=True)),
        ("day", Date.OPTIONAL_SCHEMA),
        ("clock", Time.SCHEMA),
        ("at", Timestamp.OPTIONAL_SCHEMA),
        ("n", Schema(Type.INT32, optional=True, default=7)),
        ("label", Schema(Type.STRING, default="none")),
    ],
    name="test.Flat",
)


def python_bytes(schema: Schema, value: Any) -> bytes:
    data = AvroData()
    parsed = fastavro.parse_schema(strip_logical_types(data.avro_schema(schema)))
    buf = io.BytesIO()
    buf.write(HEADER)
    fastavro.schemaless_writer(buf, parsed, data.encoder(schema)(value))
    return buf.getvalue()


def native_writer(schema: Schema) -> Any:
    plan = native_plan(schema)
    assert plan is not None
    return sluice_native.AvroRecordWriter(HEADER, plan)


def random_value(rng: random.Random) -> dict[str, Any]:
    def maybe(v: Any) -> Any:
        return None if rng.random() < 0.2 else v

    text = "".join(rng.choice('aé✓😀\t"\\ z') for _ in range(rng.randrange(0, 12)))
    return {
        "i8": rng.randint(-128, 127),
        "i16": maybe(rng.randint(-32768, 32767)),
        "i32": rng.choice([0, -1, 2**31 - 1, -(2**31), rng.randint(-(2**31), 2**31 - 1)]),
        "i64": maybe(rng.choice([2**63 - 1, -(2**63), rng.randint(-(2**63), 2**63 - 1), 63, 64, -64, -65])),
        "f32": rng.choice([0.0, -0.0, 1.5, rng.uniform(-1e30, 1e30), float("inf"), 3]),
        "f64": maybe(rng.choice([rng.uniform(-1e300, 1e300), float("nan"), -7])),
        "flag": rng.random() < 0.5,
        "text": maybe(text),
        "raw": maybe(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 20)))),
        "price": maybe(decimal.Decimal(rng.randint(-(10**12), 10**12)).scaleb(-3)),
        "day": maybe(dt.date(1970, 1, 1) + dt.timedelta(days=rng.randint(-40000, 40000))),
        "clock": dt.time(rng.randrange(24), rng.randrange(60), rng.randrange(60), rng.randrange(1000) * 1000),
        "at": maybe(dt.datetime(2000, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=rng.randint(-(10**12), 10**12))),
        "n": maybe(rng.randint(-5, 5)),
        "label": maybe("x" * rng.randrange(3)),
    }


def test_the_native_writer_writes_the_python_paths_bytes_for_random_values() -> None:
    rng = random.Random(20261123)
    writer = native_writer(SCHEMA)
    values = [random_value(rng) for _ in range(3000)]
    expected = [python_bytes(SCHEMA, v) for v in values]
    assert [writer.write(v) for v in values] == expected
    assert writer.write_batch([*values, None]) == [*expected, None]


@pytest.mark.parametrize(
    "change",
    [
        {"i8": 128},  # out of range: the Python path raises and names the field
        {"i32": 2**31},
        {"i32": True},  # a bool is not an int to Connect
        {"i32": "7"},
        {"i32": None},  # a required field
        {"f32": "1.0"},
        {"flag": 1},
        {"text": b"bytes"},
        {"raw": bytearray(b"x")},  # accepted by Python (copied to bytes), left to it
        {"price": 1.5},
        {"clock": None},
        {"extra": 1},  # a field the schema does not have
        {"text": "\ud800"},  # a lone surrogate cannot be UTF-8
    ],
)
def test_values_the_native_writer_does_not_take_are_left_to_the_python_path(change: dict[str, Any]) -> None:
    value = {**random_value(random.Random(1)), **change}
    assert native_writer(SCHEMA).write(value) is None


def test_only_required_structs_of_primitive_fields_get_a_native_plan() -> None:
    assert native_plan(Schema.struct([("a", Schema.array(INT32_SCHEMA))])) is None
    assert native_plan(Schema.struct([("a", INT32_SCHEMA)], optional=True)) is None
    assert native_plan(INT32_SCHEMA) is None
    assert native_plan(Schema.struct([("a", INT32_SCHEMA)])) is not None


def python_read(avro: Any, data: bytes) -> Any:
    parsed = fastavro.parse_schema(strip_logical_types(avro))
    stream = io.BytesIO(data)
    stream.seek(5)
    datum = fastavro.schemaless_reader(stream, parsed, None)
    _, decode = AvroData().connect_schema(avro)
    return datum if decode is None else decode(datum)


def native_reader(avro: Any) -> Any:
    plan = native_read_plan(avro)
    assert plan is not None
    return sluice_native.AvroRecordReader(plan)


def _same(a: Any, b: Any) -> bool:
    # NaN != NaN: compare such floats by their bits.
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def test_the_native_reader_reads_what_fastavro_reads_for_random_values() -> None:
    rng = random.Random(112358)
    avro = AvroData().avro_schema(SCHEMA)
    reader = native_reader(avro)
    for _ in range(3000):
        data = python_bytes(SCHEMA, random_value(rng))
        native = reader.read(data, 5)
        assert native is not None
        assert _same(native, python_read(avro, data))


def test_a_foreign_writer_schema_with_null_second_unions_reads_natively() -> None:
    avro = {
        "type": "record",
        "name": "Row",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": ["string", "null"]},
            {"name": "when", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "ok", "type": ["null", "boolean"]},
        ],
    }
    parsed = fastavro.parse_schema(strip_logical_types(avro))
    buf = io.BytesIO()
    buf.write(HEADER)
    fastavro.schemaless_writer(buf, parsed, {"id": -5, "name": None, "when": 1_700_000_000_123, "ok": True})
    assert native_reader(avro).read(buf.getvalue(), 5) == {
        "id": -5,
        "name": None,
        "when": dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC),
        "ok": True,
    }


def test_bodies_the_native_reader_cannot_read_are_left_to_the_python_path() -> None:
    avro = AvroData().avro_schema(SCHEMA)
    reader = native_reader(avro)
    good = python_bytes(SCHEMA, random_value(random.Random(3)))
    for cut in range(5, len(good)):
        assert reader.read(good[:cut], 5) is None  # truncated
    flat = Schema.struct([("t", Schema(Type.STRING)), ("b", BOOLEAN_SCHEMA), ("i", INT32_SCHEMA)])
    flat_reader = native_reader(AvroData().avro_schema(flat))
    assert flat_reader.read(HEADER + b"\x02\xff\x00\x00", 5) is None  # not UTF-8
    assert flat_reader.read(HEADER + b"\x00\x02\x00", 5) is None  # a boolean byte of 2
    assert flat_reader.read(HEADER + b"\x00\x00\x80\x80\x80\x80\x20", 5) is None  # beyond int32
    assert flat_reader.read(HEADER + b"\x00\x01\x04", 5) == {"t": "", "b": True, "i": 2}
    clock = native_reader(AvroData().avro_schema(Schema.struct([("c", Time.SCHEMA)])))
    assert clock.read(HEADER + b"\x01", 5) is None  # -1 ms: Connect's Time refuses it, with a message


def test_only_records_of_primitive_fields_get_a_native_read_plan() -> None:
    assert (
        native_read_plan(
            {"type": "record", "name": "R", "fields": [{"name": "a", "type": {"type": "array", "items": "int"}}]}
        )
        is None
    )
    assert (
        native_read_plan({"type": "record", "name": "R", "fields": [{"name": "a", "type": ["null", "int", "string"]}]})
        is None
    )
    assert (
        native_read_plan(
            {
                "type": "record",
                "name": "R",
                "fields": [{"name": "a", "type": {"type": "enum", "name": "E", "symbols": ["X"]}}],
            }
        )
        is None
    )
    assert native_read_plan("string") is None
