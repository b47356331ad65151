"""The native encoder of change events: pgoutput row changes → the JSON bytes of their records.

When the runtime's key and value converters are both :class:`~converters.json.JsonConverter` s
writing decimals as base64 (Connect's default), the task serializes row changes itself with
``sluice_native.CdcEncoder`` (``native/src/cdc.rs``) instead of building Connect values that the
converters then walk: decoding and serializing a change costs a fraction of the Python path's.
:func:`encoder_for` describes a table to it — each column's conversion, chosen by the very
function the Python decoder would run, and the constant parts of the envelope, rendered by the
converters themselves — or returns ``None`` for a table with a column it does not cover (arrays,
intervals, money, variable-scale numerics, float4, ``connect``-mode dates and times), whose changes then take the
Python path. A message the encoder cannot take (an unchanged TOASTed value, a value in an unusual
shape) also takes the Python path, message by message; the tests compare both byte for byte.
"""

from __future__ import annotations

import logging
from typing import Any

from connectors.api import Schema
from connectors.source.postgres_cdc import types as pgtypes
from connectors.source.postgres_cdc.tables import Table

log = logging.getLogger(__name__)

try:
    from sluice_native import CdcEncoder
except ImportError:  # built by `make setup`; without it every change takes the Python path
    CdcEncoder = None


def available() -> bool:
    return CdcEncoder is not None


def converters_supported(key_converter: Any, value_converter: Any) -> bool:
    """Whether the encoder writes what these converters would: JsonConverters with base64 decimals."""
    from converters.json import JsonConverter

    return (
        CdcEncoder is not None
        and type(key_converter) is JsonConverter
        and type(value_converter) is JsonConverter
        and key_converter.config.decimal_format == "BASE64"
        and value_converter.config.decimal_format == "BASE64"
    )


#: Conversions the encoder does as the Python path does them, by the Python path's function.
_KINDS: dict[Any, str] = {
    int: "int",
    pgtypes._bool: "bool",
    pgtypes._text: "str",
    pgtypes._timestamp_micros: "micros",
    pgtypes._timestamp_millis: "millis",
    pgtypes._date_days: "date",
    pgtypes._time_micros: "time_micros",
    pgtypes._time_millis: "time_millis",
    pgtypes._bytea: "bytea",
}


def column_kind(column: Any) -> str | None:
    """The encoder's name for the column's conversion, from the function the Python path runs."""
    ctype = column.ctype
    fn = ctype.fn
    kind = _KINDS.get(fn)
    if kind is not None:
        return kind
    if fn is pgtypes._float_text and ctype.schema.type.name == "FLOAT64":
        return "f64"
    if fn is pgtypes._decimal:
        scale = int((ctype.schema.parameters or {}).get("scale", "-1"))
        return f"decimal:{scale}" if 0 <= scale <= 38 else None
    if ctype.schema.name == "io.debezium.time.ZonedTimestamp" and column.type_oid == pgtypes.TIMESTAMPTZ:
        return f"zoned:{pgtypes.time_precision(column.typmod)}"
    return None


def encoder_for(
    table: Table, *, prefix: str, database: str, tombstones: bool, key_converter: Any, value_converter: Any
) -> Any:
    """A ``CdcEncoder`` for ``table``'s changes, or ``None`` when a column needs the Python path."""
    from converters.json import JsonConverter
    from converters.json_text import _dumps

    plain = JsonConverter()
    plain.configure({"schemas.enable": False})
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
            zero = plain.from_connect_data("", probe, {"v": column.ctype.fallback}) or b""
            zero = zero[len(b'{"v":') : -1]
        columns.append((kind, _dumps(column.name) + b":", keep, column.optional, zero))
    names = [c.name for c in table.columns]
    if any(k not in names for k in table.primary_key):
        return None
    key = [names.index(k) for k in table.primary_key]
    if any(not table.included[i] for i in key) or any(columns[i][0] == "f64" for i in key):
        return None  # a key read differently from the value, or compared as doubles: the Python path
    key_head = key_tail = value_head = value_tail = b""
    if key_converter.config.schemas_enable and table.key_schema is not None:
        key_head, key_tail = b'{"schema":' + key_converter.as_json_schema(table.key_schema) + b',"payload":', b"}"
    if value_converter.config.schemas_enable:
        value_head, value_tail = (
            b'{"schema":' + value_converter.as_json_schema(table.envelope_schema) + b',"payload":',
            b"}",
        )
    from connectors.source.postgres_cdc.decoder import CONNECTOR, VERSION

    source_head = (
        b',"source":{"version":'
        + _dumps(VERSION)
        + b',"connector":'
        + _dumps(CONNECTOR)
        + b',"name":'
        + _dumps(prefix)
        + b',"ts_ms":'
    )
    source_db = b',"snapshot":"false","db":' + _dumps(database) + b',"sequence":"[\\"'
    source_table = b',"schema":' + _dumps(table.schema_name) + b',"table":' + _dumps(table.name) + b',"txId":'
    envelope = (key_head, key_tail, value_head, value_tail, source_head, source_db, source_table, _dumps(database))
    encoder = CdcEncoder(columns, key, envelope, tombstones)
    log.info("Table %s: changes are serialized natively", table.qualified)
    return encoder
