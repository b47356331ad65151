"""PostgreSQL ``COPY … FROM STDIN`` text-format data, rendered a column at a time.

psycopg's ``Copy.write_row`` costs a Python call and a per-value dispatch for every row, which is
the largest client-side cost of a COPY. Sink rows arrive as columns of one Python type each (the
JSON converter yields ``int``/``float``/``str``/``bool``/``None``), so each column can be turned
into text with one C-level ``map`` and checked for characters that need escaping with one
``join``; the lines are then joined and encoded once per batch.

:func:`render` returns ``None`` for a batch it does not know how to render exactly (arrays, UUIDs,
anything unusual): the caller falls back to ``write_row``, which handles every type psycopg does.
"""

from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Callable, Sequence
from typing import Any

import orjson

NULL = "\\N"
_NONE = type(None)
_NONE_SET = frozenset({_NONE})
# COPY text format: backslash, newline, carriage return and tab must be escaped in values.
_ESCAPES = str.maketrans({"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"})
_SPECIAL = ("\\", "\n", "\r", "\t")
_BOOL_TEXT = {True: "t", False: "f", None: NULL}
_NUMBERS = frozenset({int, float})


def render(columns: Sequence[Sequence[Any]], kinds: Sequence[frozenset[type] | None] | None = None) -> bytes | None:
    """The COPY text data (UTF-8) for rows given as ``columns``, or ``None`` if a column holds a
    type this module does not render (the caller then uses ``write_row``).

    ``kinds``: per column, the set of Python types of its values when the caller knows it already.
    """
    if not columns:
        return None  # rows without columns: nothing a COPY column list could name
    texts: list[Sequence[str]] = []
    for i, column in enumerate(columns):
        known = kinds[i] if kinds is not None else None
        text = _render_column(column, known if known is not None else frozenset(map(type, column)))
        if text is None:
            return None
        texts.append(text)
    if len(texts) == 1:
        body = "\n".join(texts[0])
    else:
        body = "\n".join(map("\t".join, zip(*texts)))
    return (body + "\n").encode()


def _render_column(column: Sequence[Any], all_kinds: frozenset[type]) -> Sequence[str] | None:
    has_null = _NONE in all_kinds
    kinds = all_kinds - _NONE_SET if has_null else all_kinds
    if not kinds:
        return [NULL] * len(column)
    if kinds <= _NUMBERS:  # also 2 and 2.5 in one double column (JSON numbers)
        return _numbers(column, has_null)
    if len(kinds) != 1:
        return None
    (kind,) = kinds
    if kind is str:
        return _strings(column, has_null)
    if kind is bool:
        return list(map(_BOOL_TEXT.__getitem__, column))
    render_one = _RENDERERS.get(kind)
    if render_one is None:
        return None
    return _with_nulls(column, render_one, has_null)


def _strings(column: Sequence[Any], has_null: bool) -> Sequence[str]:
    present = [v for v in column if v is not None] if has_null else column
    joined = "\0".join(present)
    if not any(ch in joined for ch in _SPECIAL):
        # No backslash anywhere, so no value can be mistaken for the NULL marker either.
        return [NULL if v is None else v for v in column] if has_null else column
    return [NULL if v is None else v.translate(_ESCAPES) for v in column]


def _numbers(column: Sequence[Any], has_null: bool) -> list[str]:
    """Numbers as text: orjson writes a whole list of them in C (shortest round-trip floats,
    about 10x faster than ``repr`` one by one), then the JSON array is split at its commas."""
    try:
        texts = orjson.dumps(column).decode()[1:-1].split(",")
    except TypeError:  # an integer beyond 64 bits
        return _with_nulls(column, repr, has_null)
    nulls = texts.count("null")
    if nulls != (column.count(None) if has_null else 0):
        return _with_nulls(column, repr, has_null)  # NaN or infinity, which JSON writes as null
    if nulls:
        return [NULL if t == "null" else t for t in texts]
    return texts


def _with_nulls(column: Sequence[Any], fn: Callable[[Any], str], has_null: bool) -> list[str]:
    if not has_null:
        return list(map(fn, column))
    return [NULL if v is None else fn(v) for v in column]


def _bytes_text(value: bytes) -> str:
    # bytea hex input "\x…"; the backslash itself is escaped for the COPY text format.
    return "\\\\x" + value.hex()


def _iso(value: Any) -> str:
    return value.isoformat()  # type: ignore[no-any-return]


_RENDERERS: dict[type, Callable[[Any], str]] = {
    decimal.Decimal: str,
    bytes: _bytes_text,
    _dt.datetime: _iso,
    _dt.date: _iso,
    _dt.time: _iso,
}
