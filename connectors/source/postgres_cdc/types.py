"""PostgreSQL column types → Debezium's Connect schemas and value conversions.

Values arrive as the type's text output (pgoutput's text tuple format, and ``COPY … TO STDOUT``
in the snapshot, which is the same text). A :class:`ColumnType` says which Connect schema a column
gets under ``decimal.handling.mode`` / ``time.precision.mode`` and gives either a Python
expression template (``{x}`` is the raw ``bytes``) for the generated row decoders, or a helper
function. Inline expressions matter: a function call per column costs as much as the conversion.

Semantic type names follow Debezium's PostgreSQL connector (``io.debezium.time.MicroTimestamp``,
``io.debezium.data.Json``, …) so consumers written for Debezium read the same shapes.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sluice.connectors.api import Date, Decimal, Schema, Time, Timestamp, Type
from sluice.connectors.source.postgres_cdc import text_values as tv

#: What Debezium writes for an unchanged TOASTed column it did not receive.
UNAVAILABLE = "__debezium_unavailable_value"

_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)

# Built-in type OIDs (pg_type.h); arrays map to their element's OID below.
BOOL, BYTEA, CHAR, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 18, 19, 20, 21, 23, 25, 26
JSON, XML, FLOAT4, FLOAT8, MONEY, INET, CIDR, MACADDR = 114, 142, 700, 701, 790, 869, 650, 829
BPCHAR, VARCHAR, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, TIMETZ = 1042, 1043, 1082, 1083, 1114, 1184, 1186, 1266
NUMERIC, UUID, JSONB = 1700, 2950, 3802
BIT, VARBIT, POINT = 1560, 1562, 600

ARRAY_ELEMENTS = {
    1000: BOOL, 1001: BYTEA, 1002: CHAR, 1003: NAME, 1016: INT8, 1005: INT2, 1007: INT4, 1009: TEXT, 1028: OID,
    199: JSON, 143: XML, 1021: FLOAT4, 1022: FLOAT8, 791: MONEY, 1041: INET, 651: CIDR, 1040: MACADDR,
    1014: BPCHAR, 1015: VARCHAR, 1182: DATE, 1183: TIME, 1115: TIMESTAMP, 1185: TIMESTAMPTZ, 1187: INTERVAL,
    1270: TIMETZ, 1231: NUMERIC, 2951: UUID, 3807: JSONB,
}  # fmt: skip

_STRINGS = {CHAR, NAME, TEXT, BPCHAR, VARCHAR, INET, CIDR, MACADDR}


def semantic(kind: Type, name: str, parameters: dict[str, str] | None = None) -> Schema:
    """A Debezium semantic schema (version 1, as Debezium declares them)."""
    return Schema(kind, name=name, version=1, parameters=parameters)


VARIABLE_SCALE_DECIMAL = Schema.struct(
    [("scale", Schema(Type.INT32)), ("value", Schema(Type.BYTES))],
    name="io.debezium.data.VariableScaleDecimal",
    version=1,
    doc="Variable scaled decimal",
)


@dataclass(frozen=True)
class ColumnType:
    """How one column is represented: its schema (required form) and its conversion.

    ``expr`` is a Python expression over ``{x}`` (the raw text as ``bytes``, a plain variable) used
    by generated decoders, where ``{f}`` names ``fn`` for a slow path; ``fn`` is the same
    conversion as a function (for arrays, odd types and tests). ``fallback`` is what a required column holds when PostgreSQL did not send it (the
    non-key columns of a ``REPLICA IDENTITY DEFAULT`` old key), Debezium's zero value.
    """

    schema: Schema
    fn: Callable[[bytes], Any]
    expr: str | None = None
    fallback: Any = None
    toastable: bool = True

    @property
    def unavailable(self) -> Any:
        """The value of an unchanged TOASTed column, in this column's representation."""
        return self.unavailable_as(UNAVAILABLE.encode())

    def unavailable_as(self, placeholder: bytes) -> Any:
        """The value of an unchanged TOASTed column for ``unavailable.value.placeholder`` (as bytes)."""
        t = self.schema.type
        text = placeholder.decode(errors="replace")
        if t is Type.STRING:
            return text
        if t is Type.BYTES and self.schema.name is None:
            return placeholder
        if t is Type.ARRAY and self.schema.value_schema is not None and self.schema.value_schema.type is Type.STRING:
            return [text]
        return None


def _array_fn(element: ColumnType) -> Callable[[bytes], list[Any]]:
    convert = element.fn

    def walk(items: list[Any]) -> list[Any]:
        return [None if e is None else walk(e) if type(e) is list else convert(e) for e in items]

    def to_list(x: bytes) -> list[Any]:
        return walk(tv.parse_array(x))

    return to_list


# -- the mapping -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TypeModes:
    """The connector settings that change how types are represented."""

    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive"
    binary_handling_mode: str = "bytes"
    interval_handling_mode: str = "numeric"
    hstore_handling_mode: str = "json"
    money_fraction_digits: int = 2
    include_unknown_datatypes: bool = False


def numeric_precision_scale(typmod: int) -> tuple[int | None, int | None]:
    """numeric's typmod → (precision, scale); ``(None, None)`` for an unconstrained numeric."""
    if typmod < 4:
        return None, None
    value = typmod - 4
    return (value >> 16) & 0xFFFF, value & 0xFFFF


def time_precision(typmod: int) -> int:
    """Fractional-second digits of time/timestamp columns (6 when unconstrained)."""
    return typmod if 0 <= typmod <= 6 else 6


def column_type(  # noqa: C901 - one branch per Postgres type
    oid: int,
    typmod: int,
    modes: TypeModes,
    *,
    enum_labels: tuple[str, ...] | None = None,
    element: ColumnType | None = None,
) -> ColumnType:
    """The representation of a column of type ``oid`` (``element`` for arrays, ``enum_labels`` for enums)."""
    if element is not None:
        schema = Schema.array(element.schema.as_optional())
        return ColumnType(schema, _array_fn(element), None, [])
    if enum_labels is not None:
        return ColumnType(
            semantic(Type.STRING, "io.debezium.data.Enum", {"allowed": ",".join(enum_labels)}),
            tv.text,
            "{x}.decode()",
            "",
        )
    if oid in (INT2,):
        return ColumnType(Schema(Type.INT16), int, "int({x})", 0, False)
    if oid in (INT4,):
        return ColumnType(Schema(Type.INT32), int, "int({x})", 0, False)
    if oid in (INT8, OID):
        return ColumnType(Schema(Type.INT64), int, "int({x})", 0, False)
    if oid == BOOL:
        return ColumnType(Schema(Type.BOOLEAN), tv.boolean, "{x} == b't'", False, False)
    if oid == FLOAT4:
        return ColumnType(Schema(Type.FLOAT32), tv.float_text, "float({x})", 0.0, False)
    if oid == FLOAT8:
        return ColumnType(Schema(Type.FLOAT64), tv.float_text, "float({x})", 0.0, False)
    if oid in _STRINGS:
        return ColumnType(Schema(Type.STRING), tv.text, "{x}.decode()", "")
    if oid == UUID:
        return ColumnType(semantic(Type.STRING, "io.debezium.data.Uuid"), tv.text, "{x}.decode()", "", False)
    if oid in (JSON, JSONB):
        return ColumnType(semantic(Type.STRING, "io.debezium.data.Json"), tv.text, "{x}.decode()", "{}")
    if oid == XML:
        return ColumnType(semantic(Type.STRING, "io.debezium.data.Xml"), tv.text, "{x}.decode()", "")
    if oid == BYTEA:
        if modes.binary_handling_mode == "bytes":
            return ColumnType(Schema(Type.BYTES), tv.bytea, None, b"")
        # A function the native encoder does not know, so these tables take the Python path.
        return ColumnType(Schema(Type.STRING), tv.BINARY_AS_TEXT[modes.binary_handling_mode], None, "")
    if oid in (NUMERIC, MONEY):
        return _numeric_type(oid, typmod, modes)
    if oid in (DATE, TIME, TIMESTAMP, TIMESTAMPTZ, TIMETZ, INTERVAL):
        return _temporal_type(oid, typmod, modes)
    if oid in (BIT, VARBIT):
        return _bits_type(oid, typmod)
    if oid == POINT:
        return ColumnType(POINT_SCHEMA, _point, None, {"x": 0.0, "y": 0.0, "wkb": None, "srid": None}, False)
    # Anything else Debezium maps (ranges, geometric types, bit strings, tsvector, extension types
    # such as citext and ltree, see known_type): its text.
    return ColumnType(Schema(Type.STRING), tv.text, "{x}.decode()", "")


#: Debezium's geometry point: the coordinates, and the point as WKB (little-endian, type 1).
POINT_SCHEMA = Schema.struct(
    [("x", Schema(Type.FLOAT64)), ("y", Schema(Type.FLOAT64)), ("wkb", Schema(Type.BYTES, optional=True)),
     ("srid", Schema(Type.INT32, optional=True))],
    name="io.debezium.data.geometry.Point",
    version=1,
    doc="Geometry (POINT)",
)


def _point(x: bytes) -> dict[str, Any]:
    """``(1.5,2.5)`` → Debezium's Point struct."""
    px, py = (float(v) for v in x.decode().strip("()").split(","))
    return {"x": px, "y": py, "wkb": struct.pack("<BIdd", 1, 1, px, py), "srid": None}


def _bits_type(oid: int, typmod: int) -> ColumnType:
    """``bit(1)`` is a boolean; longer bit strings and ``varbit`` are io.debezium.data.Bits: the bits
    as a little-endian number in as few bytes as it needs (none for zero, as Debezium writes it)."""
    if oid == BIT and typmod <= 1:
        return ColumnType(Schema(Type.BOOLEAN), lambda x: x == b"1", "{x} == b'1'", False, False)
    length = typmod if typmod > 0 else 2**31 - 1
    return ColumnType(semantic(Type.BYTES, "io.debezium.data.Bits", {"length": str(length)}), _bits, None, b"", False)


def _bits(x: bytes) -> bytes:
    number = int(x, 2) if x else 0
    return number.to_bytes((number.bit_length() + 7) // 8, "little")


def _numeric_type(oid: int, typmod: int, modes: TypeModes) -> ColumnType:
    if modes.decimal_handling_mode == "double":
        fn = tv.float_text if oid == NUMERIC else (lambda x: float(tv.money(x)))
        return ColumnType(Schema(Type.FLOAT64), fn, "float({x})" if oid == NUMERIC else None, 0.0)
    if modes.decimal_handling_mode == "string":
        text_fn: Callable[[bytes], Any] = tv.text if oid == NUMERIC else (lambda x: str(tv.money(x)))
        return ColumnType(Schema(Type.STRING), text_fn, "{x}.decode()" if oid == NUMERIC else None, "")
    if oid == MONEY:
        digits = modes.money_fraction_digits
        return ColumnType(Decimal.schema(digits), tv.money_scaled(digits), None, decimal.Decimal(0).scaleb(-digits), False)
    precision, scale = numeric_precision_scale(typmod)
    if precision is None or scale is None:
        return ColumnType(VARIABLE_SCALE_DECIMAL, tv.variable_decimal, None, {"scale": 0, "value": b"\x00"})
    return ColumnType(
        Decimal.schema(scale, precision=precision),
        tv.numeric,
        "(D({x}.decode()) if {x} != b'NaN' else None)",
        decimal.Decimal(0),
    )


def _temporal_type(oid: int, typmod: int, modes: TypeModes) -> ColumnType:
    mode = modes.time_precision_mode
    digits = time_precision(typmod)
    if oid == DATE:
        if mode == "connect":
            return ColumnType(Date.SCHEMA, tv.date_parts, None, _dt.date(1970, 1, 1), False)
        return ColumnType(semantic(Type.INT32, "io.debezium.time.Date"), tv.date_days, None, 0, False)
    if oid == TIME:
        if mode == "connect":
            return ColumnType(Time.SCHEMA, tv.time_object, None, _dt.time(0), False)
        if mode == "adaptive" and digits <= 3:
            return ColumnType(semantic(Type.INT32, "io.debezium.time.Time"), tv.time_millis, None, 0, False)
        return ColumnType(semantic(Type.INT64, "io.debezium.time.MicroTime"), tv.time_micros, None, 0, False)
    if oid == TIMESTAMP:
        if mode == "connect":
            return ColumnType(Timestamp.SCHEMA, tv.timestamp_connect, None, _EPOCH_UTC, False)
        if digits <= 3 and mode == "adaptive":
            return ColumnType(semantic(Type.INT64, "io.debezium.time.Timestamp"), tv.timestamp_millis, None, 0, False)
        return ColumnType(semantic(Type.INT64, "io.debezium.time.MicroTimestamp"), tv.timestamp_micros, None, 0, False)
    if oid == TIMESTAMPTZ:
        # Inline the common case: UTC with every fractional digit present (PostgreSQL drops
        # trailing zeros, and those values take the function), only a space to replace.
        size = 22 + (digits + 1 if digits else 0)
        fast = f"({{x}}[:{size - 3}].decode().replace(' ', 'T') + 'Z' if len({{x}}) == {size} and {{x}}[10] == 32 and {{x}}[{size - 3}:] == b'+00' else {{f}}({{x}}))"
        return ColumnType(
            semantic(Type.STRING, "io.debezium.time.ZonedTimestamp"),
            tv.zoned_timestamp(digits),
            fast,
            "1970-01-01T00:00:00Z",
            False,
        )
    if oid == TIMETZ:
        return ColumnType(semantic(Type.STRING, "io.debezium.time.ZonedTime"), tv.zoned_time, None, "00:00:00Z", False)
    if modes.interval_handling_mode == "string":
        return ColumnType(semantic(Type.STRING, "io.debezium.time.Interval"), tv.interval_iso, None, "P0Y0M0DT0H0M0S", False)
    return ColumnType(semantic(Type.INT64, "io.debezium.time.MicroDuration"), tv.interval_micros, None, 0, False)
