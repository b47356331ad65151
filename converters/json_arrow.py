"""Batches of schemaless JSON values (flat objects) read into Arrow tables by Sluice's native parser.

Sinks that write columns (the JDBC sink's COPY path, the S3 sink's Parquet) take a batch of
consumed JSON values and need it as Arrow columns. pyarrow's JSON reader does that for about
0.6 µs per 130-byte record on this project's machines; the native parser (``sluice_native``,
Rust, built from ``native/`` by ``make setup``) takes about a quarter of that and releases the
GIL while it works. It returns the Arrow buffers themselves, which pyarrow wraps without copying.

It reads a batch only if every value is a JSON object whose members are strings, numbers,
booleans or nulls, and it reads them exactly as orjson (the JsonConverter) does. It refuses,
returning ``None``, anything strict JSON forbids (invalid UTF-8, lone surrogate escapes, control
characters in strings, ``NaN``, numbers that overflow a double, trailing data) and anything it
would not read the way orjson does or could not type as one column: integers above int64 that
fit 64 bits unsigned, duplicate keys, nested values, members that mix types. Integers and doubles
in one member make a double column. The integer ``-0`` is 0 and integers beyond 64 bits are
doubles, as orjson reads them.

Columns come in the order their keys first appear; a value without a key holds null there. A
member that is null in every value is a column of Arrow's ``null`` type.

JSON with schemas (``schemas.enable=true``) is read the same way by :func:`read_envelopes`: the
payloads become the columns, and each distinct ``schema`` text comes back once for the caller to
check (:mod:`sluice.converters.connect_arrow` types the columns as that schema says).
"""

from __future__ import annotations

from typing import Any, NamedTuple

try:
    import numpy as np
    import pyarrow as pa
except ImportError:  # pragma: no cover - every extra that writes columns brings pyarrow
    pa = None
try:
    import sluice_native
except ImportError:  # pragma: no cover - tests hide the module to exercise the callers' fallbacks
    sluice_native = None

_TYPES = {"int64": "int64", "double": "float64", "bool": "bool_", "string": "string"}


def available() -> bool:
    """Whether the native parser is installed (``make setup`` builds it; callers fall back without it)."""
    return sluice_native is not None and pa is not None


def read_flat_objects(raws: list[bytes]) -> Any | None:
    """``raws`` (one JSON value each) as an Arrow table, or ``None`` when the batch is not a run of
    flat objects read exactly as orjson reads them (see the module docstring), when it has no
    member at all, or when the native parser is not installed."""
    if not available() or not raws:
        return None
    parsed = sluice_native.parse_json_objects(raws if type(raws) is list else list(raws))
    if parsed is None:
        return None
    rows, columns = parsed
    return _table(rows, columns) if columns else None


def _table(rows: int, columns: list[Any]) -> Any:
    """The native parser's column buffers wrapped as an Arrow table (no copy)."""
    arrays = []
    for _, kind, validity, values, offsets in columns:
        if kind == "null":
            arrays.append(pa.nulls(rows))
            continue
        valid = None if validity is None else pa.py_buffer(validity)
        data = pa.py_buffer(values)
        buffers = [valid, data] if offsets is None else [valid, pa.py_buffer(offsets), data]
        arrays.append(pa.Array.from_buffers(getattr(pa, _TYPES[kind])(), rows, buffers))
    return pa.Table.from_arrays(arrays, names=[column[0] for column in columns])


class Envelopes(NamedTuple):
    """A batch of JsonConverter envelopes read by :func:`read_envelopes`."""

    #: The payloads' columns, as :func:`read_flat_objects` gives them (``None``: no member at all).
    table: Any
    #: The distinct texts of the ``schema`` members, in the order first seen.
    schemas: list[bytes]
    #: Per row, the index of its schema in ``schemas`` (a NumPy ``uint32`` array).
    schema_of_row: Any


def read_envelopes(raws: list[bytes]) -> Envelopes | None:
    """``raws`` (JsonConverter envelopes, ``schemas.enable=true``) as the Arrow table of their
    payloads and their distinct schema texts, or ``None`` when a value is not an envelope of a
    flat payload read exactly as orjson reads it, or when the native parser is not installed.

    Each distinct schema text comes once, so a caller parses and checks it once per batch."""
    if not available() or not raws:
        return None
    parsed = sluice_native.parse_json_envelopes(raws if type(raws) is list else list(raws))
    if parsed is None:
        return None
    rows, columns, schemas, schema_of_row = parsed
    table = _table(rows, columns) if columns else None
    return Envelopes(table, schemas, np.frombuffer(schema_of_row, dtype="<u4"))
