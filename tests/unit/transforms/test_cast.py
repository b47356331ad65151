from __future__ import annotations

import datetime as dt
import decimal

import pytest

from sluice.connectors.api import (
    BOOLEAN_SCHEMA,
    BYTES_SCHEMA,
    FLOAT64_SCHEMA,
    INT8_SCHEMA,
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_INT32_SCHEMA,
    STRING_SCHEMA,
    ConfigError,
    DataError,
    Decimal,
    Schema,
    Timestamp,
    Type,
)
from sluice.transforms import CastKey, CastValue

from .support import configured, sink


def test_cast_fields_without_schema() -> None:
    t = configured(CastValue, spec="age:int32,score:float64,active:boolean,id:string,n:int64")
    out = t.apply(sink({"age": "42", "score": 3, "active": 1, "id": 7, "n": 9.9, "other": "x"}))
    assert out.value == {"age": 42, "score": 3.0, "active": True, "id": "7", "n": 9, "other": "x"}
    assert out.value_schema is None


def test_cast_fields_with_schema() -> None:
    schema = Schema.struct(
        [("age", STRING_SCHEMA), ("score", Schema(Type.INT32, optional=True, default=1)), ("keep", BOOLEAN_SCHEMA)],
        name="rec",
    )
    t = configured(CastValue, spec="age:int8,score:string")
    out = t.apply(sink({"age": "12", "score": None, "keep": True}, schema))
    assert out.value == {"age": 12, "score": "1", "keep": True}
    assert out.value_schema == Schema.struct(
        [("age", INT8_SCHEMA), ("score", Schema(Type.STRING, optional=True, default="1")), ("keep", BOOLEAN_SCHEMA)],
        name="rec",
    )


def test_cast_whole_value_and_key() -> None:
    out = configured(CastValue, spec="int64").apply(sink("123", STRING_SCHEMA))
    assert out.value == 123 and out.value_schema == INT64_SCHEMA
    out = configured(CastValue, spec="string").apply(sink(1.5))
    assert out.value == "1.5" and out.value_schema is None
    out = configured(CastKey, spec="int32").apply(sink("v", key=True))
    assert out.key == 1 and out.value == "v"
    out = configured(CastValue, spec="int32").apply(sink(7, Schema(Type.INT64, optional=True)))
    assert out.value_schema == OPTIONAL_INT32_SCHEMA


def test_cast_logical_and_bytes_to_string() -> None:
    t = configured(CastValue, spec="string")
    ts = dt.datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)
    assert t.apply(sink(ts, Timestamp.SCHEMA)).value == "2024-01-02T03:04:05.678Z"
    assert t.apply(sink(decimal.Decimal("1.25"), Decimal.schema(2))).value == "1.25"
    assert t.apply(sink(b"\x01\x02", BYTES_SCHEMA)).value == "AQI="
    assert configured(CastValue, spec="int64").apply(sink(ts, Timestamp.SCHEMA)).value == Timestamp.to_int(ts)


def test_cast_tombstone_and_nulls_pass_through() -> None:
    t = configured(CastValue, spec="a:int32")
    tombstone = sink(None, Schema.struct([("a", STRING_SCHEMA)]))
    assert t.apply(tombstone) is tombstone
    assert t.apply(sink({"a": None})).value == {"a": None}


def test_cast_bad_data_names_field_and_target() -> None:
    with pytest.raises(DataError, match="Cast.*field age.*int32"):
        configured(CastValue, spec="age:int32").apply(sink({"age": "old"}))
    with pytest.raises(DataError, match="out of range for int8"):
        configured(CastValue, spec="int8").apply(sink(300))
    with pytest.raises(DataError, match="struct"):
        configured(CastValue, spec="a:int32").apply(sink(5, INT32_SCHEMA))
    nested = Schema.struct([("a", Schema.struct([("b", INT32_SCHEMA)]))])
    with pytest.raises(DataError, match="field a"):
        configured(CastValue, spec="a:string").apply(sink({"a": {"b": 1}}, nested))


def test_cast_config_errors() -> None:
    for spec in ("a:int128", "decimal", ":int32", ""):
        with pytest.raises(ConfigError) as err:
            configured(CastValue, spec=spec)
        assert err.value.key == "spec"


def test_cast_float_and_boolean_targets() -> None:
    out = configured(CastValue, spec="a:float64,b:boolean,c:boolean").apply(sink({"a": "2.5", "b": "TRUE", "c": 0}))
    assert out.value == {"a": 2.5, "b": True, "c": False}
    schema = Schema.struct([("a", FLOAT64_SCHEMA)])
    assert configured(CastValue, spec="a:int32").apply(sink({"a": -2.7}, schema)).value == {"a": -2}
