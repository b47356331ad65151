"""Schemaless JSON values straight to PostgreSQL ``COPY … (FORMAT csv)`` data, with no Python object per record.

The ordinary path decodes every value into a dict (orjson), splits the dicts into columns and
renders those as COPY text: three passes that each build or visit Python objects per record,
about two thirds of the sink's Python time on the benchmark's flat 8-field rows. Here the
consumed bytes are joined with newlines (JSON Lines), parsed by Arrow's C++ JSON reader into
columns and written back out by Arrow's CSV writer, all without touching the interpreter per
record.

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

Anything else returns ``None`` and the caller takes the ordinary path for the batch: tombstones,
nested values, values that mix types in one field, fields the table lacks, JSON that Arrow reads
differently from orjson (raw newlines between tokens, duplicate keys, surrogate escapes, the
integer ``-0``), or strings Arrow would turn into timestamps (read again as strings).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

try:  # imported up front: pyarrow.compute takes a noticeable time to import, not to be paid mid-stream
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv
    import pyarrow.json as pj
except ImportError:  # pragma: no cover - pyarrow comes with the jdbc extra; without it every batch goes the ordinary way
    pa = None

_MINUS_ZERO_BITS = -(2**63)  # the bits of -0.0 read as an int64
# The JSON integer -0 (not -0.5, -0e1 or -0.0); also matches inside strings, which costs only a closer look.
_INTEGER_MINUS_ZERO = re.compile(rb"-0(?![.eE0-9])")


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
            return None
        sink = pa.BufferOutputStream()
        options = pcsv.WriteOptions(include_header=False, batch_size=max(1, table.num_rows))
        pcsv.write_csv(table.select(list(fields)), sink, options)
        return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def read_json_lines(raws: Sequence[bytes | None]) -> JsonColumns | None:
    """``raws`` (each one JSON document, as the converter's ``check_batch`` made sure) parsed into
    columns, or ``None`` when the batch is not a run of flat JSON objects Arrow reads exactly as orjson does."""
    if pa is None or not raws or None in raws:
        return None
    blob = b"\n".join(raws)  # type: ignore[arg-type]
    n = len(raws)
    if blob.count(b"\n") != n - 1 or b"\r" in blob:  # whitespace between tokens would split a value
        return None
    if b"\\u" in blob and (b"\\ud" in blob or b"\\uD" in blob):  # surrogate escapes: orjson and Arrow differ
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
    return JsonColumns(table, b"-0" in blob and _INTEGER_MINUS_ZERO.search(blob) is not None)


def _has_minus_zero(column: Any) -> bool:
    """Whether a double column holds -0.0, which may have been the integer ``-0``: orjson reads
    that as 0 (and the ordinary path writes ``0``), Arrow as -0.0 once the column is double."""
    bits = pa.scalar(_MINUS_ZERO_BITS, pa.int64())
    return any(pc.any(pc.equal(chunk.view(pa.int64()), bits)).as_py() for chunk in column.chunks)
