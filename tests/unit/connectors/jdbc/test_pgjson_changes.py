"""Repeated keys and tombstones on the JDBC sink's fast path (``connectors/sink/jdbc/pgjson.py``),
without a database: an upsert keeps the last row of each key in the batch's order, as the ordinary
path's ``rows._dedupe`` does, and tombstones become rows marked deleted. What lands in PostgreSQL is
compared with the ordinary path in ``tests/integration/test_jdbc_sink_keys.py``."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest

from sluice.connectors.sink.jdbc.pgjson import JsonColumns, keyed_columns, read_json_lines
from sluice.connectors.sink.jdbc.writer import DELETED_COLUMN


def _columns(**columns: Any) -> JsonColumns:
    return JsonColumns(pa.table(columns), maybe_minus_zero=False)


def test_the_last_row_of_each_key_is_kept_in_the_rows_order() -> None:
    parsed = read_json_lines(
        [
            b'{"k":1,"j":"a","v":"first"}',
            b'{"k":2,"j":"a","v":"only"}',
            b'{"k":1,"j":"b","v":"other key"}',
            b'{"k":1,"j":"a","v":"last"}',
            b'{"k":3,"j":"a","v":"new"}',
        ]
    )
    assert parsed is not None
    kept = parsed.last_of_each(["k", "j"])
    assert kept is not None
    assert kept.table.to_pylist() == [
        {"k": 2, "j": "a", "v": "only"},
        {"k": 1, "j": "b", "v": "other key"},
        {"k": 1, "j": "a", "v": "last"},
        {"k": 3, "j": "a", "v": "new"},
    ]
    assert kept.unique(["k", "j"])


def test_null_keys_compare_equal_as_in_a_python_set() -> None:
    kept = _columns(k=[None, 1, None], v=["a", "b", "c"]).last_of_each(["k"])
    assert kept is not None
    assert kept.table.to_pylist() == [{"k": 1, "v": "b"}, {"k": None, "v": "c"}]


def test_floating_point_keys_are_left_to_the_ordinary_path() -> None:
    """Python's set and Arrow's grouping may disagree on -0.0 and NaN."""
    assert _columns(k=[0.0, -0.0], v=[1, 2]).last_of_each(["k"]) is None


@pytest.mark.parametrize("seed", range(5))
def test_the_rows_kept_are_the_ordinary_paths(seed: int) -> None:
    """Against the ordinary path's rule: the last record index of each key, sorted."""
    rng = random.Random(seed)
    keys = [(rng.randint(0, 20), rng.choice("xyz")) for _ in range(200)]
    parsed = _columns(k=[k for k, _ in keys], j=[j for _, j in keys], row=list(range(200)))
    kept = parsed.last_of_each(["k", "j"])
    assert kept is not None
    last = {key: i for i, key in enumerate(keys)}
    assert kept.table.column("row").to_pylist() == sorted(last.values())


def test_tombstones_become_rows_marked_deleted_with_null_values() -> None:
    keys = _columns(id=[1, 2, 3, 4])
    values = _columns(id=[1, 3], name=["a", "c"], score=[1.5, None])
    table = keyed_columns(keys, ["id"], values, live=[0, 2])
    assert table is not None
    assert table.fields == ["id", "name", "score", DELETED_COLUMN]
    assert table.table.to_pylist() == [
        {"id": 1, "name": "a", "score": 1.5, DELETED_COLUMN: False},
        {"id": 2, "name": None, "score": None, DELETED_COLUMN: True},
        {"id": 3, "name": "c", "score": None, DELETED_COLUMN: False},
        {"id": 4, "name": None, "score": None, DELETED_COLUMN: True},
    ]
    assert table.has_deletes()
    no_tombstones = keyed_columns(keys, ["id"], _columns(id=[1, 2, 3, 4], name=list("abcd")))
    assert no_tombstones is not None and not no_tombstones.has_deletes()


def test_a_batch_of_tombstones_only_is_its_keys_marked_deleted() -> None:
    table = keyed_columns(_columns(id=[5, 6]), ["id"], None, live=[])
    assert table is not None
    assert table.table.to_pylist() == [{"id": 5, DELETED_COLUMN: True}, {"id": 6, DELETED_COLUMN: True}]


def test_a_field_named_like_the_marker_is_refused() -> None:
    values = _columns(**{DELETED_COLUMN: [1]})
    assert keyed_columns(_columns(id=[1, 2]), ["id"], values, live=[0]) is None


def test_marked_rows_render_the_marker_as_a_boolean_column() -> None:
    table = keyed_columns(_columns(id=[1, 2]), ["id"], _columns(id=[1], n=[7]), live=[0])
    assert table is not None
    copy = table.copy_data(["id", "n", DELETED_COLUMN], {"id": "int8", "n": "int8", DELETED_COLUMN: "bool"})
    assert copy is not None and copy[1] == " (FORMAT binary)"
