from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sluice.connectors.api import (
    INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    ConfigError,
    DataError,
    Date,
    Schema,
    Time,
    Timestamp,
    Type,
)
from sluice.transforms import TimestampConverterKey, TimestampConverterValue

from .support import configured, sink

MILLIS = 1_700_000_000_123
INSTANT = dt.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=dt.UTC)


def test_unix_field_to_string_as_in_connect_docs() -> None:
    t = configured(TimestampConverterValue, field="event_date_long", format="yyyy-MM-dd", target_type="string")
    out = t.apply(sink({"event_date_long": MILLIS, "x": 1}))
    assert out.value == {"event_date_long": "2023-11-14", "x": 1}
    schema = Schema.struct([("event_date_long", Schema(Type.INT64, optional=True)), ("x", INT64_SCHEMA)])
    out = t.apply(sink({"event_date_long": MILLIS, "x": 1}, schema))
    assert out.value == {"event_date_long": "2023-11-14", "x": 1}
    assert out.value_schema == Schema.struct([("event_date_long", OPTIONAL_STRING_SCHEMA), ("x", INT64_SCHEMA)])


def test_whole_value_conversions_between_all_types() -> None:
    def convert(target: str, value: object, schema: Schema | None = None, **extra: str) -> Any:
        return configured(TimestampConverterValue, target_type=target, **extra).apply(sink(value, schema))

    fmt = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"
    assert convert("Timestamp", MILLIS, INT64_SCHEMA).value == INSTANT
    assert convert("Timestamp", MILLIS, INT64_SCHEMA).value_schema == Timestamp.SCHEMA
    assert convert("unix", INSTANT, Timestamp.SCHEMA).value == MILLIS
    assert convert("unix", INSTANT, unix_precision="seconds").value == MILLIS // 1000
    assert convert("unix", INSTANT, unix_precision="microseconds").value == MILLIS * 1000
    assert convert("unix", INSTANT, unix_precision="nanoseconds").value == MILLIS * 1_000_000
    assert convert("Timestamp", MILLIS * 1000, unix_precision="microseconds").value == INSTANT
    assert convert("string", INSTANT, format=fmt).value == "2023-11-14T22:13:20.123Z"
    assert convert("Timestamp", "2023-11-14T23:13:20.123+01:00", STRING_SCHEMA, format=fmt).value == INSTANT
    date = convert("Date", INSTANT, Timestamp.SCHEMA)
    assert date.value == dt.date(2023, 11, 14) and date.value_schema == Date.SCHEMA
    time = convert("Time", INSTANT)
    assert time.value == dt.time(22, 13, 20, 123000)
    assert convert("unix", dt.date(1970, 1, 2), Date.SCHEMA).value == 86_400_000
    assert convert("unix", dt.time(0, 0, 1), Time.SCHEMA).value == 1000


def test_nulls_tombstones_and_key() -> None:
    t = configured(TimestampConverterValue, field="ts", target_type="unix")
    assert t.apply(sink({"ts": None})).value == {"ts": None}
    tombstone = sink(None)
    assert t.apply(tombstone) is tombstone
    schema = Schema.struct([("ts", Timestamp.OPTIONAL_SCHEMA)], optional=True)
    out = t.apply(sink(None, schema))
    assert out.value is None and out.value_schema == Schema.struct([("ts", INT64_SCHEMA.as_optional())], optional=True)
    key = configured(TimestampConverterKey, target_type="Timestamp").apply(sink("v", key=MILLIS))
    assert key.key == INSTANT and key.value == "v"


def test_errors_name_the_problem() -> None:
    with pytest.raises(ConfigError, match="requires format"):
        configured(TimestampConverterValue, target_type="string")
    with pytest.raises(ConfigError) as err:
        configured(TimestampConverterValue, target_type="epoch")
    assert err.value.key == "target.type"
    with pytest.raises(DataError, match="format option"):
        configured(TimestampConverterValue, target_type="unix").apply(sink("2023-01-01"))
    with pytest.raises(DataError, match="does not match pattern"):
        configured(TimestampConverterValue, target_type="unix", format="yyyy-MM-dd").apply(sink("14/11/2023"))
    with pytest.raises(DataError, match="field ts.*float"):
        configured(TimestampConverterValue, field="ts", target_type="unix").apply(sink({"ts": 1.5}))
    with pytest.raises(DataError, match="not in the value schema"):
        configured(TimestampConverterValue, field="ts", target_type="unix").apply(
            sink({"a": 1}, Schema.struct([("a", INT64_SCHEMA)]))
        )
