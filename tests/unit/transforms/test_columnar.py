"""Columnar transforms (``apply_columns`` on a consumed SinkRecordBatch) give exactly the records
the record-by-record path gives, and the chain uses them without building records."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.connectors.api import DataError, Schema, SinkRecord, SinkRecordBatch
from sluice.connectors.api.schema import INT64_SCHEMA, OPTIONAL_STRING_SCHEMA, STRING_SCHEMA
from sluice.transforms import InsertFieldKey, InsertFieldValue, RegexRouter, ReplaceFieldValue, TimestampRouter
from sluice.transforms._support import DerivedSinkRecordBatch
from sluice.worker.execution.transform_chain import TransformChain, TransformStep

from .support import configured

SCHEMA = Schema.struct(
    [("id", INT64_SCHEMA), ("name", STRING_SCHEMA), ("note", OPTIONAL_STRING_SCHEMA.with_(default="n/a"))],
    name="row",
)


def batch(values: list[Any], schemas: list[Any] | None = None, keys: list[Any] | None = None, topic: str = "orders") -> SinkRecordBatch:
    n = len(values)
    columns: dict[str, list[Any]] = {
        "partition": [3] * n,
        "kafka_offset": list(range(100, 100 + n)),
        "timestamp": [1_700_000_000_000 + i if i != 1 else None for i in range(n)],
        "timestamp_type": [1] * n,
        "headers": [None] * n,
    }
    loads: list[str] = []

    def load(name: str) -> list[Any]:
        loads.append(name)
        return columns[name]

    b = SinkRecordBatch(topic, values, schemas or [None] * n, keys or [None] * n, [None] * n, load)
    return b


def chain(*transforms: Any) -> TransformChain:
    return TransformChain([TransformStep(f"t{i}", t) for i, t in enumerate(transforms)])


def record_path(c: TransformChain, b: SinkRecordBatch) -> list[SinkRecord]:
    return list(c(list(b.records())))


CASES = [
    pytest.param(lambda: [configured(ReplaceFieldValue, exclude="note")], id="replace-exclude"),
    pytest.param(lambda: [configured(ReplaceFieldValue, include="id,note", renames="note:remark")], id="replace-include-rename"),
    pytest.param(lambda: [configured(InsertFieldValue, static_field="origin", static_value="x", topic_field="t")], id="insert-constants"),
    pytest.param(
        lambda: [configured(InsertFieldValue, partition_field="p", offset_field="o", timestamp_field="ts")], id="insert-columns"
    ),
    pytest.param(lambda: [configured(RegexRouter, regex="(.*)", replacement="routed-$1")], id="route"),
    pytest.param(
        lambda: [
            configured(ReplaceFieldValue, exclude="note"),
            configured(InsertFieldValue, static_field="origin", static_value="bench"),
            configured(RegexRouter, regex="ord(.*)", replacement="x$1"),
        ],
        id="three-step-chain",
    ),
]


@pytest.mark.parametrize("make", CASES)
def test_schemaless_columns_match_the_record_path(make: Any) -> None:
    values = [{"id": 1, "name": "a", "note": "n"}, None, {"id": 3, "name": "c"}, {"name": "d", "id": 4, "note": None}]
    c = chain(*make())
    out = c(batch(values))
    assert isinstance(out, DerivedSinkRecordBatch) or out is not None
    assert list(out) == record_path(chain(*make()), batch(values))
    assert values[0] == {"id": 1, "name": "a", "note": "n"}  # the input is never changed


@pytest.mark.parametrize("make", CASES)
def test_schema_columns_match_the_record_path(make: Any) -> None:
    values = [{"id": 1, "name": "a", "note": "n"}, None, {"id": 3, "name": "c", "note": None}]
    schemas = [SCHEMA, SCHEMA, SCHEMA]
    out = chain(*make())(batch(values, schemas))
    expected = record_path(chain(*make()), batch(values, schemas))
    assert list(out) == expected
    assert [r.value_schema for r in out] == [r.value_schema for r in expected]


def test_the_chain_builds_no_record_for_columnar_steps() -> None:
    b = batch([{"id": i, "note": "x"} for i in range(5)])
    out = chain(
        configured(ReplaceFieldValue, exclude="note"),
        configured(InsertFieldValue, static_field="origin", static_value="o"),
        configured(RegexRouter, regex="elsewhere", replacement="archive"),  # matches nothing
    )(b)
    assert isinstance(out, SinkRecordBatch)
    assert out.topic == "orders"
    assert out.values == [{"id": i, "origin": "o"} for i in range(5)]
    assert b._records is None  # the consumed batch never built its records


def test_a_routed_batch_stays_a_batch_that_keeps_its_consumed_coordinates() -> None:
    """Sinks commit offsets for the consumed topic: the batch carries it next to the new one, and
    so does every record built from it."""
    b = batch([{"id": 1}, {"id": 2}])
    routed = configured(RegexRouter, regex="orders", replacement="archive").apply_columns(b)
    assert isinstance(routed, DerivedSinkRecordBatch) and routed.routed and routed.original_topic == "orders"
    out = chain(configured(RegexRouter, regex="orders", replacement="archive"))(b)
    assert isinstance(out, SinkRecordBatch)
    assert (out.topic, out.original_topic, out.values) == ("archive", "orders", [{"id": 1}, {"id": 2}])
    first = out[0]
    assert (first.topic, first.original_topic, first.original_partition, first.original_offset) == ("archive", "orders", 3, 100)
    assert first.topic_partition.topic == "orders"
    assert out[1].original_offset == 101


def test_an_unrouted_batch_builds_records_without_original_coordinates() -> None:
    out = chain(configured(RegexRouter, regex="nomatch", replacement="x"))(batch([{"id": 1}]))
    assert isinstance(out, SinkRecordBatch) and not out.routed
    assert out[0].original_topic is None and out[0].topic_partition.topic == "orders"


def test_a_step_without_columns_continues_record_by_record() -> None:
    out = chain(
        configured(ReplaceFieldValue, exclude="note"),
        configured(TimestampRouter, topic_format="${topic}-${timestamp}", timestamp_format="yyyy"),
    )(batch([{"id": 1, "note": "x"}]))
    assert isinstance(out, list)
    assert [(r.topic, r.value) for r in out] == [("orders-2023", {"id": 1})]


def test_mixed_schemas_fall_back_to_records() -> None:
    values = [{"id": 1, "name": "a", "note": None}, {"id": 2}]
    b = batch(values, [SCHEMA, None])
    assert configured(ReplaceFieldValue, exclude="note").apply_columns(b) is None
    out = chain(configured(ReplaceFieldValue, exclude="note"))(b)
    assert [r.value for r in out] == [{"id": 1, "name": "a"}, {"id": 2}]


def test_non_map_data_still_raises_the_record_error() -> None:
    b = batch([{"id": 1}, "plain text"])
    with pytest.raises(DataError, match="only maps are supported"):
        chain(configured(ReplaceFieldValue, exclude="note"))(b)


def test_key_variant_works_on_the_key_column() -> None:
    b = batch([1, 2], keys=[{"k": 1}, {"k": 2}])
    out = chain(configured(InsertFieldKey, static_field="s", static_value="v"))(b)
    assert [r.key for r in out] == [{"k": 1, "s": "v"}, {"k": 2, "s": "v"}]
    assert [r.value for r in out] == [1, 2]


def test_string_schema_is_not_columnar() -> None:
    b = batch(["a"], [OPTIONAL_STRING_SCHEMA])
    assert configured(InsertFieldValue, static_field="s", static_value="v").apply_columns(b) is None


def test_a_step_after_a_columnar_step_updates_its_fresh_maps_in_place() -> None:
    values = [{"id": 1, "note": "x"}, None]
    replaced = configured(ReplaceFieldValue, exclude="note").apply_columns(batch(values))
    assert isinstance(replaced, DerivedSinkRecordBatch) and replaced.fresh == "values"
    fresh_maps = replaced.values
    inserted = configured(InsertFieldValue, static_field="origin", static_value="o").apply_columns(replaced)
    assert inserted is not None and inserted.values is fresh_maps  # no second copy
    assert inserted.values == [{"id": 1, "origin": "o"}, None]
    assert values == [{"id": 1, "note": "x"}, None]  # the consumed maps are untouched
    # Without a fresh column the insert copies.
    plain = batch([{"id": 2}])
    copied = configured(InsertFieldValue, static_field="origin", static_value="o").apply_columns(plain)
    assert copied is not None and copied.values[0] is not plain.values[0]
