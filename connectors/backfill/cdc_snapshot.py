"""The SQL that turns a table's rows into the records a PostgreSQL CDC connector's snapshot writes.

A backfill that hands off to the CDC connector (``target.cdc``) must write what that connector's
own initial snapshot would: Debezium read events (``op: r``) keyed by the connector's key struct,
with its schema names, ``source`` block and type conversions, serialized by its converters. The
table is described with the CDC source's own code (:func:`sluice.connectors.source.postgres_cdc.catalog.load_table`
under the connector's config: the same column list, key, schemas, topic), and the constant parts
of each record (the schemas, the envelope around ``after``, the ``source`` block) are rendered once
in Python by the converter the connector would use. What varies per row is built in two steps:

1. PostgreSQL reads each column into an exact, Spark-friendly shape (:func:`read_sql`): integers,
   booleans, floats, text and bytea as they are; temporal types as the epoch number Debezium
   writes (``EXTRACT(EPOCH …)`` is exact numeric arithmetic since PostgreSQL 14) or, for
   ``timestamptz``/``timetz``, as Debezium's UTC string; types the CDC source writes as their text
   through their output function; arrays as ``text[]`` of the converted elements.
2. Spark turns that into the JSON the converter writes (:func:`struct_json`): ``to_json`` of the row
   struct (Jackson, as Connect's converter) with decimals as base64 of their two's-complement
   unscaled value and floats in their shortest form (see :func:`_shortest`), all in the JVM.

The result is byte-identical to the connector's except where noted in ``docs/backfill.md``
(Limits). This module only builds text, so it is tested without Spark or a database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from sluice.connectors.api import ConfigError, Schema, Type
from sluice.connectors.api.schema import Date, Decimal, Time, Timestamp
from sluice.connectors.backfill.connect_json import MAX_BASE64_PRECISION, quote_identifier, sql_string
from sluice.connectors.source.postgres_cdc import types as pg
from sluice.connectors.source.postgres_cdc.tables import Column, Table

#: The widest decimal Spark holds (``DECIMAL(38, s)``).
MAX_SPARK_PRECISION = 38


@dataclass(frozen=True)
class Conversion:
    """How one value travels: PostgreSQL reads ``pg_sql`` (``{c}`` the value), Spark reads it as
    ``spark_type`` and writes the JSON value ``json_sql`` (``{x}`` the value Spark read)."""

    pg_sql: str
    spark_type: str
    json_sql: str = "{x}"
    null_safe: bool = True  # pg_sql is NULL for a NULL value (else it is wrapped in a CASE)

    def pg(self, c: str) -> str:
        sql = self.pg_sql.format(c=c)
        return sql if self.null_safe else f"CASE WHEN {c} IS NULL THEN NULL ELSE {sql} END"

    def json(self, x: str) -> str:
        return self.json_sql.format(x=x)


def _quote_pg(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _epoch(c: str, factor: int, cast: str = "int8") -> str:
    # floor: Debezium truncates to the unit towards the past (Python's // in the CDC source).
    return f"floor(EXTRACT(EPOCH FROM {c}) * {factor})::{cast}"


def _output_text() -> Conversion:
    """The value's text as the type's output function writes it (what pgoutput and COPY send)."""
    return Conversion("format('%s', {c})", "STRING", null_safe=False)


#: Marks a JSON string that is really a number (a Spark SQL literal of U+0001 U+0002): :func:`struct_json`
#: drops the mark and the quotes. A text value could only collide by being these two control
#: characters followed by nothing but a number.
NUMBER_MARK = "\\u0001\\u0002"
#: The marked numbers in ``to_json``'s output, which escapes the two characters (a Spark SQL literal).
_MARKED_NUMBER = r"""'"\\\\u0001\\\\u0002(-?[0-9][0-9.E-]*)"'"""


def _shortest(helper: str) -> str:
    """A float's JSON as the connector writes it: the shortest decimal that reads back as the value,
    in Java's layout (``1.0E7``). JDK 17's ``Double.toString`` (what Jackson in Spark uses) sometimes
    prints more digits; JDK 19+ and Sluice's converter print the shortest, as Jackson's own
    Schubfach port (``com.fasterxml.jackson.core.io.schubfach``) does. Non-finite values are strings."""
    method = f"reflect('com.fasterxml.jackson.core.io.schubfach.{helper}', 'toString', {{x}})"
    return (
        "(CASE WHEN {x} IS NULL THEN NULL WHEN isnan({x}) THEN 'NaN' WHEN {x} = double('Infinity') THEN 'Infinity' "
        f"WHEN {{x}} = double('-Infinity') THEN '-Infinity' ELSE concat('{NUMBER_MARK}', {method}) END)"
    )


def _zoned_timestamp(digits: int) -> Conversion:
    fraction = f'.FF{digits}' if digits else ""
    return Conversion(f"to_char({{c}} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS{fraction}\"Z\"')", "STRING")


def _decimal_json(schema: Schema, decimal_format: str, column: str) -> str:
    """Spark SQL of Connect's JSON for a Decimal ``{x}`` (read as ``DECIMAL(38, scale)``)."""
    params = schema.parameters or {}
    scale = int(params.get(Decimal.SCALE_FIELD, "0"))
    precision = int(params.get("connect.decimal.precision", str(MAX_SPARK_PRECISION)))
    if precision > MAX_SPARK_PRECISION or scale > MAX_SPARK_PRECISION or scale < 0:
        raise ConfigError(
            f"column {column!r}: NUMERIC({precision},{scale}) does not fit Spark's DECIMAL(38); the CDC connector's "
            "decimal.handling.mode=precise cannot be backfilled for it (string or double can)",
            key="target.cdc.config.decimal.handling.mode",
        )
    typed = f"CAST({{x}} AS DECIMAL({precision},{scale}))"
    if decimal_format == "NUMERIC":
        return typed
    if precision <= MAX_BASE64_PRECISION:
        unscaled = f"CAST({typed} * {10**scale} AS BIGINT)"
        return f"transform(array({unscaled}), u -> {_base64_of_bigint('u')})[0]"
    # Wider than a BIGINT: the unscaled digits as DECIMAL(38,0), by dropping the point of the plain text.
    unscaled = f"CAST(replace(CAST({typed} AS STRING), '.', '') AS DECIMAL(38,0))"
    return base64_of_unscaled(unscaled)


def _base64_of_bigint(u: str) -> str:
    """BigInteger.toByteArray of a BIGINT ``u``, base64: the fewest bytes that keep the sign bit."""
    cases = " ".join(f"WHEN {u} BETWEEN {-(2 ** (8 * n - 1))} AND {2 ** (8 * n - 1) - 1} THEN {n}" for n in range(1, 8))
    width = f"(CASE {cases} ELSE 8 END)"
    return f"base64(substring(unhex(lpad(hex({u}), 16, '0')), 9 - {width}, {width}))"


_TWO_64 = 2**64
_TWO_32 = 2**32


def base64_of_unscaled(unscaled: str) -> str:
    """BigInteger.toByteArray of a ``DECIMAL(38,0)`` value, base64 (16 bytes of two's complement at
    most: the high 64 bits as a BIGINT, the low 64 as two unsigned 32-bit halves)."""
    low = f"pmod(u, {_TWO_64})"
    # floor(u / 2^64): ``div`` truncates towards zero (and u - low could leave DECIMAL(38)).
    high = f"(CAST(u div {_TWO_64} AS BIGINT) - CASE WHEN u < 0 AND {low} <> 0 THEN 1 ELSE 0 END)"
    hex32 = (
        f"lpad(hex({high}), 16, '0'), lpad(hex(CAST({low} div {_TWO_32} AS BIGINT)), 8, '0'), "
        f"lpad(hex(CAST(pmod({low}, {_TWO_32}) AS BIGINT)), 8, '0')"
    )
    cases = " ".join(f"WHEN u BETWEEN {-(2 ** (8 * n - 1))} AND {2 ** (8 * n - 1) - 1} THEN {n}" for n in range(1, 16))
    width = f"(CASE {cases} ELSE 16 END)"
    body = f"base64(substring(unhex(concat({hex32})), 17 - {width}, {width}))"
    return f"transform(array({unscaled}), u -> {body})[0]"


#: Debezium's MicroDuration, as the CDC source computes it: months of 30.4375 days (PostgreSQL's own
#: epoch of an interval counts 30), summed in double precision in the same order, then truncated.
_MICRO_DURATION = (
    "trunc((((((extract(year FROM {c}) * 12 + extract(month FROM {c}))::float8 * 30.4375"
    " + extract(day FROM {c})::float8) * 24 + extract(hour FROM {c})::float8) * 60"
    " + extract(minute FROM {c})::float8) * 60 + extract(second FROM {c})::float8) * 1e6)::int8"
)


#: Debezium's Bits: the bit string as a little-endian number in as few bytes as it needs (none for
#: zero): bytes of 8 bits from the right end, high-order zero bytes dropped.
_BITS = (
    "(SELECT decode(regexp_replace(string_agg(lpad(to_hex(substring(p.b FROM k * 8 + 1 FOR 8)::bit(8)::int), 2, '0'),"
    " '' ORDER BY k DESC), '(00)+$', ''), 'hex') FROM (SELECT lpad({c}::text, (length({c}) + 7) / 8 * 8, '0')::varbit"
    " AS b) p, generate_series(0, greatest((length({c}) + 7) / 8 - 1, 0)) k)"
)


def conversion(oid: int, typmod: int, schema: Schema, *, decimal_format: str, column: str) -> Conversion:  # noqa: C901 - one branch per Postgres type
    """The conversion of a (non-array) value the CDC source maps to ``schema``.

    Chosen from the schema the CDC source gave the column (so every ``*.handling.mode`` the
    connector applied is followed) and, where the schema alone does not say, the type's OID."""
    name = schema.name
    if name == Decimal.LOGICAL_NAME:
        source = "{c}::numeric::text" if oid == pg.MONEY else "NULLIF({c}, 'NaN')::text"  # NaN: null, as the CDC source
        return Conversion(source, "STRING", _decimal_json(schema, decimal_format, column))
    if name == "io.debezium.data.VariableScaleDecimal":
        # "<scale>:<unscaled>": Debezium's {scale, value} of numeric's own digits (NaN is null).
        pair = "CASE WHEN {c} = 'NaN' THEN NULL ELSE scale({c}) || ':' || trunc({c} * power(10::numeric, scale({c}))) END"
        unscaled = "CAST(split({x}, ':')[1] AS DECIMAL(38,0))"
        value = base64_of_unscaled(unscaled)
        return Conversion(pair, "STRING", f"named_struct('scale', CAST(split({{x}}, ':')[0] AS INT), 'value', {value})")
    if name in ("io.debezium.time.Date", Date.LOGICAL_NAME):
        return Conversion("({c} - DATE '1970-01-01')", "INT")
    if name == "io.debezium.time.Time":
        return Conversion(_epoch("{c}", 1000, "int4"), "INT")
    if name == "io.debezium.time.MicroTime":
        return Conversion(_epoch("{c}", 1_000_000), "BIGINT")
    if name == Time.LOGICAL_NAME:
        return Conversion(f"({_epoch('{c}', 1000)} % 86400000)::int4", "INT")
    if name in ("io.debezium.time.Timestamp", Timestamp.LOGICAL_NAME):
        return Conversion(_epoch("{c}", 1000), "BIGINT")
    if name == "io.debezium.time.MicroTimestamp":
        return Conversion(_epoch("{c}", 1_000_000), "BIGINT")
    if name == "io.debezium.time.ZonedTimestamp":
        return _zoned_timestamp(pg.time_precision(typmod))
    if name == "io.debezium.time.ZonedTime":
        return Conversion("regexp_replace(({c} AT TIME ZONE 'UTC')::text, '\\+00$', 'Z')", "STRING")
    if name == "io.debezium.time.MicroDuration":
        return Conversion(_MICRO_DURATION, "BIGINT")
    t = schema.type
    if t is Type.INT16:
        return Conversion("{c}::int2", "SMALLINT")
    if t is Type.INT32:
        return Conversion("{c}::int4", "INT")
    if t is Type.INT64:
        return Conversion("{c}::int8", "BIGINT")
    if t is Type.BOOLEAN:
        return Conversion("{c}", "BOOLEAN")
    if t is Type.FLOAT32:
        return Conversion("{c}::float4", "FLOAT", _shortest("FloatToDecimal"))
    if t is Type.FLOAT64:
        return Conversion("{c}::numeric::float8" if oid == pg.MONEY else "{c}::float8", "DOUBLE", _shortest("DoubleToDecimal"))
    if t is Type.BYTES and name is None:
        return Conversion("{c}", "BINARY")
    if name == "io.debezium.data.Bits":
        return Conversion(_BITS, "BINARY")
    if t is Type.STRING:
        if oid == pg.MONEY:  # decimal.handling.mode=string: the amount without currency formatting
            return Conversion("{c}::numeric::text", "STRING")
        if oid in (pg.TEXT, pg.VARCHAR):
            return Conversion("{c}", "STRING")
        return _output_text()
    raise ConfigError(
        f"column {column!r}: the CDC connector's type {name or t.value} is not supported by the Spark backfill",
        key="table",
    )


def column_conversion(column: Column, *, decimal_format: str) -> Conversion:
    """The conversion of ``column`` (arrays element by element)."""
    schema = column.ctype.schema
    if schema.type is not Type.ARRAY:
        return conversion(column.type_oid, column.typmod, schema, decimal_format=decimal_format, column=column.name)
    element_schema = schema.value_schema
    assert element_schema is not None
    element_oid = pg.ARRAY_ELEMENTS.get(column.type_oid, 0)
    element = conversion(element_oid, column.typmod, element_schema, decimal_format=decimal_format, column=column.name)
    if element_schema.type is Type.BYTES and element_schema.name is None:
        # base64 made by PostgreSQL (without the line breaks encode() puts every 76 characters)
        element = Conversion("translate(encode({c}, 'base64'), E'\\n', '')", "STRING")
    # One text[] of the converted elements, in order (a NULL array stays NULL, a NULL element NULL).
    pg_elements = (
        f"CASE WHEN {{c}} IS NULL THEN NULL ELSE ARRAY(SELECT ({element.pg('u.e')})::text "
        "FROM unnest({c}) WITH ORDINALITY AS u(e, n) ORDER BY u.n) END"
    )
    typed = "x" if element.spark_type == "STRING" else f"CAST(x AS {element.spark_type})"
    json = f"transform({{x}}, x -> {element.json(typed)})"
    return Conversion(pg_elements, "ARRAY<STRING>", json)


# -- the read ----------------------------------------------------------------------------------------


def read_sql(table: Table, conversions: Sequence[Conversion], partition_column: str | None) -> str:
    """The query Spark's JDBC reader wraps (``dbtable``): one converted column per included column,
    under its own name, and the raw partition column (when it is not already read as it is)."""
    items = []
    for column, conv in zip(table.included_columns, conversions):
        items.append(f"{conv.pg(_quote_pg(column.name))} AS {_quote_pg(read_name(column.name))}")
    if partition_column is not None:
        items.append(f"{_quote_pg(partition_column)} AS {_quote_pg(PARTITION_ALIAS)}")
    target = f"{_quote_pg(table.schema_name)}.{_quote_pg(table.name)}"
    return f"(SELECT {', '.join(items)} FROM {target}) AS sluice_cdc_backfill"


#: Spark types whose JSON is their text (``CAST(… AS STRING)``).
_PLAIN = frozenset({"SMALLINT", "INT", "BIGINT", "BOOLEAN"})

#: The raw partition column in the read (the converted columns keep their own names).
PARTITION_ALIAS = "__sluice_partition"


def read_name(column: str) -> str:
    """The name a column has in the read (its own)."""
    return column


# -- the records -------------------------------------------------------------------------------------


def struct_json(columns: Sequence[Column], conversions: Sequence[Conversion]) -> str:
    """Spark SQL of the JSON object of ``columns`` in order, nulls written (as the converter does)."""
    if not columns:
        return "'{}'"
    if all(conv.spark_type in _PLAIN and conv.json_sql == "{x}" for conv in conversions):
        # Integers and booleans only (most keys): their text concatenated, without a JSON writer per row.
        parts = []
        for i, (c, conv) in enumerate(zip(columns, conversions)):
            head = ("{" if i == 0 else ",") + orjson.dumps(c.name).decode() + ":"
            value = f"CAST({quote_identifier(read_name(c.name))} AS {conv.spark_type})"
            parts += [sql_string(head), f"coalesce(CAST({value} AS STRING), 'null')"]
        return f"concat({', '.join(parts)}, '}}')"
    fields = ", ".join(
        f"{sql_string(c.name)}, {conv.json(f'CAST({quote_identifier(read_name(c.name))} AS {conv.spark_type})')}"
        for c, conv in zip(columns, conversions)
    )
    json = f"to_json(named_struct({fields}), map('ignoreNullFields', 'false'))"
    if any(NUMBER_MARK in conv.json_sql for conv in conversions):
        json = f"regexp_replace({json}, {_MARKED_NUMBER}, '$1')"
    return json


def key_json(table: Table, conversions: Sequence[Conversion]) -> str | None:
    """Spark SQL of the key's payload (``None`` for a table without a primary key)."""
    if table.key_schema is None:
        return None
    by_name = {c.name: (c, conv) for c, conv in zip(table.included_columns, conversions)}
    pairs = [by_name[k] for k in table.primary_key]
    return struct_json([c for c, _ in pairs], [conv for _, conv in pairs])


def wrap(head: bytes, body_sql: str, tail: bytes) -> str:
    """``head || body || tail`` as BINARY (``head``/``tail`` are constant bytes)."""
    parts = [p for p in (sql_string(head.decode()) if head else None, body_sql, sql_string(tail.decode()) if tail else None) if p]
    return f"CAST(concat({', '.join(parts)}) AS BINARY)"
