"""The native encoder of change events: pgoutput row changes → the JSON bytes of their records.

When the runtime offers to produce the task's own bytes and its key and value converters both
write Connect's JSON with base64 decimals (:func:`serializes_for`, from the wire formats in
:attr:`~connectors.api.SourceTaskContext.serialization`), the task serializes row changes itself
with ``sluice_native.CdcEncoder`` (``native/src/cdc.rs``) instead of building Connect values that
the converters then walk: decoding and serializing a change costs a fraction of the Python path's.
:func:`encoder_for` describes a table to it — each column's conversion, chosen by the very
function the Python decoder would run, and the constant parts of the envelope, rendered by the
JSON mapping functions of :mod:`converters` — or returns ``None`` for a table with a column it does not cover (arrays,
intervals, money, variable-scale numerics, float4), whose changes then take the
Python path. A message the encoder cannot take (an unchanged TOASTed value, a value in an unusual
shape) also takes the Python path, message by message; the tests compare both byte for byte.
"""

from __future__ import annotations

import logging
from typing import Any

from sluice.connectors.api import Schema, Serialization
from sluice.connectors.cdc.envelope import json_frames, source_head, writes_native_json
from sluice.connectors.source.postgres_cdc import text_values as tv
from sluice.connectors.source.postgres_cdc import types as pgtypes
from sluice.connectors.source.postgres_cdc.source_block import CONNECTOR, VERSION
from sluice.connectors.source.postgres_cdc.tables import Table
from sluice.converters.json_data import JsonData
from sluice.converters.json_text import dumps

log = logging.getLogger(__name__)

try:
    from sluice_native import CdcEncoder
except ImportError:  # built by `make setup`; without it every change takes the Python path
    CdcEncoder = None


def available() -> bool:
    return CdcEncoder is not None


def serializes_for(serialization: Serialization | None) -> bool:
    """Whether the encoder is built and writes what the runtime's converters would: Connect's JSON,
    with or without the schema envelope, decimals as base64, for keys and values."""
    return CdcEncoder is not None and writes_native_json(serialization)


#: Conversions the encoder does as the Python path does them, by the Python path's function.
_KINDS: dict[Any, str] = {
    int: "int",
    tv.boolean: "bool",
    tv.text: "str",
    tv.timestamp_micros: "micros",
    tv.timestamp_millis: "millis",
    tv.date_days: "date",
    tv.time_micros: "time_micros",
    tv.time_millis: "time_millis",
    # time.precision.mode=connect: Connect's Date, Time and Timestamp, written as the same numbers.
    tv.date_parts: "date",
    tv.time_object: "time_of_day_millis",
    tv.timestamp_connect: "millis",
    tv.bytea: "bytea",
}


def column_kind(column: Any) -> str | None:
    """The encoder's name for the column's conversion, from the function the Python path runs."""
    ctype = column.ctype
    fn = ctype.fn
    kind = _KINDS.get(fn)
    if kind is not None:
        return kind
    if fn is tv.float_text and ctype.schema.type.name == "FLOAT64":
        return "f64"
    if fn is tv.numeric:
        scale = int((ctype.schema.parameters or {}).get("scale", "-1"))
        return f"decimal:{scale}" if 0 <= scale <= 38 else None
    if ctype.schema.name == "io.debezium.time.ZonedTimestamp" and column.type_oid == pgtypes.TIMESTAMPTZ:
        return f"zoned:{pgtypes.time_precision(column.typmod)}"
    return None


def encoder_for(table: Table, *, prefix: str, database: str, tombstones: bool, serialization: Serialization) -> Any:
    """A ``CdcEncoder`` for ``table``'s changes, written in ``serialization``'s wire formats (which
    :func:`serializes_for` accepted), or ``None`` when a column needs the Python path."""
    plain = JsonData({"schemas.enable": False})  # renders a required column's fallback value, as the Python path writes it
    columns = []
    for column, keep in zip(table.columns, table.included):
        kind = column_kind(column)
        if kind is None:
            if keep:
                log.info(
                    "Table %s: changes are built in Python (no native encoding for column %s, type oid %d)",
                    table.qualified,
                    column.name,
                    column.type_oid,
                )
                return None
            kind = "str"  # skipped, never converted
        zero = b""
        if keep and not column.optional:
            probe = Schema.struct([("v", column.ctype.schema)])
            zero = plain.value_json(probe, {"v": column.ctype.fallback}) or b""
            zero = zero[len(b'{"v":') : -1]
        columns.append((kind, dumps(column.name) + b":", keep, column.optional, zero))
    names = [c.name for c in table.columns]
    if any(k not in names for k in table.key):
        return None
    # The event key's columns (message.key.columns' choice or the primary key), by index.
    key = [names.index(k) for k in table.key]
    if any(not table.included[i] for i in key) or any(columns[i][0] == "f64" for i in key):
        return None  # a key read differently from the value, or compared as doubles: the Python path
    key_head, key_tail, value_head, value_tail = json_frames(serialization, table.key_schema, table.envelope_schema)
    source_db = b',"snapshot":"false","db":' + dumps(database) + b',"sequence":"[\\"'
    source_table = b',"schema":' + dumps(table.schema_name) + b',"table":' + dumps(table.name) + b',"txId":'
    source = source_head(VERSION, CONNECTOR, prefix)
    envelope = (key_head, key_tail, value_head, value_tail, source, source_db, source_table, dumps(database))
    encoder = CdcEncoder(columns, key, envelope, tombstones)
    log.info("Table %s: changes are serialized natively", table.qualified)
    return encoder
