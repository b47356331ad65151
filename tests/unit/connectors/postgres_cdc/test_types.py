"""PostgreSQL text values → Debezium representations, per decimal/time mode."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from sluice.connectors.source.postgres_cdc import types as t
from sluice.connectors.source.postgres_cdc.tables import Column, Table, unescape_copy
from sluice.connectors.source.postgres_cdc.values import format_lsn, parse_lsn

ADAPTIVE = t.TypeModes()


def convert(oid: int, text: bytes, typmod: int = -1, modes: t.TypeModes = ADAPTIVE) -> object:
    return t.column_type(oid, typmod, modes).fn(text)


def test_numbers_and_booleans() -> None:
    assert convert(t.INT8, b"-9000000000") == -9000000000
    assert convert(t.FLOAT8, b"NaN") != convert(t.FLOAT8, b"NaN")
    assert convert(t.BOOL, b"t") is True and convert(t.BOOL, b"f") is False
    numeric = (12 << 16 | 3) + 4
    assert convert(t.NUMERIC, b"1.250", numeric) == decimal.Decimal("1.250")
    assert t.column_type(t.NUMERIC, numeric, ADAPTIVE).schema.parameters == {"scale": "3", "connect.decimal.precision": "12"}
    assert convert(t.NUMERIC, b"1.5", numeric, t.TypeModes("double")) == 1.5
    assert convert(t.NUMERIC, b"1.5", numeric, t.TypeModes("string")) == "1.5"
    variable = convert(t.NUMERIC, b"-12.345")
    assert variable == {"scale": 3, "value": (-12345).to_bytes(2, "big", signed=True)}


@pytest.mark.parametrize(
    ("oid", "typmod", "text", "expected", "name"),
    [
        (t.DATE, -1, b"2024-03-01", 19783, "io.debezium.time.Date"),
        (t.TIME, 3, b"12:34:56.789", 45296789, "io.debezium.time.Time"),
        (t.TIME, -1, b"12:34:56.789", 45296789000, "io.debezium.time.MicroTime"),
        (t.TIMESTAMP, -1, b"2024-03-01 10:11:12.345678", 1709287872345678, "io.debezium.time.MicroTimestamp"),
        (t.TIMESTAMP, 3, b"2024-03-01 10:11:12.345", 1709287872345, "io.debezium.time.Timestamp"),
        (t.TIMESTAMPTZ, -1, b"2024-03-01 10:11:12.5+00", "2024-03-01T10:11:12.500000Z", "io.debezium.time.ZonedTimestamp"),
        (t.TIMESTAMPTZ, 0, b"2024-03-01 10:11:12+00", "2024-03-01T10:11:12Z", "io.debezium.time.ZonedTimestamp"),
        (t.TIMESTAMPTZ, -1, b"2024-03-01 12:11:12+02", "2024-03-01T10:11:12.000000Z", "io.debezium.time.ZonedTimestamp"),
        (t.TIMETZ, -1, b"10:11:12.5+02", "08:11:12.5Z", "io.debezium.time.ZonedTime"),
        (t.INTERVAL, -1, b"1 day 01:00:00", 90_000_000_000, "io.debezium.time.MicroDuration"),
        (t.UUID, -1, b"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "io.debezium.data.Uuid"),
        (t.JSONB, -1, b'{"a": 1}', '{"a": 1}', "io.debezium.data.Json"),
    ],
)
def test_temporal_and_semantic_types(oid: int, typmod: int, text: bytes, expected: object, name: str) -> None:
    ctype = t.column_type(oid, typmod, ADAPTIVE)
    assert ctype.fn(text) == expected
    assert ctype.schema.name == name


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        # What Debezium 3.6 wrote for these values in the differential test: a month is 30.4375 days.
        (b"1 year 2 mons 3 days 04:05:06.789", 37091106789000),
        (b"2 mons 1 day", 5346000000000),
        (b"-1 years -2 days -00:00:01.5", -31730401500000),
        (b"00:00:00", 0),
    ],
)
def test_intervals_count_months_as_debezium_does(text: bytes, micros: int) -> None:
    assert convert(t.INTERVAL, text) == micros


def test_bit_strings_and_points_take_debeziums_shapes() -> None:
    assert t.column_type(t.BIT, 1, ADAPTIVE).schema.type.value == "boolean" and convert(t.BIT, b"1", 1) is True
    bits = t.column_type(t.BIT, 4, ADAPTIVE)
    assert (bits.schema.name, bits.schema.parameters) == ("io.debezium.data.Bits", {"length": "4"})
    assert [bits.fn(v) for v in (b"1010", b"0000", b"")] == [b"\x0a", b"", b""]
    assert convert(t.VARBIT, b"100000001", 16) == b"\x01\x01"  # little-endian, as Java's BitSet
    point = t.column_type(t.POINT, -1, ADAPTIVE)
    assert point.schema.name == "io.debezium.data.geometry.Point" and point.schema.doc == "Geometry (POINT)"
    value = point.fn(b"(1.5,2.5)")
    assert (value["x"], value["y"], value["srid"]) == (1.5, 2.5, None)
    assert value["wkb"] == bytes.fromhex("0101000000000000000000f83f0000000000000440")


def test_connect_time_precision_mode() -> None:
    modes = t.TypeModes(time_precision_mode="connect")
    assert convert(t.DATE, b"2024-03-01", modes=modes) == dt.date(2024, 3, 1)
    assert convert(t.TIMESTAMP, b"2024-03-01 10:00:00", modes=modes) == dt.datetime(2024, 3, 1, 10, tzinfo=dt.UTC)
    assert t.column_type(t.DATE, -1, modes).schema.name == "org.apache.kafka.connect.data.Date"


def test_bytea_arrays_and_enums() -> None:
    assert convert(t.BYTEA, b"\\x00ff10") == b"\x00\xff\x10"
    text_array = t.column_type(1009, -1, ADAPTIVE, element=t.column_type(t.TEXT, -1, ADAPTIVE))
    assert text_array.fn(b'{a,"b c","q\\"x",NULL}') == ["a", "b c", 'q"x', None]
    assert text_array.unavailable == [t.UNAVAILABLE]
    int_matrix = t.column_type(1007, -1, ADAPTIVE, element=t.column_type(t.INT4, -1, ADAPTIVE))
    assert int_matrix.fn(b"{{1,2},{3,4}}") == [[1, 2], [3, 4]]
    mood = t.column_type(99999, -1, ADAPTIVE, enum_labels=("sad", "ok"))
    assert mood.schema.name == "io.debezium.data.Enum" and mood.schema.parameters == {"allowed": "sad,ok"}


def test_copy_decoder_matches_stream_values() -> None:
    cols = [
        Column("id", t.INT4, -1, False, t.column_type(t.INT4, -1, ADAPTIVE)),
        Column("note", t.TEXT, -1, True, t.column_type(t.TEXT, -1, ADAPTIVE)),
        Column("raw", t.BYTEA, -1, True, t.column_type(t.BYTEA, -1, ADAPTIVE)),
    ]
    table = Table(1, "public", "x", cols, ["id"], "f", "srv", [True, True, True])
    assert table.from_copy(b"7\ttab\\there\t\\\\x0a0b") == {"id": 7, "note": "tab\there", "raw": b"\x0a\x0b"}
    assert table.from_copy(b"8\t\\N\t\\N") == {"id": 8, "note": None, "raw": None}
    assert unescape_copy(b"a\\nb\\\\c\\101") == b"a\nb\\cA"


def test_lsn_spelling() -> None:
    assert parse_lsn("16/B374D848") == (0x16 << 32) | 0xB374D848
    assert format_lsn(parse_lsn("0/16B6C50")) == "0/16B6C50"
    assert parse_lsn("12345") == 12345


@pytest.mark.parametrize("typmod", [-1, 0, 3, 6])
@pytest.mark.parametrize(
    "text",
    [
        b"2024-03-01 10:11:12.123456+00",
        b"2024-03-01 10:11:12.5+00",
        b"2024-03-01 10:11:12+00",
        b"2024-03-01 10:11:12.123+00",
        b"2024-03-01 12:11:12.123456+02",
        b"12024-03-01 10:11:12.12345+00",  # a five-digit year: same length as the common case
        b"infinity",
    ],
)
def test_generated_decoders_inline_timestamptz_like_the_function(typmod: int, text: bytes) -> None:
    """The tuple and COPY decoders inline the common timestamptz case; every value must still
    come out as the type's function makes it."""
    ctype = t.column_type(t.TIMESTAMPTZ, typmod, ADAPTIVE)
    table = Table(1, "public", "x", [Column("at", t.TIMESTAMPTZ, typmod, True, ctype)], [], "d", "srv", [True])
    tuple_message = b"\x00\x01t" + len(text).to_bytes(4, "big") + text + b"\0\0\0\0"  # padded as handle() does
    assert table.decode(tuple_message, 0)[0] == {"at": ctype.fn(text)}
    assert table.from_copy(text) == {"at": ctype.fn(text)}


def test_copy_decoder_fast_and_escaped_lines_agree() -> None:
    cols = [
        Column("id", t.INT8, -1, False, t.column_type(t.INT8, -1, ADAPTIVE)),
        Column("amount", t.NUMERIC, (12 << 16 | 2) + 4, True, t.column_type(t.NUMERIC, (12 << 16 | 2) + 4, ADAPTIVE)),
        Column("note", t.TEXT, -1, True, t.column_type(t.TEXT, -1, ADAPTIVE)),
        Column("skipped", t.TEXT, -1, True, t.column_type(t.TEXT, -1, ADAPTIVE)),
    ]
    table = Table(1, "public", "x", cols, ["id"], "d", "srv", [True, True, True, False])
    plain = table.from_copy(b"1\t2.50\tplain")
    escaped = table.from_copy(b"1\t2.50\tpl\\\\ain")
    assert plain == {"id": 1, "amount": decimal.Decimal("2.50"), "note": "plain"}
    assert escaped == {"id": 1, "amount": decimal.Decimal("2.50"), "note": "pl\\ain"}
    assert table.from_copy(b"2\t\\N\t\\N") == {"id": 2, "amount": None, "note": None}
    # the stream decoder skips an excluded column without converting it
    body = b"".join(b"t" + len(v).to_bytes(4, "big") + v for v in (b"3", b"NaN", b"n", b"not-a-number"))
    assert table.decode(b"\x00\x04" + body + b"\0\0\0\0", 0)[0] == {"id": 3, "amount": None, "note": "n"}


def test_binary_handling_mode() -> None:
    raw = b"\\xfbff00"
    assert convert(t.BYTEA, raw) == b"\xfb\xff\x00"
    assert convert(t.BYTEA, raw, modes=t.TypeModes(binary_handling_mode="base64")) == "+/8A"
    assert convert(t.BYTEA, raw, modes=t.TypeModes(binary_handling_mode="base64-url-safe")) == "-_8A"
    assert convert(t.BYTEA, raw, modes=t.TypeModes(binary_handling_mode="hex")) == "fbff00"
    assert t.column_type(t.BYTEA, -1, t.TypeModes(binary_handling_mode="hex")).schema.type.name == "STRING"


def test_interval_handling_mode() -> None:
    string = t.TypeModes(interval_handling_mode="string")
    assert convert(t.INTERVAL, b"1 year 2 mons 3 days 04:05:06.7") == 37091106700000  # months of 30.4375 days
    assert convert(t.INTERVAL, b"1 year 2 mons 3 days 04:05:06.7", modes=string) == "P1Y2M3DT4H5M6.7S"
    assert convert(t.INTERVAL, b"-1 days +02:00:00", modes=string) == "P0Y0M-1DT2H0M0S"
    assert convert(t.INTERVAL, b"00:00:00", modes=string) == "P0Y0M0DT0H0M0S"
    assert t.column_type(t.INTERVAL, -1, string).schema.name == "io.debezium.time.Interval"
