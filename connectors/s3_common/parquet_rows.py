"""Which schemaless values a Parquet object can take as rows, decided when they are written.

A Parquet object has one Arrow schema. For schemaless values Arrow infers it from the object's
first row group, and every later row is converted to it when its own row group is encoded, at
rotation, long after the record's ``put()``. A value that does not fit would then fail the whole
object's commit (or, a top-level array, silently become a row of nulls). :class:`RowShape` states
the rules the encoding applies, so a writer can refuse the value itself, in order:

* a row is an object (a ``dict``); ``None`` (a tombstone written with
  ``behavior.on.null.values=write``) is a row of nulls;
* the object's fields are the first row's keys (Arrow names the columns after it; other keys are
  dropped, as the encoder drops them);
* each field keeps the kind of value its first non-null value had (integer, float, boolean,
  string, bytes, object, array); integers and floats mix in the first row group (Arrow makes the
  column a double) but, once the column is an integer one, a float does not fit (Arrow would
  truncate it); a field that is null in every row of the first row group is a column of Arrow's
  ``null`` type and takes nothing but nulls afterwards.

Only the top level is checked: a nested object or array whose members change type, and an integer
beyond int64, still fail the object's commit when its row group is encoded.

The check of a good batch runs in C (``set(map(...))`` over each field's column); the values are
walked one by one in Python only while a field of the first row group is still untyped, when a
float meets an integer column, or when a batch holds a value that does not fit, to find it. The
S3 sink's raw path (consumed JSON bytes, parsed on upload threads) does not use it for a row group
its readers take: they refuse anything that does not fit (see ``ParquetObjectWriter``).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import Any

from sluice.connectors.api import DataError
from sluice.connectors.s3_common import require_module

#: The kind of a decoded JSON value, looked up by exact type (``True`` is a boolean, not an integer).
_KINDS: dict[type, str] = {
    bool: "boolean",
    int: "integer",
    float: "float",
    str: "string",
    bytes: "bytes",
    dict: "object",
    list: "array",
}
_NONE = type(None)


class UnfitValue(DataError):
    """``values[index]`` of a write cannot be a row of the object; nothing of that write was kept.

    The message does not depend on where the value fell in its batch, so the raw and the decoded
    paths, and any batch sizes, report a value the same way. ``offset`` is filled in by whoever
    knows the record (the S3 sink's partition writer)."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index
        self.offset: int | None = None


def _arrow_kind(arrow_type: Any) -> str | None:
    """The value kind an Arrow column of ``arrow_type`` takes (``None``: not checked)."""
    types = require_module("pyarrow", "ParquetFormat").types
    if types.is_null(arrow_type):
        return "null"
    if types.is_boolean(arrow_type):
        return "boolean"
    if types.is_integer(arrow_type):
        return "integer"
    if types.is_floating(arrow_type):
        return "float"
    if types.is_string(arrow_type) or types.is_large_string(arrow_type):
        return "string"
    if types.is_binary(arrow_type) or types.is_large_binary(arrow_type):
        return "bytes"
    if types.is_struct(arrow_type):
        return "object"
    if types.is_list(arrow_type) or types.is_large_list(arrow_type):
        return "array"
    return None


def _fits(kind: str | None, value_kind: str) -> bool:
    """Whether a value of ``value_kind`` converts to a settled column of ``kind``."""
    return kind is None or value_kind == kind or (kind == "float" and value_kind == "integer")


class RowShape:
    """The fields, and the kind of value each holds, that the rows of one object must keep.

    Built empty for a new object (:meth:`check` learns the shape from its first
    ``first_group_rows`` rows, as Arrow infers the schema from the first row group), or from the
    object's Arrow schema once it has one (:meth:`of_schema`). :meth:`check` is all or nothing:
    a batch with a value that does not fit leaves the shape as it was.
    """

    def __init__(self, first_group_rows: int) -> None:
        #: field → kind (``None``: no non-null value yet); ``None`` until the first row.
        self.fields: dict[str, str | None] | None = None
        #: Rows still to come in the first row group (0: the schema is settled).
        self.learning = first_group_rows

    @classmethod
    def of_schema(cls, schema: Any) -> RowShape:
        """The shape of an object whose Arrow schema is ``schema``."""
        shape = cls(0)
        shape.fields = {field.name: _arrow_kind(field.type) for field in schema}
        return shape

    def check(self, values: Sequence[Any]) -> None:
        """Raise :class:`UnfitValue` for the first of ``values`` that cannot be a row after the
        rows before it; else take them into the shape."""
        fields = self.fields
        settled = fields is not None and (self.learning == 0 or None not in fields.values())
        if settled and self._fits_as_columns(values):
            self.learning = max(0, self.learning - len(values))
            return
        self._check_each(values)

    def _fits_as_columns(self, values: Sequence[Any]) -> bool:
        """Whether every value fits a settled shape without a type change, column by column in C."""
        assert self.fields is not None
        if set(map(type, values)) != {dict}:
            return False
        for name, kind in self.fields.items():
            if kind is None:
                continue
            seen = set(map(type, map(dict.get, values, repeat(name))))
            seen.discard(_NONE)
            for value_type in seen:
                value_kind = _KINDS.get(value_type)
                if value_kind is None or not _fits(kind, value_kind):
                    return False  # and a float in an integer column (learning: it becomes float)
        return True

    def _check_each(self, values: Sequence[Any]) -> None:
        fields = None if self.fields is None else dict(self.fields)
        learning = self.learning
        for index, value in enumerate(values):
            if value is not None and type(value) is not dict:
                got = _KINDS.get(type(value), type(value).__name__)
                raise UnfitValue(f"ParquetFormat needs struct (object) values, got {_article(got)}", index)
            if value is not None:
                if fields is None:
                    fields = dict.fromkeys(value)
                for name, kind in fields.items():
                    item = value.get(name)
                    if item is None:
                        continue
                    value_kind = _KINDS.get(type(item), type(item).__name__)
                    if learning:
                        if kind is None or (kind == "integer" and value_kind == "float"):
                            fields[name] = value_kind
                            continue
                    if not _fits(kind, value_kind):
                        held = "nothing but null" if kind == "null" else f"{kind} values"
                        raise UnfitValue(
                            f"ParquetFormat cannot convert the value to the object's schema: its field "
                            f"{name!r} holds {_article(value_kind)} where the object's column holds {held}",
                            index,
                        )
            if learning:
                learning -= 1
                # The first row group ends: a field never set is a column of Arrow's null type.
                if not learning and fields is not None:
                    fields = {name: "null" if kind is None else kind for name, kind in fields.items()}
        self.fields, self.learning = fields, learning


def _article(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"
