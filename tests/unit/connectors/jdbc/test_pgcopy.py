"""The column-wise COPY text rendering: what PostgreSQL's text format needs, value by value."""

from __future__ import annotations

import datetime as dt
import decimal

from sluice.connectors.sink.jdbc.pgcopy import render


def _lines(columns: list[list[object]]) -> list[list[str]]:
    data = render(columns)
    assert data is not None
    return [line.split("\t") for line in data.decode().split("\n")[:-1]]


def test_plain_columns_render_like_write_row() -> None:
    assert _lines([[1, 2], ["a", "b"], [1.5, 2.0], [True, False]]) == [["1", "a", "1.5", "t"], ["2", "b", "2.0", "f"]]


def test_nulls_are_the_null_marker_and_a_literal_backslash_n_is_escaped() -> None:
    assert _lines([[None, 3], ["\\N", None], [None, None]]) == [["\\N", "\\\\N", "\\N"], ["3", "\\N", "\\N"]]


def test_special_characters_in_text_are_escaped() -> None:
    [[text]] = _lines([["tab\there\nnew\rline \\ end"]])
    assert text == "tab\\there\\nnew\\rline \\\\ end"


def test_numbers_mixed_ints_and_floats_and_big_or_special_values() -> None:
    assert _lines([[1, 2.5, None]]) == [["1"], ["2.5"], ["\\N"]]
    assert _lines([[2**70, -(2**63)]]) == [[str(2**70)], [str(-(2**63))]]
    assert _lines([[float("nan"), float("inf"), 1.0]]) == [["nan"], ["inf"], ["1.0"]]


def test_logical_types_and_bytes() -> None:
    rows = _lines(
        [
            [decimal.Decimal("1.250"), None],
            [dt.date(2024, 3, 1), None],
            [dt.time(13, 45, 30, 123000), None],
            [dt.datetime(2024, 2, 29, 23, 59, 59, 999000, tzinfo=dt.UTC), None],
            [b"\x00\xff", b""],
        ]
    )
    assert rows[0] == ["1.250", "2024-03-01", "13:45:30.123000", "2024-02-29T23:59:59.999000+00:00", "\\\\x00ff"]
    assert rows[1] == ["\\N", "\\N", "\\N", "\\N", "\\\\x"]


def test_values_it_cannot_render_exactly_fall_back() -> None:
    assert render([[[1, 2]]]) is None  # a PostgreSQL array: psycopg's write_row knows how
    assert render([[1, True]]) is None  # a bool among ints: the column's type is unclear
    assert render([]) is None
