from __future__ import annotations

import datetime as dt
import decimal

import pytest

from sluice.connectors.api import (
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    DataError,
    Date,
    Decimal,
    Schema,
    SinkRecord,
    SourceRecord,
    Time,
    Timestamp,
    Type,
    validate_value,
)


def test_struct_fields_keep_order_and_reject_duplicates() -> None:
    s = Schema.struct([("id", INT64_SCHEMA), ("name", OPTIONAL_STRING_SCHEMA)], name="user")
    assert [f.name for f in s.fields] == ["id", "name"]
    assert s.field("name").schema is OPTIONAL_STRING_SCHEMA  # type: ignore[union-attr]
    assert s.field("missing") is None
    with pytest.raises(DataError, match="duplication"):
        Schema.struct([("a", INT32_SCHEMA), ("a", INT32_SCHEMA)])


def test_validate_value_names_the_failing_path() -> None:
    s = Schema.struct([("id", INT64_SCHEMA), ("tags", Schema.array(STRING_SCHEMA))])
    validate_value(s, {"id": 1, "tags": ["a"]})
    with pytest.raises(DataError, match=r"value\.tags\[1\]"):
        validate_value(s, {"id": 1, "tags": ["a", 2]})
    with pytest.raises(DataError, match="null used for required field"):
        validate_value(s, {"id": None, "tags": []})
    with pytest.raises(DataError, match="out of range for int32"):
        validate_value(INT32_SCHEMA, 2**31)
    with pytest.raises(DataError):
        validate_value(INT32_SCHEMA, True)


def test_defaults_are_validated() -> None:
    assert Schema(Type.INT32, default=5).default == 5
    with pytest.raises(DataError):
        Schema(Type.INT32, default="five")


@pytest.mark.parametrize(
    ("value", "scale", "encoded"),
    [
        (decimal.Decimal("1.50"), 2, b"\x00\x96"),
        (decimal.Decimal("-1.50"), 2, b"\xff\x6a"),
        (decimal.Decimal("0"), 0, b"\x00"),
        (decimal.Decimal("127"), 0, b"\x7f"),
        (decimal.Decimal("128"), 0, b"\x00\x80"),
        (decimal.Decimal("-128"), 0, b"\x80"),
    ],
)
def test_decimal_is_big_endian_twos_complement(value: decimal.Decimal, scale: int, encoded: bytes) -> None:
    assert Decimal.to_bytes(value, scale) == encoded
    assert Decimal.from_bytes(encoded, scale) == value


def test_decimal_never_rounds_silently() -> None:
    with pytest.raises(DataError, match="fractional digits"):
        Decimal.to_bytes(decimal.Decimal("1.234"), 2)


def test_temporal_logical_types_round_trip() -> None:
    assert Date.to_int(dt.date(1970, 1, 2)) == 1
    assert Date.from_int(-1) == dt.date(1969, 12, 31)
    assert Time.to_int(dt.time(1, 2, 3, 4000)) == 3_723_004
    assert Time.from_int(3_723_004) == dt.time(1, 2, 3, 4000)
    ts = dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=dt.UTC)
    assert Timestamp.from_int(Timestamp.to_int(ts)) == ts
    assert Timestamp.to_int(dt.datetime(1970, 1, 1, 0, 0, 1)) == 1000  # naive means UTC


def test_records_are_immutable_and_replace_returns_a_copy() -> None:
    r = SourceRecord("t", "v", STRING_SCHEMA, source_partition={"f": 1}, source_offset={"p": 2})
    with pytest.raises(AttributeError):
        r.topic = "other"  # type: ignore[misc]
    r2 = r.replace(topic="u")
    assert (r.topic, r2.topic, r2.value) == ("t", "u", "v")
    s = SinkRecord("t", 0, 5, "v")
    assert s.topic_partition == ("t", 0)
    assert s.replace(topic="x", original_topic="t").topic_partition == ("t", 0)
