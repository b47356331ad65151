from __future__ import annotations

import pytest

from sluice.connectors.api import (
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    DataError,
    Schema,
)
from sluice.transforms import FlattenKey, FlattenValue

from .support import configured, sink


def test_flatten_without_schema_as_in_connect_docs() -> None:
    value = {"content": {"id": 42, "name": {"first": "David", "middle": None, "last": "Wong"}}, "tags": [1, 2]}
    out = configured(FlattenValue).apply(sink(value))
    assert out.value == {
        "content.id": 42,
        "content.name.first": "David",
        "content.name.middle": None,
        "content.name.last": "Wong",
        "tags": [1, 2],
    }
    assert configured(FlattenValue, delimiter="_").apply(sink(value)).value["content_name_last"] == "Wong"


def test_flatten_with_schema_makes_fields_of_optional_structs_optional() -> None:
    name = Schema.struct([("first", STRING_SCHEMA), ("last", STRING_SCHEMA)], optional=True)
    arr = Schema.array(INT32_SCHEMA)
    schema = Schema.struct([("id", INT64_SCHEMA), ("name", name), ("nums", arr)], name="person", version=1)
    t = configured(FlattenValue, delimiter="_")
    out = t.apply(sink({"id": 1, "name": {"first": "A", "last": "B"}, "nums": [1]}, schema))
    assert out.value == {"id": 1, "name_first": "A", "name_last": "B", "nums": [1]}
    assert out.value_schema == Schema.struct(
        [
            ("id", INT64_SCHEMA),
            ("name_first", OPTIONAL_STRING_SCHEMA),
            ("name_last", OPTIONAL_STRING_SCHEMA),
            ("nums", arr),
        ],
        name="person",
        version=1,
    )
    null_name = t.apply(sink({"id": 2, "name": None, "nums": []}, schema))
    assert null_name.value == {"id": 2, "name_first": None, "name_last": None, "nums": []}


def test_flatten_key_tombstones_and_errors() -> None:
    out = configured(FlattenKey).apply(sink("v", key={"a": {"b": 1}}))
    assert out.key == {"a.b": 1}
    tombstone = sink(None, Schema.struct([("a", OPTIONAL_INT64_SCHEMA)], optional=True))
    assert configured(FlattenValue).apply(tombstone) is tombstone
    with pytest.raises(DataError, match="Flatten"):
        configured(FlattenValue).apply(sink("text"))
