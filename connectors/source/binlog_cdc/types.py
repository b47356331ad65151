"""MySQL and MariaDB column types → Debezium's Connect schemas, and the binlog's values → theirs.

A column is described from ``information_schema.COLUMNS`` (:class:`ColumnInfo`); the binlog reader
hands each row's values over as Python objects (ints, ``Decimal``, ``str``/``bytes``,
``datetime``/``date``/``timedelta``, a ``set`` of names, a bit string ``"0101"``). A
:class:`ColumnType` is the column's field schema and the conversion of such a value into the one
Debezium's MySQL connector writes, under ``decimal.handling.mode`` (default ``precise``),
``time.precision.mode`` (default ``adaptive_time_microseconds``), ``bigint.unsigned.handling.mode``
(default ``long``) and ``binary.handling.mode`` (default ``bytes``):

========================================  ==============================================================
MySQL type                                Debezium's representation
========================================  ==============================================================
TINYINT, SMALLINT (signed)                INT16 (TINYINT(1), what BOOLEAN is stored as, too)
SMALLINT UNSIGNED, MEDIUMINT, INT          INT32
INT UNSIGNED, BIGINT                       INT64; BIGINT UNSIGNED as INT64 (``long``: wraps above 2^63-1,
                                           as Java's long does) or Decimal scale 0 (``precise``)
FLOAT, FLOAT(p≤23) / FLOAT(M,D), DOUBLE    FLOAT32 / FLOAT64
DECIMAL(p,s)                               ``org.apache.kafka.connect.data.Decimal`` (double, string)
CHAR, VARCHAR, TEXT types                  STRING
BINARY(n), VARBINARY, BLOB types           BYTES (BINARY(n) right-padded with zero bytes to n)
DATE                                       ``io.debezium.time.Date`` (days)
TIME(p)                                    ``io.debezium.time.MicroTime`` (µs, may be negative)
DATETIME(p)                                ``io.debezium.time.Timestamp`` (ms) for p ≤ 3, else ``MicroTimestamp``
TIMESTAMP(p)                               ``io.debezium.time.ZonedTimestamp`` (ISO 8601 in UTC, p digits)
YEAR                                       ``io.debezium.time.Year``
ENUM / SET                                 ``io.debezium.data.Enum`` / ``EnumSet`` (``allowed`` parameter)
JSON (MySQL's; MariaDB's is LONGTEXT)      ``io.debezium.data.Json`` (MariaDB's: STRING, as for Debezium)
BIT(1) / BIT(n)                            BOOLEAN / ``io.debezium.data.Bits`` (little-endian, (n+7)/8 bytes)
========================================  ==============================================================

``time.precision.mode=connect`` gives Connect's own Date, Time and Timestamp instead. A zero date
(``0000-00-00``) is null in a nullable column, as Debezium has it, and the epoch in a ``NOT NULL``
one (Debezium writes the column's default there, when it has one: not yet here). Other types
(spatial ones) are not captured yet: such a column is left out of the events.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from sluice.connectors.api import Date, Decimal, Schema, Time, Timestamp, Type

_EPOCH = _dt.datetime(1970, 1, 1)
_EPOCH_DATE = _dt.date(1970, 1, 1)
_F32 = struct.Struct("<f")

#: What no conversion looks like: the value passes as the reader gave it.
Convert = Callable[[Any], Any] | None


class ColumnInfo(NamedTuple):
    """One row of ``information_schema.COLUMNS`` (names as the server spells them, types lower case)."""

    name: str
    data_type: str
    column_type: str
    nullable: bool
    precision: int | None = None
    scale: int | None = None
    datetime_precision: int | None = None
    length: int | None = None
    #: MariaDB's JSON: a LONGTEXT column with a ``json_valid()`` check.
    json: bool = False


@dataclass(frozen=True)
class TypeModes:
    """The connector settings that change how columns are represented."""

    decimal_handling_mode: str = "precise"
    time_precision_mode: str = "adaptive_time_microseconds"
    bigint_unsigned_handling_mode: str = "long"
    binary_handling_mode: str = "bytes"


@dataclass(frozen=True)
class ColumnType:
    """A column's field schema (required form), its conversion and what a required column holds
    when the binlog has no value for it (a zero date in a ``NOT NULL`` column)."""

    schema: Schema
    convert: Convert = None
    fallback: Any = None
    #: The native row decoder's name for the same conversion (:mod:`.native_rows`; ``""``: none).
    native: str = ""


def semantic(kind: Type, name: str, parameters: dict[str, str] | None = None) -> Schema:
    """A Debezium semantic schema (version 1, as Debezium declares them)."""
    return Schema(kind, name=name, version=1, parameters=parameters)


# -- conversions -------------------------------------------------------------------------------------


def unsigned_long(value: int) -> int:
    """BIGINT UNSIGNED as Java's long holds it (``bigint.unsigned.handling.mode=long``)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def float32(value: float) -> float:
    """A FLOAT read as a 32-bit float, as the shortest decimal that reads back as the same float32
    (``0.1``, not ``0.10000000149011612``): what the server prints and Java's ``Float`` writes."""
    packed = _F32.pack(value)
    for digits in range(6, 10):
        text = f"{value:.{digits}g}"
        if _F32.pack(float(text)) == packed:
            return float(text)
    return value


def date_days(value: _dt.date) -> int:
    return (value - _EPOCH_DATE).days


def time_micros(value: _dt.timedelta) -> int:
    """TIME in µs. mysql-replication 1.0 reads a negative TIME's fraction apart from its seconds:
    ``-00:00:00.000001`` arrives as -0.999999 s (the whole part one second further from zero, the
    fraction added back); undone here, as Debezium reads it (-1 µs)."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    if micros < 0 and value.microseconds:
        return micros + 1_000_000 - 2 * value.microseconds
    return micros


def datetime_millis(value: _dt.datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def datetime_micros(value: _dt.datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def connect_time(value: _dt.timedelta) -> _dt.time | None:
    """TIME as Connect's Time (a time of day). A value outside one day (negative, or 24 hours and
    more) has no such representation: it is null, as Debezium writes it (it logs a conversion
    warning, its ``event.converting.failure.handling.mode=warn``)."""
    micros = time_micros(value)
    if not 0 <= micros < 86_400_000_000:
        return None
    return (_dt.datetime.min + _dt.timedelta(microseconds=micros)).time()


def zoned_timestamp(digits: int) -> Callable[[_dt.datetime], str]:
    """TIMESTAMP(digits) (read as UTC) → ``2024-03-01T10:11:12.500Z``, with the column's digits."""
    if digits <= 0:
        return lambda value: value.strftime("%Y-%m-%dT%H:%M:%SZ")

    def iso(value: _dt.datetime) -> str:
        return f"{value.strftime('%Y-%m-%dT%H:%M:%S')}.{value.microsecond:06d}"[: 20 + digits] + "Z"

    return iso


def bits(length: int) -> Callable[[str], bytes]:
    """BIT(n) (a string of bits, most significant first) → little-endian bytes, (n+7)//8 of them."""
    size = (length + 7) // 8

    def to_bytes(value: str) -> bytes:
        return int(value or "0", 2).to_bytes(size, "little")

    return to_bytes


def padded(length: int) -> Callable[[bytes], bytes]:
    """BINARY(n): the binlog drops trailing zero bytes; the column's value has all n."""
    return lambda value: binary(value).ljust(length, b"\0")


def binary(value: bytes | str) -> bytes:
    """A binary string's value as bytes: the reader hands an empty one over as ``""``."""
    return value if isinstance(value, bytes) else value.encode()


def enum_set(allowed: tuple[str, ...]) -> Callable[[Any], str]:
    """A SET's members (a Python ``set``) as MySQL writes them: comma-joined in definition order."""
    order = {name: i for i, name in enumerate(allowed)}

    def joined(value: Any) -> str:
        if isinstance(value, str):
            return value
        return ",".join(sorted(value, key=lambda name: order.get(name, len(order))))

    return joined


def _binary_as_text(mode: str) -> Callable[[bytes], str]:
    if mode == "base64":
        return lambda value: base64.b64encode(value).decode()
    if mode == "base64-url-safe":
        return lambda value: base64.urlsafe_b64encode(value).decode()
    return lambda value: value.hex()


def _then(first: Convert, second: Callable[[Any], Any]) -> Callable[[Any], Any]:
    if first is None:
        return second
    return lambda value: second(first(value))


# -- the mapping --------------------------------------------------------------------------------------

_ALLOWED = re.compile(r"'((?:[^']|'')*)'")
_TEXT = ("char", "varchar", "tinytext", "text", "mediumtext", "longtext")
_BINARY = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")


def allowed_values(column_type: str) -> tuple[str, ...]:
    """``enum('a','b''c')`` → ``("a", "b'c")``."""
    inner = column_type[column_type.index("(") + 1 : column_type.rindex(")")]
    return tuple(m.group(1).replace("''", "'") for m in _ALLOWED.finditer(inner))


def column_type(info: ColumnInfo, modes: TypeModes) -> ColumnType | None:  # noqa: C901 - one branch per type family
    """How a column is represented; ``None`` for a type not captured yet."""
    data_type = info.data_type
    unsigned = "unsigned" in info.column_type
    if data_type == "tinyint" or (data_type == "smallint" and not unsigned):
        return ColumnType(Schema(Type.INT16), None, 0, "int")
    if data_type in ("smallint", "mediumint") or (data_type in ("int", "integer") and not unsigned):
        return ColumnType(Schema(Type.INT32), None, 0, "int")
    if data_type in ("int", "integer") or (data_type == "bigint" and not unsigned):
        return ColumnType(Schema(Type.INT64), None, 0, "int")
    if data_type == "bigint":
        if modes.bigint_unsigned_handling_mode == "precise":
            return ColumnType(Decimal.schema(0, precision=20), decimal.Decimal, decimal.Decimal(0), "decimal_int")
        return ColumnType(Schema(Type.INT64), unsigned_long, 0, "ulong")
    if data_type in ("float", "double", "real"):
        single = data_type == "float" and "," not in info.column_type
        if single:
            return ColumnType(Schema(Type.FLOAT32), float32, 0.0, "f32")
        return ColumnType(Schema(Type.FLOAT64), None, 0.0, "float")
    if data_type in ("decimal", "numeric"):
        return _decimal_type(info, modes)
    # MySQL's JSON; MariaDB's is a LONGTEXT (with a json_valid() check), a plain STRING to Debezium too.
    if data_type == "json":
        return ColumnType(semantic(Type.STRING, "io.debezium.data.Json"), _json_text, "{}", "text")
    if data_type in _TEXT:
        return ColumnType(Schema(Type.STRING), _text, "", "text")
    if data_type in _BINARY:
        convert: Convert = padded(info.length) if data_type == "binary" and info.length else binary
        if modes.binary_handling_mode == "bytes":
            native = f"pad:{info.length}" if convert is not binary else "bytes"
            return ColumnType(Schema(Type.BYTES), convert, b"", native)
        return ColumnType(Schema(Type.STRING), _then(convert, _binary_as_text(modes.binary_handling_mode)), "")
    if data_type == "enum":
        allowed = allowed_values(info.column_type)
        return ColumnType(
            semantic(Type.STRING, "io.debezium.data.Enum", {"allowed": ",".join(allowed)}), None, "", "enum"
        )
    if data_type == "set":
        allowed = allowed_values(info.column_type)
        schema = semantic(Type.STRING, "io.debezium.data.EnumSet", {"allowed": ",".join(allowed)})
        return ColumnType(schema, enum_set(allowed), "", "set")
    if data_type == "bit":
        length = info.precision or 1
        if length == 1:
            return ColumnType(Schema(Type.BOOLEAN), _bit_boolean, False, "bit1")
        return ColumnType(
            semantic(Type.BYTES, "io.debezium.data.Bits", {"length": str(length)}),
            bits(length),
            b"",
            f"bits:{(length + 7) // 8}",
        )
    if data_type == "year":
        return ColumnType(semantic(Type.INT32, "io.debezium.time.Year"), None, 1970, "int")
    if data_type in ("date", "time", "datetime", "timestamp"):
        return _temporal_type(info, modes)
    return None


def _decimal_type(info: ColumnInfo, modes: TypeModes) -> ColumnType:
    if modes.decimal_handling_mode == "double":
        return ColumnType(Schema(Type.FLOAT64), float, 0.0)
    if modes.decimal_handling_mode == "string":
        return ColumnType(Schema(Type.STRING), _plain, "0")
    scale = info.scale or 0
    schema = Decimal.schema(scale, precision=info.precision) if info.precision else Decimal.schema(scale)
    return ColumnType(schema, None, decimal.Decimal(0).scaleb(-scale), "decimal")


def _temporal_type(info: ColumnInfo, modes: TypeModes) -> ColumnType:
    digits = info.datetime_precision or 0
    connect = modes.time_precision_mode == "connect"
    if info.data_type == "date":
        if connect:
            return ColumnType(Date.SCHEMA, None, _EPOCH_DATE)
        return ColumnType(semantic(Type.INT32, "io.debezium.time.Date"), date_days, 0, "date")
    if info.data_type == "time":
        if connect:
            return ColumnType(Time.SCHEMA, connect_time, _dt.time(0))
        return ColumnType(semantic(Type.INT64, "io.debezium.time.MicroTime"), time_micros, 0, "time")
    if info.data_type == "datetime":
        if connect:
            return ColumnType(Timestamp.SCHEMA, _utc, _EPOCH.replace(tzinfo=_dt.UTC))
        if digits <= 3:
            return ColumnType(semantic(Type.INT64, "io.debezium.time.Timestamp"), datetime_millis, 0, "millis")
        return ColumnType(semantic(Type.INT64, "io.debezium.time.MicroTimestamp"), datetime_micros, 0, "micros")
    return ColumnType(
        semantic(Type.STRING, "io.debezium.time.ZonedTimestamp"),
        zoned_timestamp(digits),
        "1970-01-01T00:00:00Z",
        f"zoned:{digits}",
    )


def _utc(value: _dt.datetime) -> _dt.datetime:
    return value.replace(tzinfo=_dt.UTC)


def _plain(value: decimal.Decimal) -> str:
    return format(value, "f")


def _text(value: Any) -> str:
    # A column in a character set Python has no codec for arrives undecoded.
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _json_text(value: Any) -> str:
    """MariaDB's JSON is its text; MySQL's binary JSON arrives decoded (keys and strings as bytes)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode()
    return json.dumps(_json_plain(value), separators=(", ", ": "), ensure_ascii=False)


def _json_plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, dict):
        return {_json_plain(k): _json_plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_plain(v) for v in value]
    return value


def _bit_boolean(value: str) -> bool:
    return value not in ("", "0")
