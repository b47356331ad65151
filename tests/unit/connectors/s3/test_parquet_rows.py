"""Which schemaless values a Parquet object takes as rows (connectors/s3_common/parquet_rows.py)."""

from __future__ import annotations

import io
import random
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.connectors.api import DataError
from sluice.connectors.s3_common.formats import InvalidRawJson, ParquetObjectWriter
from sluice.connectors.s3_common.parquet_format import _rows_to_table
from sluice.connectors.s3_common.parquet_rows import RowShape, UnfitValue

ROWS = [{"id": i, "n": i, "s": f"v{i}"} for i in range(6)]


def _refused(shape: RowShape, values: list[Any]) -> tuple[int, str] | None:
    try:
        shape.check(values)
    except UnfitValue as exc:
        return exc.index, str(exc)
    return None


@pytest.mark.parametrize(
    ("poison", "message"),
    [
        ([1, 2, 3], "needs struct (object) values, got an array"),
        ("text", "needs struct (object) values, got a string"),
        (7, "needs struct (object) values, got an integer"),
        ({"id": 3, "n": "not-a-number", "s": "v3"}, "field 'n' holds a string where the object's column holds integer"),
        ({"id": 3, "n": True, "s": "v3"}, "field 'n' holds a boolean"),
        ({"id": 3, "n": 3, "s": 3}, "field 's' holds an integer where the object's column holds string"),
    ],
)
@pytest.mark.parametrize("learning", [100, 2])  # still inferring the schema, or settled
def test_a_value_that_is_not_an_object_or_changes_a_field_type_is_refused_by_position(
    poison: Any, message: str, learning: int
) -> None:
    shape = RowShape(learning)
    values = [*ROWS[:3], poison, *ROWS[4:]]
    refused = _refused(shape, values)
    assert refused is not None and refused[0] == 3 and message in refused[1]
    assert _refused(shape, values[:3]) is None  # the refused batch left the shape as it was
    assert _refused(shape, values[4:]) is None


def test_the_schema_settles_with_the_first_row_group() -> None:
    shape = RowShape(4)
    # In the first row group a float makes an integer column a double, and a field may stay null.
    assert _refused(shape, [{"a": 1, "b": None}, {"a": 2.5, "b": None}]) is None
    assert _refused(shape, [{"a": 3, "b": None}, {"a": 4, "b": None}]) is None
    # Settled: "a" is a double column (integers fit), "b" is of Arrow's null type.
    assert _refused(shape, [{"a": 5}, {"a": 5.5, "b": None}]) is None
    refused = _refused(shape, [{"a": 6, "b": None}, {"a": 7, "b": "x"}])
    assert refused is not None and refused[0] == 1 and "holds nothing but null" in refused[1]


def test_a_float_in_a_settled_integer_column_is_refused_not_truncated() -> None:
    shape = RowShape(2)
    assert _refused(shape, [{"a": 1}, {"a": 2}]) is None
    refused = _refused(shape, [{"a": 3}, {"a": 2.5}])
    assert refused is not None and refused[0] == 1


def test_fields_are_the_first_rows_and_others_are_not_checked() -> None:
    # Arrow names the columns after the first row; a later key is dropped, whatever it holds.
    shape = RowShape(10)
    assert _refused(shape, [{"a": 1}, {"a": 2, "b": "x"}, {"a": 3, "b": 4}, {"b": [1]}, None]) is None


def test_the_shape_of_a_schema_is_the_shape_learnt_from_the_rows_it_was_inferred_from() -> None:
    rows = [{"i": 1, "f": 0.5, "s": "x", "b": True, "o": {"k": 1}, "l": [1], "z": None}] * 3
    learnt = RowShape(3)
    learnt.check(rows)
    assert RowShape.of_schema(_rows_to_table(pa, rows, None).schema).fields == learnt.fields


KINDS = [0, 1, -5, 2.5, "s", "", True, False, None, {"k": 1}, [1, 2]]


def _written(rows: list[Any], group: int, raw: bool) -> bytes | str:
    out = io.BytesIO()
    writer = ParquetObjectWriter(out, "none", group)
    try:
        for row in rows:
            if raw:
                writer.write_raw_json([orjson.dumps(row)])
            else:
                writer.write([row], None)
        writer.close()
    except DataError as exc:
        return str(exc)
    return out.getvalue()


@pytest.mark.parametrize("seed", range(40))
def test_what_the_shape_takes_arrow_converts_and_batching_does_not_matter(seed: int) -> None:
    """Random rows against the decoded path itself: every batch the shape takes, in any batch
    sizes, is converted by Arrow without error (first row group inferred, later ones to its
    schema); the first value it refuses is the same however the rows are batched; and raw values
    give the same object, or the same refusal, as decoded ones."""
    rng = random.Random(seed)
    group = rng.randint(1, 6)
    rows: list[Any] = []
    for _ in range(rng.randint(1, 20)):
        if rng.random() < 0.02:
            rows.append(rng.choice([[1], "x", 3]))
        else:
            rows.append({name: rng.choice(KINDS[:4] if rng.random() < 0.97 else KINDS) for name in "abc"})
    whole = RowShape(group)
    first = _refused(whole, rows)
    accepted = rows if first is None else rows[: first[0]]
    one_by_one = RowShape(group)
    for index, row in enumerate(rows):
        refused = _refused(one_by_one, [row])
        if refused is not None:
            assert first is not None and (index, refused[1]) == first
            break
    else:
        assert first is None
    out = io.BytesIO()
    writer = ParquetObjectWriter(out, "none", group)
    writer.write(accepted, None)
    writer.close()  # no DataError: every row group converted
    assert _written(rows, group, raw=True) == _written(rows, group, raw=False)


def test_the_parquet_writer_refuses_a_decoded_value_before_keeping_any_of_the_write() -> None:
    out = io.BytesIO()
    writer = ParquetObjectWriter(out, "none", 4)
    writer.write(ROWS[:2], None)
    with pytest.raises(UnfitValue) as refused:
        writer.write([ROWS[2], [1, 2, 3], ROWS[3]], None)
    assert refused.value.index == 1
    writer.write([ROWS[2], ROWS[3], ROWS[4]], None)
    writer.close()
    assert pq.read_table(io.BytesIO(out.getvalue())).to_pylist() == ROWS[:5]


@pytest.mark.parametrize("poison", [b"[1,2,3]", b'{"id":2,"n":"not-a-number","s":"v2"}'])
def test_a_raw_value_that_does_not_fit_fails_its_row_group_as_invalid_raw_json(poison: bytes) -> None:
    # Raw values are looked at only when their row group is parsed; there a refusal is an
    # InvalidRawJson, which has the S3 sink deliver the stretch again decoded.
    raws = [b'{"id":0,"n":0,"s":"v0"}', b'{"id":1,"n":1,"s":"v1"}', poison, b'{"id":3,"n":3,"s":"v3"}']
    writer = ParquetObjectWriter(io.BytesIO(), "none", 10)
    writer.write_raw_json(raws)
    with pytest.raises(InvalidRawJson, match="ParquetFormat"):
        writer.close()
    assert issubclass(InvalidRawJson, DataError)


def test_raw_values_held_when_decoded_ones_follow_are_checked_with_them() -> None:
    # Raw values wait for their row group; a decoded write (another partition was rewound) decodes
    # them first. A refusal among them is the raw one's (InvalidRawJson: delivered again decoded),
    # one among the write's values is named by its position in the write.
    good = [orjson.dumps(row) for row in ROWS[:2]]
    writer = ParquetObjectWriter(io.BytesIO(), "none", 10)
    writer.write_raw_json([*good, b"[1,2,3]"])
    with pytest.raises(InvalidRawJson, match="got an array"):
        writer.write([ROWS[3]], None)
    writer = ParquetObjectWriter(io.BytesIO(), "none", 10)
    writer.write_raw_json(good)
    with pytest.raises(UnfitValue) as refused:
        writer.write([ROWS[2], {"id": 3, "n": "x", "s": "v3"}], None)
    assert refused.value.index == 1
