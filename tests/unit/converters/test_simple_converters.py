"""StringConverter, ByteArrayConverter and SimpleHeaderConverter: the bytes Kafka Connect writes."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal as D
from typing import Any

import pytest

from sluice.connectors.api.errors import ConfigError, DataError
from sluice.connectors.api.schema import (
    BYTES_SCHEMA,
    FLOAT32_SCHEMA,
    INT32_SCHEMA,
    OPTIONAL_BYTES_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    Schema,
    SchemaAndValue,
)
from sluice.converters.bytes import ByteArrayConverter
from sluice.converters.header import SimpleHeaderConverter
from sluice.converters.string import StringConverter

UTC = dt.UTC


def _string(encoding: str | None = None) -> StringConverter:
    converter = StringConverter()
    converter.configure({} if encoding is None else {"converter.encoding": encoding}, is_key=True)
    return converter


# -- StringConverter ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "value", "expected"),
    [
        (STRING_SCHEMA, "héllo ✓", "héllo ✓".encode()),
        (None, "", b""),
        (None, None, None),
        (INT32_SCHEMA, 42, b"42"),
        (None, True, b"true"),
        (None, 1e20, b"1.0E20"),
        (None, 0.1, b"0.1"),
        (FLOAT32_SCHEMA, 0.1, b"0.1"),
        (None, D("-0.00"), b"0.00"),  # Java's BigDecimal has no negative zero
        (None, D("1E-7"), b"1E-7"),
        (None, [1, None, "a"], b"[1, null, a]"),
        (None, {"a": 1, "b": False}, b"{a=1, b=false}"),
        (
            Schema.struct([("id", INT32_SCHEMA), ("name", OPTIONAL_STRING_SCHEMA)]),
            {"id": 1, "name": None},
            b"Struct{id=1}",
        ),
        (None, b"\x00\xff", b"\x00\xff"),
    ],
)
def test_string_converter_writes_what_connect_writes(schema: Schema | None, value: object, expected: bytes) -> None:
    assert _string().from_connect_data("t", schema, value) == expected


def test_string_converter_reads_optional_strings() -> None:
    converter = _string()
    assert converter.to_connect_data("t", "héllo".encode()) == SchemaAndValue(OPTIONAL_STRING_SCHEMA, "héllo")
    assert converter.to_connect_data("t", None) == SchemaAndValue(OPTIONAL_STRING_SCHEMA, None)
    # Java's decoder replaces malformed input instead of failing the record.
    assert converter.to_connect_data("t", b"a\xffb").value == "a\ufffdb"


@pytest.mark.parametrize(
    ("encoding", "text", "data", "read_back"),
    [
        ("UTF8", "é", b"\xc3\xa9", "é"),
        ("ISO-8859-1", "é€", b"\xe9?", "é?"),  # unmappable characters become '?', as in Java
        ("UTF-16", "a", b"\xfe\xff\x00a", "a"),  # Java writes a big-endian byte order mark
        ("UTF-16", "", b"", ""),
        ("UTF-16LE", "a", b"a\x00", "a"),
        ("UTF-32", "a", b"\x00\x00\x00a", "a"),  # big-endian, no byte order mark
    ],
)
def test_string_converter_encodings_match_java(encoding: str, text: str, data: bytes, read_back: str) -> None:
    converter = _string(encoding)
    assert converter.from_connect_data("t", STRING_SCHEMA, text) == data
    assert converter.to_connect_data("t", data).value == read_back


def test_string_converter_reads_utf16_without_bom_as_big_endian() -> None:
    assert _string("UTF-16").to_connect_data("t", b"\x00a").value == "a"
    assert _string("UTF-16").to_connect_data("t", b"\xff\xfea\x00").value == "a"


def test_string_converter_rejects_unknown_charset() -> None:
    with pytest.raises(ConfigError) as caught:
        _string("EBCDIC-NOPE")
    assert caught.value.key == "converter.encoding"


def test_string_converter_batches_and_headers() -> None:
    converter = _string()
    values = ["a", 1, None, True]
    assert converter.from_connect_batch("t", [None] * 4, values) == [b"a", b"1", None, b"true"]
    assert converter.to_connect_batch("t", [b"a", None]) == ([OPTIONAL_STRING_SCHEMA] * 2, ["a", None])
    assert converter.from_connect_header("t", "h", None, 7) == b"7"
    assert converter.to_connect_header("t", "h", b"7") == SchemaAndValue(OPTIONAL_STRING_SCHEMA, "7")


# -- ByteArrayConverter ---------------------------------------------------------------------------------


def test_byte_array_converter_passes_bytes_through() -> None:
    converter = ByteArrayConverter()
    converter.configure({}, is_key=False)
    data = b"\x00\x01\xff"
    assert converter.from_connect_data("t", BYTES_SCHEMA, data) is data
    assert converter.from_connect_data("t", None, bytearray(data)) == data
    assert converter.from_connect_data("t", None, memoryview(data)) == data
    assert converter.from_connect_data("t", None, None) is None
    assert converter.to_connect_data("t", data) == SchemaAndValue(OPTIONAL_BYTES_SCHEMA, data)
    assert converter.from_connect_batch("t", [None, BYTES_SCHEMA], [data, bytearray(b"x")]) == [data, b"x"]
    assert converter.to_connect_batch("t", [data, None]) == ([OPTIONAL_BYTES_SCHEMA] * 2, [data, None])


@pytest.mark.parametrize(
    ("schema", "value", "message"),
    [
        (None, "text", "ByteArrayConverter is not compatible with objects of type <class 'str'>"),
        (STRING_SCHEMA, b"x", "Invalid schema type for ByteArrayConverter: STRING"),
    ],
)
def test_byte_array_converter_rejects_other_values(schema: Schema | None, value: object, message: str) -> None:
    with pytest.raises(DataError, match=message):
        ByteArrayConverter().from_connect_data("t", schema, value)
    with pytest.raises(DataError, match=message):
        ByteArrayConverter().from_connect_batch("t", [schema], [value])


# -- SimpleHeaderConverter --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("trace-id ✓", "trace-id ✓".encode()),
        (b"\x00\xff", b"\x00\xff"),
        (None, None),
        (True, b"true"),
        (42, b"42"),
        (1.5, b"1.5"),
        (1e20, b"1.0E20"),
        (D("12.30"), b"12.30"),
        (dt.date(2024, 2, 29), b"2024-02-29"),
        (dt.time(13, 45, 30, 123456), b"13:45:30.123Z"),
        (
            dt.datetime(2024, 5, 6, 9, 8, 9, 123000, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            b"2024-05-06T07:08:09.123Z",
        ),
        ({"a": 1, "b": [1.0, None, "x"], "c": b"\x01"}, b'{"a":1,"b":[1.0,null,"x"],"c":"AQ=="}'),
        ([1, 2e-7, math.inf], b'[1,2.0E-7,"Infinity"]'),
    ],
)
def test_header_converter_writes_text(value: object, expected: bytes | None) -> None:
    assert SimpleHeaderConverter().from_connect_header("t", "h", None, value) == expected


def test_header_converter_reads_text_or_bytes() -> None:
    converter = SimpleHeaderConverter()
    converter.configure({"converter.type": "header"})
    assert converter.to_connect_header("t", "h", "✓ ok".encode()) == SchemaAndValue(STRING_SCHEMA, "✓ ok")
    assert converter.to_connect_header("t", "h", b"\xff\xfe") == SchemaAndValue(BYTES_SCHEMA, b"\xff\xfe")
    assert converter.to_connect_header("t", "h", None) == SchemaAndValue(None, None)


def test_header_converter_rejects_unknown_types_and_config() -> None:
    with pytest.raises(DataError, match="Failed to serialize"):
        SimpleHeaderConverter().from_connect_header("t", "h", None, [object()])
    with pytest.raises(ConfigError):
        SimpleHeaderConverter().configure({"schemas.enable": "false"})


@pytest.mark.parametrize(
    ("cls", "alias"),
    [
        (StringConverter, "org.apache.kafka.connect.storage.StringConverter"),
        (ByteArrayConverter, "org.apache.kafka.connect.converters.ByteArrayConverter"),
        (SimpleHeaderConverter, "org.apache.kafka.connect.storage.SimpleHeaderConverter"),
    ],
)
def test_plugin_metadata(cls: Any, alias: str) -> None:
    assert cls.aliases == (alias,)
    assert cls.version == "0.1.0"
