"""Column types ↔ Connect schemas, and the per-column value conversions both directions need.

Source side: :func:`column_schema` maps a reflected SQLAlchemy column type to a Connect schema
and, when the driver's Python value is not already what the schema promises, a converter
(naive timestamps get the ``db.timezone``; JSON documents become text; UUIDs become strings).

Sink side: :func:`value_adapter` turns a Connect value into what a driver accepts for the column
(aware timestamps become naive in ``db.timezone``; structs, maps and nested arrays become JSON
text; SQLite gets text for decimals and dates).
"""

from __future__ import annotations

import datetime as _dt
import decimal
import enum
import uuid
import zoneinfo
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from sluice.connectors.api import (
    BOOLEAN_SCHEMA,
    BYTES_SCHEMA,
    FLOAT32_SCHEMA,
    FLOAT64_SCHEMA,
    INT8_SCHEMA,
    INT16_SCHEMA,
    INT32_SCHEMA,
    INT64_SCHEMA,
    STRING_SCHEMA,
    ConfigError,
    Date,
    Decimal,
    Schema,
    Time,
    Timestamp,
    Type,
)

Converter = Callable[[Any], Any]


class NumericMapping(enum.StrEnum):
    """``numeric.mapping``: how NUMERIC/DECIMAL columns become Connect types."""

    NONE = "none"
    BEST_FIT = "best_fit"
    BEST_FIT_EAGER_DOUBLE = "best_fit_eager_double"
    PRECISION_ONLY = "precision_only"


def timezone(name: str) -> _dt.tzinfo:
    """``db.timezone`` as a tzinfo; raises :class:`ConfigError` for an unknown zone."""
    if name.upper() in ("UTC", "Z", "GMT"):
        return _dt.UTC
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError(f"db.timezone: unknown time zone {name!r}", key="db.timezone") from None


# -- source: column type → schema ------------------------------------------------------------------


def column_schema(
    sa_type: Any, *, optional: bool, numeric_mapping: NumericMapping, tz: _dt.tzinfo, backend: str = ""
) -> tuple[Schema, Converter | None]:
    """The Connect schema of a column of SQLAlchemy type ``sa_type``, and a value converter or ``None``."""
    from sqlalchemy import types as t

    schema, convert = _base_schema(sa_type, numeric_mapping, tz, t, backend)
    if optional:
        schema = schema.as_optional()
    if convert is not None:
        inner = convert

        def convert(value: Any) -> Any:
            return None if value is None else inner(value)

    return schema, convert


def _base_schema(  # noqa: C901
    sa_type: Any, mapping: NumericMapping, tz: _dt.tzinfo, t: Any, backend: str
) -> tuple[Schema, Converter | None]:
    # Values come through SQLAlchemy's result processing, so most already have the right Python
    # type; a converter is attached only where they do not.
    from sqlalchemy.dialects import postgresql as pg

    type_name = type(sa_type).__name__.upper()
    if isinstance(sa_type, t.Boolean):
        return BOOLEAN_SCHEMA, None
    if isinstance(sa_type, (t.ARRAY, pg.ARRAY)):
        item_schema, item_convert = column_schema(
            sa_type.item_type, optional=True, numeric_mapping=mapping, tz=tz, backend=backend
        )
        if item_convert is None:
            return Schema.array(item_schema), None
        return Schema.array(item_schema), lambda v: [item_convert(x) for x in v]
    if isinstance(sa_type, t.Integer):
        if isinstance(sa_type, t.BigInteger):
            return INT64_SCHEMA, None
        if "TINY" in type_name:
            return INT8_SCHEMA, None
        if isinstance(sa_type, t.SmallInteger):
            return INT16_SCHEMA, None
        if backend == "sqlite" or getattr(sa_type, "unsigned", False):
            return INT64_SCHEMA, None  # SQLite's INTEGER holds 64-bit values; so may an unsigned INT
        return INT32_SCHEMA, None
    if isinstance(sa_type, t.Float):
        single = isinstance(sa_type, t.REAL) or _is_single(sa_type) or (backend == "mysql" and type_name == "FLOAT")
        # SQLAlchemy's MySQL DOUBLE/FLOAT hand back Decimals unless told otherwise.
        to_float = _to_float if getattr(sa_type, "asdecimal", False) else None
        if backend != "sqlite" and single:
            return FLOAT32_SCHEMA, to_float  # SQLite's REAL is 8 bytes wide
        return FLOAT64_SCHEMA, to_float
    if isinstance(sa_type, t.Numeric):
        return _numeric_schema(sa_type.precision, sa_type.scale, mapping)
    if isinstance(sa_type, t.DateTime):
        return Timestamp.SCHEMA, (None if tz is _dt.UTC else _timestamp_converter(tz))
    if isinstance(sa_type, t.Date):
        return Date.SCHEMA, None
    if isinstance(sa_type, t.Time):
        return Time.SCHEMA, _time_converter
    if isinstance(sa_type, t.JSON) or type_name in ("JSON", "JSONB"):
        return STRING_SCHEMA, _json_text
    if isinstance(sa_type, t._Binary):
        return BYTES_SCHEMA, None
    if isinstance(sa_type, t.Uuid) or type_name == "UUID":
        return STRING_SCHEMA, _to_text
    if isinstance(sa_type, t.Enum):
        return STRING_SCHEMA, _to_text
    if isinstance(sa_type, t.String):
        return STRING_SCHEMA, None
    # INTERVAL, INET, MONEY, geometric types and anything the dialect does not know: their text.
    return STRING_SCHEMA, _to_text


def _is_single(sa_type: Any) -> bool:
    precision = getattr(sa_type, "precision", None)
    return precision is not None and precision <= 24


#: The Decimal scale of a NUMERIC column declared without precision and scale (PostgreSQL's
#: unconstrained ``numeric``, SQLite's ``NUMERIC``): Confluent's value for an unset scale, so no
#: fractional digit the database can hold in practice is lost. The schema carries no precision,
#: so a sink that creates the table declares an unconstrained NUMERIC again.
UNCONSTRAINED_SCALE = 127
#: The largest precision that still fits a Connect integer type (Confluent's rule).
_MAX_INTEGER_PRECISION = 18
_NUMERIC_SCALE_LOW = -84
_EXACT = decimal.Context(prec=2000)


def _numeric_schema(
    precision: int | None, scale: int | None, mapping: NumericMapping
) -> tuple[Schema, Converter | None]:
    """``numeric.mapping`` as Confluent defines it: ``none`` keeps every NUMERIC/DECIMAL a Connect
    Decimal; ``precision_only`` makes integers of those with scale 0 and precision <= 18;
    ``best_fit`` also makes FLOAT64 of those with a positive scale (precision <= 18);
    ``best_fit_eager_double`` makes FLOAT64 of any positive scale. A column without declared
    precision cannot be fitted and stays a Decimal (FLOAT64 for ``best_fit_eager_double``)."""
    if not precision:
        if mapping is NumericMapping.BEST_FIT_EAGER_DOUBLE:
            return FLOAT64_SCHEMA, _to_float
        return Decimal.schema(UNCONSTRAINED_SCALE), _decimal_converter(UNCONSTRAINED_SCALE)
    scale = scale or 0
    integral = precision <= _MAX_INTEGER_PRECISION and _NUMERIC_SCALE_LOW <= scale < 1
    if mapping is NumericMapping.PRECISION_ONLY and scale == 0 and precision <= _MAX_INTEGER_PRECISION:
        return _integer_schema(precision)
    if mapping is NumericMapping.BEST_FIT and precision <= _MAX_INTEGER_PRECISION:
        if integral:
            return _integer_schema(precision)
        if scale > 0:
            return FLOAT64_SCHEMA, _to_float
    if mapping is NumericMapping.BEST_FIT_EAGER_DOUBLE:
        if scale > 0:
            return FLOAT64_SCHEMA, _to_float
        if integral:
            return _integer_schema(precision)
    return Decimal.schema(scale, precision=precision), _decimal_converter(scale)


def _integer_schema(precision: int) -> tuple[Schema, Converter]:
    if precision > 9:
        return INT64_SCHEMA, int
    if precision > 4:
        return INT32_SCHEMA, int
    if precision > 2:
        return INT16_SCHEMA, int
    return INT8_SCHEMA, int


def _decimal_converter(scale: int) -> Converter:
    quantum = decimal.Decimal(1).scaleb(-scale)

    def to_decimal(value: Any) -> decimal.Decimal:
        d = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
        if d.as_tuple().exponent == -scale:
            return d
        return d.quantize(quantum, context=_EXACT)

    return to_decimal


def _to_float(value: Any) -> Any:
    return value if isinstance(value, float) else float(value)


def _timestamp_converter(tz: _dt.tzinfo) -> Converter:
    def convert(value: Any) -> _dt.datetime:
        if isinstance(value, str):
            value = _dt.datetime.fromisoformat(value)
        if value.tzinfo is None:
            return value.replace(tzinfo=tz)
        return value  # type: ignore[no-any-return]

    return convert


def _date_converter(value: Any) -> _dt.date:
    if isinstance(value, _dt.datetime):
        return value.date()
    if isinstance(value, str):
        return _dt.date.fromisoformat(value[:10])
    return value  # type: ignore[no-any-return]


def _time_converter(value: Any) -> _dt.time:
    if isinstance(value, _dt.timedelta):  # MySQL's TIME comes back as a timedelta
        return (_dt.datetime.min + value).time()
    if isinstance(value, str):
        return _dt.time.fromisoformat(value)
    if value.tzinfo is not None:
        return value.replace(tzinfo=None)  # type: ignore[no-any-return]
    return value  # type: ignore[no-any-return]


def _json_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=_json_default).decode()


def _to_text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


def _json_default(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"Cannot encode {type(value).__name__} as JSON")


def value_schema_from_python(value: Any) -> Schema:
    """The optional schema of a query-mode column, judged by a value the driver returned."""
    if isinstance(value, bool):
        return BOOLEAN_SCHEMA.as_optional()
    if isinstance(value, int):
        return INT64_SCHEMA.as_optional()
    if isinstance(value, float):
        return FLOAT64_SCHEMA.as_optional()
    if isinstance(value, decimal.Decimal):
        exponent = value.as_tuple().exponent
        return Decimal.schema(-exponent if isinstance(exponent, int) and exponent < 0 else 0, optional=True)
    if isinstance(value, _dt.datetime):
        return Timestamp.OPTIONAL_SCHEMA
    if isinstance(value, _dt.date):
        return Date.OPTIONAL_SCHEMA
    if isinstance(value, (_dt.time, _dt.timedelta)):
        return Time.OPTIONAL_SCHEMA
    if isinstance(value, (bytes, bytearray, memoryview)):
        return BYTES_SCHEMA.as_optional()
    return STRING_SCHEMA.as_optional()


def converter_for_schema(schema: Schema, tz: _dt.tzinfo) -> Converter | None:
    """The source-side converter for a schema inferred by :func:`value_schema_from_python`."""
    name = schema.name
    if name == Timestamp.LOGICAL_NAME:
        convert = _timestamp_converter(tz)
    elif name == Date.LOGICAL_NAME:
        convert = _date_converter
    elif name == Time.LOGICAL_NAME:
        convert = _time_converter
    elif name == Decimal.LOGICAL_NAME:
        scale = Decimal.scale(schema)
        quantum = decimal.Decimal(1).scaleb(-scale)

        def convert(value: Any) -> Any:
            return decimal.Decimal(value).quantize(quantum)

    elif schema.type is Type.STRING:
        convert = _json_text
    elif schema.type is Type.BYTES:
        convert = bytes
    else:
        return None
    inner = convert
    return lambda v: None if v is None else inner(v)


# -- sink: Connect value → driver parameter ---------------------------------------------------------


def value_adapter(schema: Schema | None, backend: str, tz: _dt.tzinfo) -> Converter | None:
    """How to turn a value of ``schema`` (``None``: schemaless) into a parameter for ``backend``.

    ``None`` means the value needs no conversion (the common case, which keeps the hot loop free
    of per-value calls).
    """
    name = schema.name if schema is not None else None
    kind = schema.type if schema is not None else None
    sqlite = backend == "sqlite"
    if name == Timestamp.LOGICAL_NAME:
        convert: Converter = _naive_in(tz, sqlite)
    elif name == Decimal.LOGICAL_NAME:
        if not sqlite:
            return None
        convert = str
    elif name in (Date.LOGICAL_NAME, Time.LOGICAL_NAME):
        if not sqlite:
            return None
        convert = _iso
    elif kind in (Type.STRUCT, Type.MAP) or (
        kind is Type.ARRAY and (sqlite or backend != "postgresql" or _nested(schema))
    ):
        convert = _json_text
    elif schema is None:
        return _schemaless_adapter(backend, tz)
    else:
        return None

    def adapt(value: Any) -> Any:
        return None if value is None else convert(value)

    return adapt


def _nested(schema: Schema | None) -> bool:
    item = schema.value_schema if schema is not None else None
    return item is None or not (item.type.is_primitive or item.name)


def _naive_in(tz: _dt.tzinfo, as_text: bool) -> Converter:
    def convert(value: Any) -> Any:
        if isinstance(value, _dt.datetime):
            if value.tzinfo is not None:
                value = value.astimezone(tz).replace(tzinfo=None)
            return value.isoformat(" ") if as_text else value
        if isinstance(value, int):  # a schemaless epoch-millis value
            return _naive_in(tz, as_text)(Timestamp.from_int(value))
        return value

    return convert


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, (_dt.date, _dt.time)) else value


def _schemaless_adapter(backend: str, tz: _dt.tzinfo) -> Converter:
    sqlite = backend == "sqlite"

    def adapt(value: Any) -> Any:
        if value is None or isinstance(value, (str, int, float, bool, bytes)):
            return value
        if isinstance(value, (dict, list, tuple)):
            return _json_text(value)
        if isinstance(value, _dt.datetime):
            return _naive_in(tz, sqlite)(value)
        if sqlite and isinstance(value, (decimal.Decimal, _dt.date, _dt.time)):
            return str(value) if isinstance(value, decimal.Decimal) else value.isoformat()
        return value

    return adapt


def infer_field_schema(values: Iterable[Any]) -> Schema:
    """The optional schema of a schemaless field, from the first non-null value seen."""
    for value in values:
        if value is not None:
            if isinstance(value, (dict, list, tuple)):
                # Written as JSON text (JSONB on PostgreSQL), whatever the items are.
                return Schema.map(STRING_SCHEMA, STRING_SCHEMA, optional=True)
            return value_schema_from_python(value)
    return STRING_SCHEMA.as_optional()
