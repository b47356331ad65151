from __future__ import annotations

import datetime as dt
import decimal

import pytest

from sluice.connectors.api import (
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_INT32_SCHEMA,
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    ConfigError,
    DataError,
    Schema,
    Timestamp,
)
from sluice.transforms import (
    ExtractFieldKey,
    ExtractFieldValue,
    HoistFieldKey,
    HoistFieldValue,
    InsertFieldKey,
    InsertFieldValue,
    MaskFieldValue,
    ReplaceFieldKey,
    ReplaceFieldValue,
    ValueToKey,
)

from .support import configured, sink, source

PERSON = Schema.struct([("id", INT64_SCHEMA), ("name", OPTIONAL_STRING_SCHEMA)], name="person", version=2)


# -- ExtractField ---------------------------------------------------------------------------------


def test_extract_field_without_schema() -> None:
    t = configured(ExtractFieldValue, field="id")
    out = t.apply(sink({"id": 42, "name": "Ann"}))
    assert out.value == 42 and out.value_schema is None and out.topic == "test"


def test_extract_field_with_schema() -> None:
    out = configured(ExtractFieldValue, field="name").apply(sink({"id": 42, "name": "Ann"}, PERSON))
    assert out.value == "Ann" and out.value_schema == OPTIONAL_STRING_SCHEMA


def test_extract_field_from_key() -> None:
    out = configured(ExtractFieldKey, field="id").apply(sink("v", key={"id": 7}, key_schema=None))
    assert out.key == 7 and out.value == "v"


def test_extract_field_missing_field_and_null_value() -> None:
    t = configured(ExtractFieldValue, field="missing")
    assert t.apply(sink({"id": 1})).value is None
    with pytest.raises(DataError, match="ExtractField.*missing"):
        t.apply(sink({"id": 1, "name": None}, PERSON))
    tombstone = configured(ExtractFieldValue, field="id").apply(sink(None, PERSON))
    assert tombstone.value is None and tombstone.value_schema == INT64_SCHEMA


def test_extract_field_rejects_a_non_map_value() -> None:
    with pytest.raises(DataError, match="ExtractField.*found str"):
        configured(ExtractFieldValue, field="id").apply(sink("text"))


def test_extract_nested_field_with_v2_syntax() -> None:
    address = Schema.struct([("city", STRING_SCHEMA), ("zip.code", STRING_SCHEMA)])
    schema = Schema.struct([("id", INT64_SCHEMA), ("address", address)])
    value = {"id": 1, "address": {"city": "Oslo", "zip.code": "0150"}}
    t = configured(ExtractFieldValue, field="address.city", field_syntax_version="V2")
    assert t.apply(sink(value, schema)).value == "Oslo"
    assert t.apply(sink(value)).value == "Oslo"
    t = configured(ExtractFieldValue, field="address.`zip.code`", field_syntax_version="V2")
    out = t.apply(sink(value, schema))
    assert out.value == "0150" and out.value_schema == STRING_SCHEMA
    # V1 takes the dotted name literally
    assert configured(ExtractFieldValue, field="address.city").apply(sink(value)).value is None


def test_extract_field_requires_field() -> None:
    with pytest.raises(ConfigError) as err:
        configured(ExtractFieldValue)
    assert err.value.key == "field"


# -- HoistField -----------------------------------------------------------------------------------


def test_hoist_field_with_and_without_schema() -> None:
    t = configured(HoistFieldValue, field="line")
    assert t.apply(sink("hello")).value == {"line": "hello"}
    out = t.apply(sink(42, INT32_SCHEMA))
    assert out.value == {"line": 42}
    assert out.value_schema == Schema.struct([("line", INT32_SCHEMA)])
    key = configured(HoistFieldKey, field="k").apply(sink("v", key=5, key_schema=INT64_SCHEMA))
    assert key.key == {"k": 5} and key.key_schema == Schema.struct([("k", INT64_SCHEMA)]) and key.value == "v"


# -- InsertField ----------------------------------------------------------------------------------


def test_insert_static_and_metadata_fields_without_schema() -> None:
    t = configured(
        InsertFieldValue,
        static_field="MessageSource",
        static_value="Kafka Connect framework",
        topic_field="t",
        partition_field="p",
        offset_field="o",
        timestamp_field="ts",
    )
    record = sink({"id": 1})
    out = t.apply(record)
    assert out.value == {
        "id": 1,
        "MessageSource": "Kafka Connect framework",
        "t": "test",
        "p": 0,
        "o": 42,
        "ts": 1_700_000_000_000,
    }
    assert record.value == {"id": 1}  # the input is not modified
    assert t.apply_batch([record]) == [out]


def test_insert_fields_with_schema() -> None:
    t = configured(
        InsertFieldValue,
        topic_field="topic!",
        offset_field="offset",
        timestamp_field="ts",
        static_field="src",
        static_value="x",
    )
    out = t.apply(sink({"id": 1, "name": None}, PERSON))
    assert out.value_schema == Schema.struct(
        [
            ("id", INT64_SCHEMA),
            ("name", OPTIONAL_STRING_SCHEMA),
            ("topic", STRING_SCHEMA),
            ("offset", OPTIONAL_INT64_SCHEMA),
            ("ts", Timestamp.OPTIONAL_SCHEMA),
            ("src", OPTIONAL_STRING_SCHEMA),
        ],
        name="person",
        version=2,
    )
    assert out.value == {
        "id": 1,
        "name": None,
        "topic": "test",
        "offset": 42,
        "ts": dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.UTC),
        "src": "x",
    }
    assert t.apply(sink({"id": 2, "name": "b"}, PERSON)).value_schema is out.value_schema  # cached


def test_insert_field_passes_tombstones_and_needs_sink_records_for_offsets() -> None:
    t = configured(InsertFieldValue, offset_field="o")
    tombstone = sink(None, PERSON)
    assert t.apply(tombstone) is tombstone
    with pytest.raises(DataError, match="offset.field"):
        t.apply(source({"id": 1}))
    assert configured(InsertFieldValue, topic_field="t").apply(source({"id": 1})).value == {"id": 1, "t": "test"}


def test_insert_field_into_key_and_config_errors() -> None:
    out = configured(InsertFieldKey, partition_field="p").apply(sink("v", key={"k": 1}))
    assert out.key == {"k": 1, "p": 0} and out.value == "v"
    with pytest.raises(ConfigError, match="No field insertion"):
        configured(InsertFieldValue)
    with pytest.raises(ConfigError, match="static"):
        configured(InsertFieldValue, static_field="s")
    with pytest.raises(DataError, match="InsertField.*found list"):
        configured(InsertFieldValue, topic_field="t").apply(sink([1]))


# -- MaskField ------------------------------------------------------------------------------------


def test_mask_field_without_replacement() -> None:
    value = {
        "ssn": "123", "age": 42, "ratio": 1.5, "ok": True, "amount": decimal.Decimal("9.99"),
        "tags": ["a"], "attrs": {"a": 1}, "born": dt.date(1990, 1, 2), "missing": None, "keep": "x",
    }  # fmt: skip
    t = configured(MaskFieldValue, fields="ssn,age,ratio,ok,amount,tags,attrs,born,missing")
    assert t.apply(sink(value)).value == {
        "ssn": "", "age": 0, "ratio": 0.0, "ok": False, "amount": decimal.Decimal(0),
        "tags": [], "attrs": {}, "born": dt.date(1970, 1, 1), "missing": None, "keep": "x",
    }  # fmt: skip


def test_mask_field_with_replacement_and_schema() -> None:
    schema = Schema.struct([("ssn", STRING_SCHEMA), ("age", INT32_SCHEMA), ("name", STRING_SCHEMA)])
    t = configured(MaskFieldValue, fields=["ssn", "age"], replacement="999")
    out = t.apply(sink({"ssn": "123-45", "age": 42, "name": "Ann"}, schema))
    assert out.value == {"ssn": "999", "age": 999, "name": "Ann"} and out.value_schema is schema
    with pytest.raises(DataError, match="age"):
        configured(MaskFieldValue, fields="age", replacement="abc").apply(sink({"age": 1}))
    with pytest.raises(DataError, match="ok"):
        configured(MaskFieldValue, fields="ok", replacement="1").apply(sink({"ok": True}))
    assert t.apply(sink(None)).value is None


# -- ReplaceField ---------------------------------------------------------------------------------


def test_replace_field_exclude_include_rename_without_schema() -> None:
    value = {"foo": 1, "bar": 2, "baz": 3}
    assert configured(ReplaceFieldValue, exclude="baz").apply(sink(value)).value == {"foo": 1, "bar": 2}
    assert configured(ReplaceFieldValue, include="foo,baz").apply(sink(value)).value == {"foo": 1, "baz": 3}
    renamed = configured(ReplaceFieldValue, renames="foo:c1,bar:c2").apply(sink(value)).value
    assert renamed == {"c1": 1, "c2": 2, "baz": 3}
    both = configured(ReplaceFieldValue, include="foo,bar", exclude="bar").apply(sink(value))
    assert both.value == {"foo": 1}


def test_replace_field_legacy_names_and_schema() -> None:
    schema = Schema.struct([("foo", INT32_SCHEMA), ("bar", OPTIONAL_INT32_SCHEMA), ("baz", STRING_SCHEMA)], name="n")
    t = configured(ReplaceFieldValue, blacklist="baz", renames="bar:b")
    out = t.apply(sink({"foo": 1, "bar": None, "baz": "x"}, schema))
    assert out.value == {"foo": 1, "b": None}
    assert out.value_schema == Schema.struct([("foo", INT32_SCHEMA), ("b", OPTIONAL_INT32_SCHEMA)], name="n")
    kept = configured(ReplaceFieldValue, whitelist="baz").apply(sink({"foo": 1, "bar": 2, "baz": "x"}, schema))
    assert kept.value == {"baz": "x"}


def test_replace_field_batch_key_and_errors() -> None:
    t = configured(ReplaceFieldValue, renames="a:b")
    records = [sink({"a": i}) for i in range(3)] + [sink(None)]
    assert [r.value for r in t.apply_batch(records)] == [{"b": 0}, {"b": 1}, {"b": 2}, None]
    assert configured(ReplaceFieldKey, exclude="x").apply(sink(1, key={"x": 1, "y": 2})).key == {"y": 2}
    with pytest.raises(ConfigError) as err:
        configured(ReplaceFieldValue, renames="oops")
    assert err.value.key == "renames"
    with pytest.raises(DataError, match="ReplaceField"):
        t.apply_batch([sink("text")])


def test_replace_field_uses_defaults_for_nulls() -> None:
    schema = Schema.struct([("a", Schema(INT32_SCHEMA.type, optional=True, default=5))])
    assert configured(ReplaceFieldValue, renames="a:b").apply(sink({"a": None}, schema)).value == {"b": 5}
    off = configured(ReplaceFieldValue, renames="a:b", replace_null_with_default=False)
    assert off.apply(sink({"a": None}, schema)).value == {"b": None}


# -- ValueToKey -----------------------------------------------------------------------------------


def test_value_to_key_without_and_with_schema() -> None:
    t = configured(ValueToKey, fields="userId,city")
    value = {"userId": 7, "city": "Oslo", "state": "NO"}
    out = t.apply(sink(value, key="old"))
    assert out.key == {"userId": 7, "city": "Oslo"} and out.key_schema is None and out.value == value
    schema = Schema.struct([("userId", INT64_SCHEMA), ("city", STRING_SCHEMA), ("state", STRING_SCHEMA)])
    out = t.apply(sink(value, schema))
    assert out.key == {"userId": 7, "city": "Oslo"}
    assert out.key_schema == Schema.struct([("userId", INT64_SCHEMA), ("city", STRING_SCHEMA)])


def test_value_to_key_errors() -> None:
    with pytest.raises(DataError, match="nope"):
        configured(ValueToKey, fields="nope").apply(sink({"a": 1}, Schema.struct([("a", INT32_SCHEMA)])))
    with pytest.raises(DataError, match="ValueToKey.*null"):
        configured(ValueToKey, fields="a").apply(sink(None))
    with pytest.raises(ConfigError) as err:
        configured(ValueToKey, fields="")
    assert err.value.key == "fields"
