"""Spark SQL expressions that serialize rows exactly as Connect's ``JsonConverter`` would.

The backfill builds the JSON schema of a table once in Python (with :mod:`sluice.converters.json`, the
same code the streaming connectors use), and the payload of every row in the JVM with Spark's
``to_json``: each column is first turned into what Connect writes for its schema, then the row
struct is written with nulls kept (Connect writes ``"field":null``) and wrapped in the
``{"schema":…,"payload":…}`` envelope when ``schemas.enable`` is on. Spark's JSON writer is the
same Jackson that Connect uses, so strings, numbers and base64 bytes come out byte-identical.

What Connect writes per logical type:

* ``Timestamp`` — epoch milliseconds (floor), ``Date`` — epoch days, ``Time`` — milliseconds of
  the day;
* ``Decimal`` — with ``decimal.format=BASE64`` the base64 of the unscaled value's minimal
  two's-complement bytes (``BigInteger.toByteArray``), with ``NUMERIC`` the ``BigDecimal`` text;
* ``bytes`` — base64.

This module only builds SQL text, so it is tested without Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from sluice.connectors.api import ConfigError, Schema, Type
from sluice.connectors.api.schema import Date, Decimal, Time, Timestamp

#: The largest precision whose unscaled value fits a BIGINT, which the BASE64 encoding needs.
MAX_BASE64_PRECISION = 18

_INT_SQL = {Type.INT8: "TINYINT", Type.INT16: "SMALLINT", Type.INT32: "INT", Type.INT64: "BIGINT"}


@dataclass(frozen=True)
class ColumnSpec:
    """A column to serialize: its name, Connect schema, and whether it is a zone-less timestamp."""

    name: str
    schema: Schema
    naive_timestamp: bool = False


def quote_identifier(name: str) -> str:
    """A column name as a Spark SQL identifier."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(text: str) -> str:
    """``text`` as a Spark SQL string literal (Spark's parser reads backslash escapes)."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def column_expression(column: ColumnSpec, *, decimal_format: str = "BASE64", db_timezone: str = "UTC") -> str:
    """The Spark SQL expression for what Connect writes for ``column``'s value."""
    c = quote_identifier(column.name)
    schema = column.schema
    name = schema.name
    if name == Timestamp.LOGICAL_NAME:
        if column.naive_timestamp and db_timezone.upper() not in ("UTC", "Z", "GMT"):
            return f"unix_millis(to_utc_timestamp({c}, {sql_string(db_timezone)}))"
        return f"unix_millis(CAST({c} AS TIMESTAMP))"
    if name == Date.LOGICAL_NAME:
        return f"unix_date(CAST({c} AS DATE))"
    if name == Time.LOGICAL_NAME:
        ts = f"CAST({c} AS TIMESTAMP)"
        return f"CAST(unix_millis({ts}) - unix_millis(date_trunc('DAY', {ts})) AS INT)"
    if name == Decimal.LOGICAL_NAME:
        return _decimal_expression(c, column, decimal_format)
    t = schema.type
    if t in _INT_SQL:
        return f"CAST({c} AS {_INT_SQL[t]})"
    if t is Type.FLOAT32:
        return f"CAST({c} AS FLOAT)"
    if t is Type.FLOAT64:
        return f"CAST({c} AS DOUBLE)"
    if t is Type.BOOLEAN:
        return f"CAST({c} AS BOOLEAN)"
    if t is Type.STRING:
        return f"CAST({c} AS STRING)"
    if t is Type.BYTES:
        return f"CAST({c} AS BINARY)"  # to_json writes binary as base64, as Connect does
    if t is Type.ARRAY and schema.value_schema is not None and schema.value_schema.name is None:
        return c  # arrays of plain primitives serialize the same way
    raise ConfigError(
        f"column {column.name!r}: Connect type {schema.name or t.value} is not supported by the Spark backfill",
        key="table",
    )


def _decimal_expression(c: str, column: ColumnSpec, decimal_format: str) -> str:
    params = column.schema.parameters or {}
    scale = int(params.get("scale", "0"))
    precision = int(params.get("connect.decimal.precision", "38"))
    if decimal_format.upper() == "NUMERIC":
        return f"CAST({c} AS DECIMAL({min(precision, 38)},{scale}))"
    if precision > MAX_BASE64_PRECISION:
        raise ConfigError(
            f"column {column.name!r}: NUMERIC({precision},{scale}) is too wide for the in-JVM BASE64 decimal "
            f"encoding (at most {MAX_BASE64_PRECISION} digits); set value.converter.decimal.format=NUMERIC",
            key="value.converter.decimal.format",
        )
    unscaled = f"CAST(CAST({c} AS DECIMAL({precision},{scale})) * {10**scale} AS BIGINT)"
    # BigInteger.toByteArray: the fewest big-endian two's-complement bytes that keep the sign bit.
    cases = " ".join(
        f"WHEN u BETWEEN {-(2 ** (8 * n - 1))} AND {2 ** (8 * n - 1) - 1} THEN {n}" for n in range(1, 8)
    )
    width = f"(CASE {cases} ELSE 8 END)"
    body = f"base64(substring(unhex(lpad(hex(u), 16, '0')), 9 - {width}, {width}))"
    # A one-element transform binds the unscaled value to ``u`` so it is computed once per row.
    # (Writing it out at each use and relying on subexpression elimination cost 15 % more CPU.)
    return f"transform(array({unscaled}), u -> {body})[0]"


#: Connect schema types whose JSON is the text ``CAST(… AS STRING)`` gives (no quoting, escaping or
#: exponent): integers and booleans, and the logical types written as integers.
_PLAIN_TYPES = frozenset(_INT_SQL) | {Type.BOOLEAN}
_PLAIN_LOGICAL = frozenset({Timestamp.LOGICAL_NAME, Date.LOGICAL_NAME, Time.LOGICAL_NAME})


def _is_plain(column: ColumnSpec) -> bool:
    name = column.schema.name
    return name in _PLAIN_LOGICAL if name is not None else column.schema.type in _PLAIN_TYPES


def payload_expression(
    columns: Sequence[ColumnSpec], *, decimal_format: str = "BASE64", db_timezone: str = "UTC"
) -> str:
    """The row's JSON object, nulls written, in the columns' order: ``to_json`` of the row struct, or
    for numbers and booleans only, the concatenated text (what Connect writes is the same)."""
    if not columns:
        return "'{}'"
    if all(_is_plain(c) for c in columns):
        # Numbers and booleans only (most keys): concatenated text, without a JSON writer per row.
        parts = []
        for i, column in enumerate(columns):
            head = ("{" if i == 0 else ",") + orjson.dumps(column.name).decode() + ":"
            value = column_expression(column, decimal_format=decimal_format, db_timezone=db_timezone)
            parts += [sql_string(head), f"coalesce(CAST({value} AS STRING), 'null')"]
        return f"concat({', '.join(parts)}, '}}')"
    return f"to_json(named_struct({_named(columns, decimal_format, db_timezone)}), map('ignoreNullFields', 'false'))"


def _named(columns: Sequence[ColumnSpec], decimal_format: str, db_timezone: str) -> str:
    return ", ".join(
        f"{sql_string(c.name)}, {column_expression(c, decimal_format=decimal_format, db_timezone=db_timezone)}"
        for c in columns
    )


def record_expression(
    columns: Sequence[ColumnSpec],
    schema_json: bytes | None,
    *,
    decimal_format: str = "BASE64",
    db_timezone: str = "UTC",
) -> str:
    """The record's bytes: the payload, wrapped in the schema envelope when ``schema_json`` is given."""
    payload = payload_expression(columns, decimal_format=decimal_format, db_timezone=db_timezone)
    if schema_json is None:
        return f"CAST({payload} AS BINARY)"
    head = sql_string('{"schema":' + schema_json.decode() + ',"payload":')
    return f"CAST(concat({head}, {payload}, '}}') AS BINARY)"
