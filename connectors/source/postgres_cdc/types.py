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

import base64
import datetime as _dt
import decimal
import struct
from binascii import unhexlify
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sluice.connectors.api import Date, Decimal, Schema, Time, Timestamp, Type

#: What Debezium writes for an unchanged TOASTed column it did not receive.
UNAVAILABLE = "__debezium_unavailable_value"

_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_US = _dt.timedelta(microseconds=1)

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


# -- conversions ---------------------------------------------------------------------------------


def _text(x: bytes) -> str:
    return x.decode()


def _bool(x: bytes) -> bool:
    return x == b"t"


def _bytea(x: bytes) -> bytes:
    return unhexlify(x[2:]) if x[:2] == b"\\x" else _bytea_escape(x)


def _bytea_escape(x: bytes) -> bytes:
    # bytea_output=escape: octal escapes and doubled backslashes
    out = bytearray()
    i = 0
    while i < len(x):
        c = x[i]
        if c == 92 and x[i + 1 : i + 2] == b"\\":
            out.append(92)
            i += 2
        elif c == 92:
            out.append(int(x[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(c)
            i += 1
    return bytes(out)


def _date_parts(x: bytes) -> _dt.date:
    if len(x) == 10:
        return _dt.date(int(x[0:4]), int(x[5:7]), int(x[8:10]))
    text = x.decode()
    if text == "infinity":
        return _dt.date.max
    if text == "-infinity":
        return _dt.date.min
    if text.endswith(" BC"):  # outside Python's range; clamp like an infinity
        return _dt.date.min
    return _dt.date.fromisoformat(text)


def _date_days(x: bytes) -> int:
    if len(x) == 10:
        return _dt.date(int(x[0:4]), int(x[5:7]), int(x[8:10])).toordinal() - _EPOCH_ORDINAL
    return _date_parts(x).toordinal() - _EPOCH_ORDINAL


def _time_micros(x: bytes) -> int:
    # HH:MM:SS[.ffffff]; 24:00:00 is valid in PostgreSQL
    micros = (int(x[0:2]) * 3600 + int(x[3:5]) * 60 + int(x[6:8])) * 1_000_000
    if len(x) > 9:
        micros += int(x[9:].ljust(6, b"0")[:6])
    return micros


def _time_millis(x: bytes) -> int:
    return _time_micros(x) // 1000


def _time_object(x: bytes) -> _dt.time:
    micros = _time_micros(x) % 86_400_000_000
    seconds, us = divmod(micros, 1_000_000)
    return _dt.time(seconds // 3600, seconds // 60 % 60, seconds % 60, us)


def _timestamp(x: bytes) -> _dt.datetime:
    text = x.decode()
    try:
        return _dt.datetime.fromisoformat(text)
    except ValueError:
        if text == "infinity":
            return _dt.datetime.max
        return _dt.datetime.min


def _timestamp_micros(x: bytes) -> int:
    return (_timestamp(x) - _EPOCH_NAIVE) // _US


def _timestamp_millis(x: bytes) -> int:
    return (_timestamp(x) - _EPOCH_NAIVE) // _US // 1000


def _timestamp_connect(x: bytes) -> _dt.datetime:
    return _timestamp(x).replace(tzinfo=_dt.UTC)


def _zoned_timestamp(digits: int) -> Callable[[bytes], str]:
    """timestamptz text (the session runs in UTC) → ``2024-01-02T03:04:05.123456Z``, the fraction
    padded to the column's precision as Debezium does."""

    def convert(x: bytes) -> str:
        if digits == 6 and len(x) == 29 and x[26:] == b"+00":  # the common case: all six digits, UTC
            text = x.decode()
            return f"{text[:10]}T{text[11:26]}Z"
        text = x.decode()
        if text[-3] in "+-" and text[-2:].isdigit() and len(text) >= 22:
            if text[-3:] != "+00":
                dt = _dt.datetime.fromisoformat(text).astimezone(_dt.UTC)
                return _zoned_text(dt, digits)
            body = text[:-3]
            date, _, clock = body.partition(" ")
            whole, _, fraction = clock.partition(".")
            if digits:
                return f"{date}T{whole}.{fraction.ljust(digits, '0')[:digits]}Z"
            return f"{date}T{whole}Z"
        try:
            return _zoned_text(_dt.datetime.fromisoformat(text).astimezone(_dt.UTC), digits)
        except ValueError:
            return text  # infinity, BC dates: passed through as PostgreSQL prints them

    return convert


def _zoned_text(dt: _dt.datetime, digits: int) -> str:
    base = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        return f"{base}.{dt.microsecond:06d}"[: len(base) + 1 + digits] + "Z"
    return base + "Z"


def _zoned_time(x: bytes) -> str:
    text = x.decode()
    for i in range(len(text) - 1, 0, -1):
        if text[i] in "+-":
            clock, offset = text[:i], text[i:]
            break
    else:
        return text + "Z"
    sign = -1 if offset[0] == "-" else 1
    parts = [int(p) for p in offset[1:].split(":")] + [0, 0]
    shift = sign * (parts[0] * 3600 + parts[1] * 60 + parts[2]) * 1_000_000
    micros = (_time_micros(clock.encode()) - shift) % 86_400_000_000
    seconds, us = divmod(micros, 1_000_000)
    out = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    if us:
        out += f".{us:06d}".rstrip("0")
    return out + "Z"


#: Debezium's average month for PostgreSQL intervals (a year is 12 of them: 365.25 days).
_DAYS_PER_MONTH = 365.25 / 12
_INTERVAL_FIELDS = {"year": 0, "years": 0, "mon": 1, "mons": 1, "day": 2, "days": 2}


def _interval_micros(x: bytes) -> int:
    """``1 year 2 mons 3 days 04:05:06.7`` → microseconds, as Debezium's MicroDuration computes them:
    months (a year is 12) count 30.4375 days each, and the sum is taken in floating point in
    Debezium's order and truncated, so the last digit agrees too."""
    fields = [0, 0, 0]  # years, months, days
    hours = minutes = 0
    seconds = 0.0
    parts = x.decode().split()
    i = 0
    while i < len(parts):
        token = parts[i]
        if ":" in token:
            sign = -1 if token.startswith("-") else 1
            clock = token.lstrip("+-").split(":")
            hours, minutes = sign * int(clock[0]), sign * int(clock[1])
            seconds = sign * float(clock[2] if len(clock) > 2 else 0)
            i += 1
        else:
            fields[_INTERVAL_FIELDS[parts[i + 1]]] += int(token)
            i += 2
    days = (fields[0] * 12 + fields[1]) * _DAYS_PER_MONTH + fields[2]
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1e6)


def _interval_iso(x: bytes) -> str:
    """``1 year 2 mons 3 days 04:05:06.7`` → ``P1Y2M3DT4H5M6.7S`` (Debezium's io.debezium.time.Interval:
    every field present, the sign on each field, seconds without trailing zeros)."""
    fields = {"year": 0, "mon": 0, "day": 0}
    hours = minutes = 0
    seconds = decimal.Decimal(0)
    parts = x.decode().split()
    i = 0
    while i < len(parts):
        token = parts[i]
        if ":" in token:
            sign = -1 if token.startswith("-") else 1
            clock = token.lstrip("+-").split(":")
            hours, minutes = sign * int(clock[0]), sign * int(clock[1])
            seconds = sign * decimal.Decimal(clock[2] if len(clock) > 2 else 0)
            i += 1
        else:
            fields[parts[i + 1].rstrip("s")] += int(token)
            i += 2
    text = format(seconds.normalize(), "f") if seconds else "0"
    return f"P{fields['year']}Y{fields['mon']}M{fields['day']}DT{hours}H{minutes}M{text}S"


def _bytea_base64(x: bytes) -> str:
    return base64.b64encode(_bytea(x)).decode()


def _bytea_base64_url_safe(x: bytes) -> str:
    return base64.urlsafe_b64encode(_bytea(x)).decode()


def _bytea_hex(x: bytes) -> str:
    return _bytea(x).hex()


#: ``binary.handling.mode`` → the conversion of a bytea column to text.
_BINARY_AS_TEXT: dict[str, Callable[[bytes], str]] = {
    "base64": _bytea_base64,
    "base64-url-safe": _bytea_base64_url_safe,
    "hex": _bytea_hex,
}


def _decimal(x: bytes) -> decimal.Decimal | None:
    value = decimal.Decimal(x.decode())
    return None if value.is_nan() else value


def _variable_decimal(x: bytes) -> dict[str, Any] | None:
    value = decimal.Decimal(x.decode())
    if not value.is_finite():
        return None
    sign, digits, exponent = value.as_tuple()
    scale = -int(exponent)
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    if scale < 0:
        unscaled *= 10**-scale
        scale = 0
    return {
        "scale": scale,
        "value": unscaled.to_bytes((unscaled + (unscaled < 0)).bit_length() // 8 + 1, "big", signed=True),
    }


def _money(x: bytes) -> decimal.Decimal:
    text = x.decode().replace("$", "").replace(",", "")
    negative = text.startswith("(") or text.startswith("-")
    value = decimal.Decimal(text.strip("()-"))
    return -value if negative else value


def _money_scaled(digits: int) -> Callable[[bytes], decimal.Decimal]:
    """money at ``money.fraction.digits`` (rounded half up, as Debezium sets the scale)."""
    quantum = decimal.Decimal(1).scaleb(-digits)

    def convert(x: bytes) -> decimal.Decimal:
        return _money(x).quantize(quantum, rounding=decimal.ROUND_HALF_UP)

    return convert


def _float_text(x: bytes) -> float:
    return float(x)


# -- array literals --------------------------------------------------------------------------------


def parse_array(x: bytes) -> list[Any]:
    """A one- or more-dimensional array literal (``{1,2,NULL}``, ``{"a b","c\\"d"}``) → nested lists
    of ``bytes`` items (``None`` for NULL). An explicit-bounds prefix (``[0:1]={…}``) is dropped."""
    if x[:1] == b"[":
        x = x[x.index(b"=") + 1 :]
    items, _ = _parse_level(x, 1)
    return items


def _parse_level(x: bytes, pos: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    n = len(x)
    while pos < n:
        c = x[pos]
        if c == 125:  # }
            return out, pos + 1
        if c == 44:  # ,
            pos += 1
            continue
        if c == 123:  # {
            nested, pos = _parse_level(x, pos + 1)
            out.append(nested)
        elif c == 34:  # "
            buf = bytearray()
            pos += 1
            while x[pos] != 34:
                if x[pos] == 92:
                    pos += 1
                buf.append(x[pos])
                pos += 1
            out.append(bytes(buf))
            pos += 1
        else:
            end = pos
            while end < n and x[end] not in (44, 125):
                end += 1
            token = x[pos:end]
            out.append(None if token == b"NULL" else token)
            pos = end
    return out, pos


def _array_fn(element: ColumnType) -> Callable[[bytes], list[Any]]:
    convert = element.fn

    def walk(items: list[Any]) -> list[Any]:
        return [None if e is None else walk(e) if type(e) is list else convert(e) for e in items]

    def to_list(x: bytes) -> list[Any]:
        return walk(parse_array(x))

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


def column_type(
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
            _text,
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
        return ColumnType(Schema(Type.BOOLEAN), _bool, "{x} == b't'", False, False)
    if oid == FLOAT4:
        return ColumnType(Schema(Type.FLOAT32), _float_text, "float({x})", 0.0, False)
    if oid == FLOAT8:
        return ColumnType(Schema(Type.FLOAT64), _float_text, "float({x})", 0.0, False)
    if oid in _STRINGS:
        return ColumnType(Schema(Type.STRING), _text, "{x}.decode()", "")
    if oid == UUID:
        return ColumnType(semantic(Type.STRING, "io.debezium.data.Uuid"), _text, "{x}.decode()", "", False)
    if oid in (JSON, JSONB):
        return ColumnType(semantic(Type.STRING, "io.debezium.data.Json"), _text, "{x}.decode()", "{}")
    if oid == XML:
        return ColumnType(semantic(Type.STRING, "io.debezium.data.Xml"), _text, "{x}.decode()", "")
    if oid == BYTEA:
        if modes.binary_handling_mode == "bytes":
            return ColumnType(Schema(Type.BYTES), _bytea, None, b"")
        # A function the native encoder does not know, so these tables take the Python path.
        return ColumnType(Schema(Type.STRING), _BINARY_AS_TEXT[modes.binary_handling_mode], None, "")
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
    return ColumnType(Schema(Type.STRING), _text, "{x}.decode()", "")


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
        fn = _float_text if oid == NUMERIC else (lambda x: float(_money(x)))
        return ColumnType(Schema(Type.FLOAT64), fn, "float({x})" if oid == NUMERIC else None, 0.0)
    if modes.decimal_handling_mode == "string":
        text_fn: Callable[[bytes], Any] = _text if oid == NUMERIC else (lambda x: str(_money(x)))
        return ColumnType(Schema(Type.STRING), text_fn, "{x}.decode()" if oid == NUMERIC else None, "")
    if oid == MONEY:
        digits = modes.money_fraction_digits
        return ColumnType(Decimal.schema(digits), _money_scaled(digits), None, decimal.Decimal(0).scaleb(-digits), False)
    precision, scale = numeric_precision_scale(typmod)
    if precision is None or scale is None:
        return ColumnType(VARIABLE_SCALE_DECIMAL, _variable_decimal, None, {"scale": 0, "value": b"\x00"})
    return ColumnType(
        Decimal.schema(scale, precision=precision),
        _decimal,
        "(D({x}.decode()) if {x} != b'NaN' else None)",
        decimal.Decimal(0),
    )


def _temporal_type(oid: int, typmod: int, modes: TypeModes) -> ColumnType:
    mode = modes.time_precision_mode
    digits = time_precision(typmod)
    if oid == DATE:
        if mode == "connect":
            return ColumnType(Date.SCHEMA, _date_parts, None, _dt.date(1970, 1, 1), False)
        return ColumnType(semantic(Type.INT32, "io.debezium.time.Date"), _date_days, None, 0, False)
    if oid == TIME:
        if mode == "connect":
            return ColumnType(Time.SCHEMA, _time_object, None, _dt.time(0), False)
        if mode == "adaptive" and digits <= 3:
            return ColumnType(semantic(Type.INT32, "io.debezium.time.Time"), _time_millis, None, 0, False)
        return ColumnType(semantic(Type.INT64, "io.debezium.time.MicroTime"), _time_micros, None, 0, False)
    if oid == TIMESTAMP:
        if mode == "connect":
            return ColumnType(Timestamp.SCHEMA, _timestamp_connect, None, _EPOCH_UTC, False)
        if digits <= 3 and mode == "adaptive":
            return ColumnType(semantic(Type.INT64, "io.debezium.time.Timestamp"), _timestamp_millis, None, 0, False)
        return ColumnType(semantic(Type.INT64, "io.debezium.time.MicroTimestamp"), _timestamp_micros, None, 0, False)
    if oid == TIMESTAMPTZ:
        # Inline the common case: UTC with every fractional digit present (PostgreSQL drops
        # trailing zeros, and those values take the function), only a space to replace.
        size = 22 + (digits + 1 if digits else 0)
        fast = f"({{x}}[:{size - 3}].decode().replace(' ', 'T') + 'Z' if len({{x}}) == {size} and {{x}}[10] == 32 and {{x}}[{size - 3}:] == b'+00' else {{f}}({{x}}))"
        return ColumnType(
            semantic(Type.STRING, "io.debezium.time.ZonedTimestamp"),
            _zoned_timestamp(digits),
            fast,
            "1970-01-01T00:00:00Z",
            False,
        )
    if oid == TIMETZ:
        return ColumnType(semantic(Type.STRING, "io.debezium.time.ZonedTime"), _zoned_time, None, "00:00:00Z", False)
    if modes.interval_handling_mode == "string":
        return ColumnType(semantic(Type.STRING, "io.debezium.time.Interval"), _interval_iso, None, "P0Y0M0DT0H0M0S", False)
    return ColumnType(semantic(Type.INT64, "io.debezium.time.MicroDuration"), _interval_micros, None, 0, False)
