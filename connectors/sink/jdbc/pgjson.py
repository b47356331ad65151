"""Schemaless JSON values straight to PostgreSQL ``COPY`` data (binary or CSV), with no Python object per record.

The ordinary path decodes every value into a dict (orjson), splits the dicts into columns and
renders those as COPY text: three passes that each build or visit Python objects per record,
about two thirds of the sink's Python time on the benchmark's flat 8-field rows. Here the
consumed bytes are parsed into Arrow columns by Sluice's native parser (:mod:`sluice.converters.json_arrow`;
without it installed, joined with newlines and parsed by Arrow's C++ JSON reader) and written back
out, all without touching the interpreter per record: as COPY's binary
format (:meth:`JsonColumns.binary`) when every field's column takes it, else by Arrow's CSV writer
(:meth:`JsonColumns.csv`).

**Binary** is used when every field is an integer for a ``bigint``/``integer``/``smallint`` column
(in range: otherwise the server's error comes from the CSV path), a double for a ``double
precision`` column, a boolean for a ``boolean`` column, a string for a ``text`` or ``varchar``
column, or null throughout. Each row is ``int16`` field count, then per field an ``int32`` length
(-1 for NULL) and the value in network byte order, or the string's UTF-8 bytes. The server then
skips parsing text: about a quarter less of its CPU per row than CSV on the benchmark's 8 columns
(0.92 against 1.25 µs), and rendering costs less than half of Arrow's CSV writer (0.08 against 0.18
µs per row). The fixed-width fields between two strings are laid out in one NumPy structured array
(a record per row), and Arrow's ``binary_join_element_wise`` concatenates those records and the
strings row by row.

Only batches whose result is certain to equal the ordinary path's take this way. The ordinary
path sends each value's text to the server: strings as they are, numbers as orjson writes them,
booleans as ``t``/``f``, ``None`` as NULL. The CSV data carries the same text where it matters:

* strings are always quoted by Arrow (so ``""`` is an empty string and an unquoted empty field is
  NULL, as in PostgreSQL's CSV format); quotes, commas and newlines inside them are CSV-quoted;
* integers (``int64``) come out as the same digits;
* doubles come out in their shortest round-trip form, which can differ from orjson's text
  (``1e+22`` against ``1e22``, ``2`` against ``2.0``) but not in value, so they are accepted only
  for ``double precision`` columns, where the server parses both to the same number;
* booleans come out as ``true``/``false``, accepted only for ``boolean`` columns (a ``text``
  column would store ``true`` instead of ``t``).

Binary data holds the same values: integers, doubles and booleans as their bits, strings as their
bytes.

Anything else returns ``None`` and the caller takes the ordinary path for the batch: tombstones,
nested values, values that mix types in one field, fields the table lacks, JSON that Arrow reads
differently from orjson (raw newlines between tokens, duplicate keys, surrogate escapes, the
integer ``-0``), or strings Arrow would turn into timestamps (read again as strings).
"""

from __future__ import annotations

import decimal
import re
import struct
from collections.abc import Mapping, Sequence
from typing import Any

try:  # imported up front: pyarrow.compute takes a noticeable time to import, not to be paid mid-stream
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv
    import pyarrow.json as pj
except ImportError:  # pragma: no cover - pyarrow comes with the jdbc extra; without it every batch goes the ordinary way
    pa = None
from sluice.connectors.sink.jdbc.writer import DELETED_COLUMN
from sluice.converters import json_arrow

#: The ``COPY … FROM STDIN`` options of the two kinds of data :meth:`JsonColumns.copy_data` renders.
COPY_BINARY, COPY_CSV = " (FORMAT binary)", " (FORMAT csv)"
_MINUS_ZERO_BITS = -(2**63)  # the bits of -0.0 read as an int64
#: COPY binary: signature, flags (none) and header extension length (0); the trailer is a field count of -1.
_BINARY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)
_BINARY_TRAILER = b"\xff\xff"
_NULL_FIELD = b"\xff\xff\xff\xff"  # a field length of -1
#: Column type → the network-order dtype of its binary form, for the Arrow type read from JSON.
_FIXED = {
    ("int64", "int8"): ">i8",
    ("int64", "int4"): ">i4",
    ("int64", "int2"): ">i2",
    ("double", "float8"): ">f8",
    ("bool", "bool"): "u1",
}
#: Typed columns (JSON with schemas, Avro): Connect's Date, Time and Timestamp as PostgreSQL's
#: binary ``date`` (days since 2000-01-01), ``time`` and ``timestamp`` (microseconds, since midnight
#: and since 2000-01-01 UTC); the Arrow type → its integer view, the factor to PostgreSQL's unit, the shift.
_TEMPORAL = {
    ("date32[day]", "date"): ("int32", ">i4", 1, -10_957),
    ("time32[ms]", "time"): ("int32", ">i8", 1000, 0),
    ("timestamp[ms, tz=UTC]", "timestamp"): ("int64", ">i8", 1000, -946_684_800_000_000),
}
#: Typed columns CSV renders as the text the ordinary path sends (same value), by Arrow type → column type.
_CSV_TYPED = {("date32[day]", "date"), ("time32[ms]", "time"), ("timestamp[ms, tz=UTC]", "timestamp")}
_INT_RANGE = {"int4": (-(2**31), 2**31 - 1), "int2": (-(2**15), 2**15 - 1)}
#: COPY binary ``numeric`` fields of up to 18 decimal digits: five base-10000 digits at most.
_NUMERIC_GROUPS = 5
#: One such field: its length, then digit count, weight, sign and display scale, and the digits.
_NUMERIC_LAYOUT = [("length", ">i4"), ("count", ">i2"), ("weight", ">i2"), ("sign", ">u2"), ("scale", ">i2")]
_NUMERIC_LAYOUT.append(("digits", ">i2", (_NUMERIC_GROUPS,)))  # type: ignore[arg-type]
_TEXT_TYPES = {"text", "varchar"}
# The JSON integer -0 (not -0.5, -0e1 or -0.0); also matches inside strings, which costs only a closer look.
_INTEGER_MINUS_ZERO = re.compile(rb"-0(?![.eE0-9])")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD]")


class JsonColumns:
    """A batch of JSON objects parsed into columns, ready to be written as CSV for some of its fields."""

    __slots__ = ("table", "fields", "maybe_minus_zero")

    def __init__(self, table: Any, maybe_minus_zero: bool = True) -> None:
        self.table = table
        self.fields: list[str] = table.column_names
        self.maybe_minus_zero = maybe_minus_zero  # False: no double column can hold a -0 read from the integer -0

    def unique(self, keys: Sequence[str]) -> bool:
        """Whether no two rows share the values of ``keys`` (nulls compare equal, as in a Python set)."""
        if len(keys) == 1:
            return int(pc.count_distinct(self.table.column(keys[0]), mode="all").as_py()) == self.table.num_rows
        return int(self.table.group_by(list(keys)).aggregate([]).num_rows) == self.table.num_rows

    def last_of_each(self, keys: Sequence[str]) -> JsonColumns | None:
        """The last row of each distinct value of ``keys``, in the rows' order: the rows the ordinary
        path keeps for an upsert (``rows._dedupe``; nulls compare equal, as in a Python set). ``None``
        if a key column holds floating-point numbers, which Python and Arrow may group differently
        (``-0.0``, NaN)."""
        table = self.table
        columns = [table.column(k) for k in keys]
        if not columns or any(pa.types.is_floating(c.type) for c in columns):
            return None
        names = [f"k{i}" for i in range(len(columns))]  # the row number's name, "row", is not among them
        numbered = pa.Table.from_arrays([*columns, pa.array(np.arange(table.num_rows))], names=[*names, "row"])
        last = numbered.group_by(names, use_threads=False).aggregate([("row", "max")]).column("row_max")
        return JsonColumns(table.take(np.sort(last.to_numpy())), self.maybe_minus_zero)

    def has_deletes(self) -> bool:
        """Whether a row is marked deleted (:func:`keyed_columns` of a batch with tombstones)."""
        return DELETED_COLUMN in self.fields and bool(pc.any(self.table.column(DELETED_COLUMN)).as_py())

    def copy_data(self, fields: Sequence[str], types: Mapping[str, str]) -> tuple[bytes, str] | None:
        """COPY data for ``fields`` and its ``COPY … FROM STDIN`` options: binary where every
        field's column takes it, else CSV; ``None`` if neither would store what the ordinary path does."""
        data = self.binary(fields, types)
        if data is not None:
            return data, COPY_BINARY
        data = self.csv(fields, types)
        return None if data is None else (data, COPY_CSV)

    def binary(self, fields: Sequence[str], types: Mapping[str, str]) -> bytes | None:
        """The rows of ``fields`` as COPY binary data, or ``None`` if a field's type pair is not one
        binary handles (see the module docstring). ``types``: field → PostgreSQL type name."""
        table = self.table
        n = table.num_rows
        pieces: list[Any] = []  # large_binary arrays, concatenated row by row at the end
        layout: list[tuple[str, str]] = [("count", ">i2")]  # fixed-width fields since the last string
        values: list[Any] = [len(fields)]

        def close_layout() -> None:
            if layout:
                pieces.append(_fixed_rows(n, layout, values))
                layout.clear()
                values.clear()

        for i, name in enumerate(fields):
            column = table.column(name)
            column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
            kind, target = column.type, types.get(name)
            if pa.types.is_null(kind):
                layout.append((f"l{i}", ">i4"))
                values.append(-1)
                continue
            if pa.types.is_string(kind) or pa.types.is_binary(kind):
                if target not in (_TEXT_TYPES if pa.types.is_string(kind) else ("bytea",)):
                    return None
                lengths = pc.binary_length(column)
                if column.null_count:
                    empty = "" if pa.types.is_string(kind) else b""
                    lengths, column = pc.fill_null(lengths, -1), pc.fill_null(column, empty)
                layout.append((f"l{i}", ">i4"))
                values.append(lengths.to_numpy())
                close_layout()
                pieces.append(column.cast(pa.large_binary()))
                continue
            if pa.types.is_decimal128(kind):
                if target != "numeric":
                    return None
                close_layout()
                pieces.append(_numeric_fields(column))
                continue
            fixed = _fixed_width(column, target or "", self.maybe_minus_zero)
            if fixed is None:
                return None
            dtype, column = fixed
            width = np.dtype(dtype).itemsize
            if not column.null_count:
                layout += [(f"l{i}", ">i4"), (f"v{i}", dtype)]
                values += [width, column.to_numpy(zero_copy_only=False)]
                continue
            close_layout()  # a nullable field's rows differ in size: a piece of its own
            filled = pc.fill_null(column, False if dtype == "u1" else 0).to_numpy(zero_copy_only=False)
            field = _fixed_rows(n, [("l", ">i4"), ("v", dtype)], [width, filled])
            pieces.append(pc.if_else(column.is_valid(), field, pa.scalar(_NULL_FIELD, pa.large_binary())))
        close_layout()
        joined = len(pieces) > 1
        rows = pc.binary_join_element_wise(*pieces, pa.scalar(b"", pa.large_binary())) if joined else pieces[0]
        offsets = np.frombuffer(rows.buffers()[1], dtype=np.int64, count=n + 1, offset=rows.offset * 8)
        body = rows.buffers()[2][int(offsets[0]) : int(offsets[n])]
        return b"".join((_BINARY_HEADER, body, _BINARY_TRAILER))

    def csv(self, fields: Sequence[str], types: Mapping[str, str]) -> bytes | None:
        """The CSV rows of ``fields`` in that order, or ``None`` if a field's values could be stored
        differently from the ordinary path in its column. ``types``: field → PostgreSQL type name."""
        table = self.table
        for name in fields:
            column = table.column(name)
            kind = column.type
            target = types.get(name)
            if target is None:
                return None
            if pa.types.is_null(kind) or pa.types.is_string(kind) or pa.types.is_int64(kind):
                continue
            if pa.types.is_float64(kind):
                if target != "float8":
                    return None
                if self.maybe_minus_zero and _has_minus_zero(column):
                    return None
                continue
            if pa.types.is_boolean(kind) and target == "bool":
                continue
            if (str(kind), target) in _CSV_TYPED or (pa.types.is_decimal128(kind) and target == "numeric"):
                continue
            return None
        sink = pa.BufferOutputStream()
        options = pcsv.WriteOptions(include_header=False, batch_size=max(1, table.num_rows))
        pcsv.write_csv(table.select(list(fields)), sink, options)
        return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def read_json_lines(raws: Sequence[bytes | None]) -> JsonColumns | None:
    """``raws`` parsed into columns, or ``None`` when the batch is not a run of flat JSON objects
    that the parser reads exactly as orjson does.

    The values come raw and unchecked (``value_format`` is raw JSON), so this refuses whatever the
    converter would. The native parser refuses it itself. With Arrow's reader (the fallback), the
    reader rejects malformed JSON, and the two things it accepts that JSON forbids are caught here,
    invalid UTF-8 in strings and the literals ``NaN``/``Infinity``. A batch refused here is
    converted by the converter, which reports the bad record."""
    if pa is None or not raws or None in raws:
        return None
    if json_arrow.available():
        table = json_arrow.read_flat_objects(raws)  # type: ignore[arg-type]
        return None if table is None else JsonColumns(table, maybe_minus_zero=False)
    blob = b"\n".join(raws)  # type: ignore[arg-type]
    n = len(raws)
    # The scans below hold the GIL. Searching bytes for a two-byte needle visits every byte (about
    # 1 ns each here, a sixth of Arrow's whole parse), a single byte is found with memchr, and NumPy
    # counts the newlines six times faster than bytes.count.
    newlines = int(np.count_nonzero(np.frombuffer(blob, dtype=np.uint8) == 10))
    if newlines != n - 1 or b"\r" in blob:  # whitespace between tokens would split a value
        return None
    if b"\\" in blob and _SURROGATE_ESCAPE.search(blob):  # surrogate escapes: orjson and Arrow differ
        return None
    if not blob.isascii():  # Arrow does not validate the UTF-8 of strings
        try:
            blob.decode("utf-8")
        except UnicodeDecodeError:
            return None
    read_options = pj.ReadOptions(use_threads=False, block_size=len(blob) + 1)
    try:
        table = pj.read_json(pa.py_buffer(blob), read_options=read_options)
        stamps = [f.name for f in table.schema if pa.types.is_timestamp(f.type) or pa.types.is_date(f.type)]
        if stamps:  # Arrow infers timestamps from ISO strings; the ordinary path keeps the text
            schema = pa.schema([(name, pa.string()) for name in stamps])
            parse = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="infer")
            table = pj.read_json(pa.py_buffer(blob), read_options=read_options, parse_options=parse)
    except (pa.ArrowException, ValueError):  # mixed types in a field, duplicate keys, not objects, …
        return None
    if table.num_rows != n or not table.num_columns:
        return None
    for column in table.columns:  # NaN, Infinity: JSON has no such numbers, Arrow reads them anyway
        if pa.types.is_floating(column.type) and pc.all(pc.is_finite(column)).as_py() is False:
            return None
    return JsonColumns(table, _INTEGER_MINUS_ZERO.search(blob) is not None)


def typed_columns(table: Any, utc: bool) -> JsonColumns | None:
    """A table of typed columns (JSON with schemas, Avro) ready for :meth:`JsonColumns.copy_data`,
    or ``None`` if a column holds what the ordinary path would write differently: a Timestamp
    unless ``db.timezone`` is UTC (the ordinary path writes it in that zone), a float32 (written
    from its double text and rounded by the server), a type the COPY renderers do not take."""
    columns = []
    for column in table.columns:
        kind = column.type
        if pa.types.is_integer(kind):
            column = column.cast(pa.int64())
        elif pa.types.is_timestamp(kind):
            if not utc or str(kind) != "timestamp[ms, tz=UTC]":
                return None
        elif not (
            pa.types.is_null(kind)
            or pa.types.is_float64(kind)
            or pa.types.is_boolean(kind)
            or pa.types.is_string(kind)
            or pa.types.is_binary(kind)
            or pa.types.is_decimal128(kind)
            or str(kind) in ("date32[day]", "time32[ms]")
        ):
            return None
        columns.append(column)
    return JsonColumns(pa.Table.from_arrays(columns, names=table.column_names), maybe_minus_zero=False)


def keyed_columns(
    keys: JsonColumns, key_fields: Sequence[str], values: JsonColumns | None, live: Sequence[int] | None = None
) -> JsonColumns | None:
    """The columns of a table keyed by the record keys, as the ordinary path lays them out
    (``rows.py``): the ``key_fields`` of ``keys``, then every field of ``values`` but those; ``None``
    if a key field is missing or holds a null (the ordinary path reports it) or the row counts differ.

    ``live``: the records whose values ``values`` holds, in order (``None``: every record; ``values``
    ``None``: none); the others are tombstones applied as deletes, with null value fields, and the
    table ends with :data:`~.writer.DELETED_COLUMN`, true on them."""
    key_table = keys.table
    value_table = pa.Table.from_arrays([], names=[]) if values is None else values.table
    n = key_table.num_rows
    if (n if live is None else len(live)) != value_table.num_rows or any(k not in keys.fields for k in key_fields):
        return None
    key_columns = [key_table.column(k) for k in key_fields]
    if any(column.null_count for column in key_columns):
        return None
    rest = [f for f in value_table.column_names if f not in key_fields]
    value_columns = [value_table.column(f) for f in rest]
    if live is not None:
        if DELETED_COLUMN in rest or DELETED_COLUMN in key_fields:
            return None
        present = np.zeros(n, dtype=bool)
        present[list(live)] = True
        positions = pa.array(np.cumsum(present) - 1, mask=~present)  # each record's row in values, or null
        value_columns = [column.take(positions) for column in value_columns] + [pa.array(~present)]
        rest.append(DELETED_COLUMN)
    table = pa.Table.from_arrays(key_columns + value_columns, names=[*key_fields, *rest])
    return JsonColumns(table, keys.maybe_minus_zero or (values is not None and values.maybe_minus_zero))


def _fixed_rows(n: int, layout: list[tuple[str, str]], values: list[Any]) -> Any:
    """``n`` rows of the fixed-width fields ``layout`` (name, dtype) filled with ``values`` (a
    scalar or an array each), as a ``large_binary`` array sharing the structured array's memory."""
    rows = np.empty(n, dtype=np.dtype(layout))
    for (name, _), value in zip(layout, values, strict=True):
        rows[name] = value
    width = rows.dtype.itemsize
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int64)
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(rows)])


def _fixed_width(column: Any, target: str, maybe_minus_zero: bool) -> tuple[str, Any] | None:
    """A fixed-width column's network-order dtype for a ``target`` column, and its values in
    PostgreSQL's binary form; ``None`` if binary does not take the pair (see the module docstring)."""
    kind = str(column.type)
    temporal = _TEMPORAL.get((kind, target))
    if temporal is not None:
        storage, dtype, factor, shift = temporal
        return dtype, pc.add(pc.multiply(column.view(storage).cast(pa.int64()), factor), shift)
    fixed = _FIXED.get((kind, target))
    if fixed is None:
        return None
    if target in _INT_RANGE:
        low, high = _INT_RANGE[target]
        bounds = pc.min_max(column)
        if column.null_count < len(column) and not low <= bounds["min"].as_py() <= bounds["max"].as_py() <= high:
            return None  # out of range: the CSV path lets the server say so
    elif fixed == ">f8" and maybe_minus_zero and _has_minus_zero(column):
        return None
    return fixed, column


def _numeric_fields(column: Any) -> Any:
    """A decimal column as COPY binary ``numeric`` fields (length, then PostgreSQL's base-10000
    digits), as a ``large_binary`` array: by :func:`_short_numeric_fields` when the values are short
    enough (the usual money and quantity columns), else value by value."""
    fields = _short_numeric_fields(column)
    if fields is not None:
        return fields
    return pa.array([_NULL_FIELD if d is None else _numeric_field(d) for d in column.to_pylist()], pa.large_binary())


def _short_numeric_fields(column: Any) -> Any | None:
    """:func:`_numeric_field` of every value at once with NumPy, or ``None`` unless each unscaled
    value, its scale rounded up to whole base-10000 digits, fits 18 decimal digits (at most
    :data:`_NUMERIC_GROUPS` digits of 10000). Each field is written as a record of the widest layout
    whose bytes past the field's own length are dropped."""
    n, scale = len(column), column.type.scale
    if scale < 0 or not n:
        return None
    words = np.frombuffer(column.buffers()[1], dtype="<i8", count=2 * (column.offset + n)).reshape(-1, 2)
    low, high = words[column.offset :].T  # each value: 128 bits, little-endian
    valid = column.is_valid().to_numpy(zero_copy_only=False)
    unscaled = np.where(valid, low, 0)
    fractions = -(-scale // 4)  # base-10000 digits after the point
    limit = 10 ** (18 - (4 * fractions - scale))
    if not ((high == (low >> 63)) | ~valid).all() or not ((-limit < unscaled) & (unscaled < limit)).all():
        return None  # more than 64 bits, or too many digits once aligned
    aligned = np.abs(unscaled) * 10 ** (4 * fractions - scale)
    # The base-10000 digits, least significant first.
    groups = np.stack([aligned // 10_000**j % 10_000 for j in range(_NUMERIC_GROUPS)], axis=1)
    nonzero = groups != 0
    present = nonzero.any(axis=1)
    top = _NUMERIC_GROUPS - 1 - np.argmax(nonzero[:, ::-1], axis=1)
    count = np.where(present, top - np.argmax(nonzero, axis=1) + 1, 0)
    layout = np.dtype(_NUMERIC_LAYOUT)
    rows = np.zeros(n, dtype=layout)
    rows["length"] = np.where(valid, 8 + 2 * count, -1)
    rows["count"] = count
    rows["weight"] = np.where(present, top - fractions, 0)
    rows["sign"] = np.where(present & (unscaled < 0), 0x4000, 0)
    rows["scale"] = scale
    positions = np.clip(top[:, None] - np.arange(_NUMERIC_GROUPS), 0, _NUMERIC_GROUPS - 1)
    rows["digits"] = np.take_along_axis(groups, positions, axis=1)  # most significant first
    sizes = np.where(valid, 12 + 2 * count, 4)
    data = rows.view(np.uint8).reshape(n, layout.itemsize)[np.arange(layout.itemsize) < sizes[:, None]]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _numeric_field(value: decimal.Decimal) -> bytes:
    """One ``numeric`` in PostgreSQL's binary form: digit count, weight, sign, display scale, digits."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite: decimals from Arrow
    text = "".join(map(str, digits))
    scale = max(0, -exponent)
    if exponent >= 0:
        whole, fraction = text + "0" * exponent, ""
    else:
        whole, fraction = text[:exponent].lstrip("0"), text[exponent:].rjust(scale, "0")
    whole = whole.lstrip("0")
    whole = whole.rjust(-(-len(whole) // 4) * 4, "0")
    fraction = fraction.ljust(-(-len(fraction) // 4) * 4, "0")
    groups = [int(whole[i : i + 4]) for i in range(0, len(whole), 4)]
    groups += [int(fraction[i : i + 4]) for i in range(0, len(fraction), 4)]
    weight = len(whole) // 4 - 1
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight, sign = 0, 0
    body = struct.pack(f">hhHh{len(groups)}h", len(groups), weight, 0x4000 if sign else 0, scale, *groups)
    return struct.pack(">i", len(body)) + body


def _has_minus_zero(column: Any) -> bool:
    """Whether a double column holds -0.0, which may have been the integer ``-0``: orjson reads
    that as 0 (and the ordinary path writes ``0``), Arrow as -0.0 once the column is double."""
    bits = pa.scalar(_MINUS_ZERO_BITS, pa.int64())
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    return any(pc.any(pc.equal(chunk.view(pa.int64()), bits)).as_py() for chunk in chunks)
