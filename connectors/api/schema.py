"""Kafka Connect's data model: schema types, logical types and value validation.

Values are plain Python data: ``int`` for the integer types, ``float``, ``bool``, ``str``, ``bytes``,
``list`` for arrays, ``dict`` for maps and for structs (field name → value, in schema order). The
logical types carry :class:`decimal.Decimal`, :class:`datetime.date`, :class:`datetime.time` and
timezone-aware :class:`datetime.datetime` values. A :class:`Schema` describes a value when it is
known; ``None`` means schemaless data.
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from sluice.connectors.api.errors import DataError


class Type(enum.StrEnum):
    """Connect's schema types; the value is Connect's lower-case type name."""

    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    FLOAT32 = "float32"
    FLOAT64 = "float64"
    BOOLEAN = "boolean"
    STRING = "string"
    BYTES = "bytes"
    ARRAY = "array"
    MAP = "map"
    STRUCT = "struct"

    @property
    def is_primitive(self) -> bool:
        return self not in (Type.ARRAY, Type.MAP, Type.STRUCT)


_INT_RANGES = {
    Type.INT8: (-(2**7), 2**7 - 1),
    Type.INT16: (-(2**15), 2**15 - 1),
    Type.INT32: (-(2**31), 2**31 - 1),
    Type.INT64: (-(2**63), 2**63 - 1),
}


@dataclass(frozen=True)
class Field:
    """One field of a struct schema."""

    name: str
    index: int
    schema: Schema


@dataclass(frozen=True)
class Schema:
    """An immutable Connect schema.

    Build them with the constructors (:meth:`struct`, :meth:`array`, :meth:`map`), the module
    constants (``INT32_SCHEMA``, ``OPTIONAL_STRING_SCHEMA``, …) and the logical types
    (:class:`Decimal`, :class:`Date`, :class:`Time`, :class:`Timestamp`); derive variants with
    :meth:`as_optional` and :meth:`with_`.
    """

    type: Type
    optional: bool = False
    default: Any = None
    name: str | None = None
    version: int | None = None
    doc: str | None = None
    parameters: Mapping[str, str] | None = None
    fields: tuple[Field, ...] = ()
    key_schema: Schema | None = None
    value_schema: Schema | None = None
    _field_index: dict[str, Field] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.type, Type):
            object.__setattr__(self, "type", Type(self.type))
        if self.type is Type.STRUCT:
            self._field_index.update((f.name, f) for f in self.fields)
        elif self.fields:
            raise DataError(f"Cannot define fields on a {self.type.value} schema")
        if self.type is Type.ARRAY and self.value_schema is None:
            raise DataError("An array schema needs a value (item) schema")
        if self.type is Type.MAP and (self.key_schema is None or self.value_schema is None):
            raise DataError("A map schema needs a key schema and a value schema")
        if self.default is not None:
            validate_value(self, self.default, "default value")

    def __hash__(self) -> int:
        # Parameters and defaults may be dicts; equal schemas still hash equally on these.
        return hash((self.type, self.optional, self.name, self.version, len(self.fields)))

    # -- construction -------------------------------------------------------------------------

    @staticmethod
    def struct(
        fields: Iterable[tuple[str, Schema]],
        *,
        name: str | None = None,
        optional: bool = False,
        version: int | None = None,
        doc: str | None = None,
        default: Any = None,
        parameters: Mapping[str, str] | None = None,
    ) -> Schema:
        """A struct schema from ``(field name, field schema)`` pairs, in order."""
        built = []
        seen: set[str] = set()
        for index, (fname, fschema) in enumerate(fields):
            if fname in seen:
                raise DataError(f"Cannot create field because of field name duplication {fname}")
            seen.add(fname)
            built.append(Field(fname, index, fschema))
        return Schema(
            Type.STRUCT,
            optional=optional,
            name=name,
            version=version,
            doc=doc,
            default=default,
            parameters=parameters,
            fields=tuple(built),
        )

    @staticmethod
    def array(items: Schema, *, optional: bool = False, name: str | None = None, default: Any = None) -> Schema:
        """An array schema whose elements follow ``items``."""
        return Schema(Type.ARRAY, optional=optional, name=name, default=default, value_schema=items)

    @staticmethod
    def map(keys: Schema, values: Schema, *, optional: bool = False, name: str | None = None, default: Any = None) -> Schema:
        """A map schema from ``keys`` to ``values``."""
        return Schema(Type.MAP, optional=optional, name=name, default=default, key_schema=keys, value_schema=values)

    def as_optional(self) -> Schema:
        """The same schema, optional."""
        return self if self.optional else replace(self, optional=True)

    def with_(self, **changes: Any) -> Schema:
        """A copy with the given attributes changed (``name=``, ``version=``, ``default=``, …)."""
        return replace(self, **changes)

    # -- access -------------------------------------------------------------------------------

    def field(self, name: str) -> Field | None:
        """The struct field called ``name``, or ``None``."""
        if self.type is not Type.STRUCT:
            raise DataError(f"Cannot look up fields on non-struct type {self.type.value}")
        return self._field_index.get(name)


class SchemaAndValue(NamedTuple):
    """A value with the schema that describes it (``schema`` may be ``None``)."""

    schema: Schema | None
    value: Any


INT8_SCHEMA = Schema(Type.INT8)
INT16_SCHEMA = Schema(Type.INT16)
INT32_SCHEMA = Schema(Type.INT32)
INT64_SCHEMA = Schema(Type.INT64)
FLOAT32_SCHEMA = Schema(Type.FLOAT32)
FLOAT64_SCHEMA = Schema(Type.FLOAT64)
BOOLEAN_SCHEMA = Schema(Type.BOOLEAN)
STRING_SCHEMA = Schema(Type.STRING)
BYTES_SCHEMA = Schema(Type.BYTES)
OPTIONAL_INT8_SCHEMA = Schema(Type.INT8, optional=True)
OPTIONAL_INT16_SCHEMA = Schema(Type.INT16, optional=True)
OPTIONAL_INT32_SCHEMA = Schema(Type.INT32, optional=True)
OPTIONAL_INT64_SCHEMA = Schema(Type.INT64, optional=True)
OPTIONAL_FLOAT32_SCHEMA = Schema(Type.FLOAT32, optional=True)
OPTIONAL_FLOAT64_SCHEMA = Schema(Type.FLOAT64, optional=True)
OPTIONAL_BOOLEAN_SCHEMA = Schema(Type.BOOLEAN, optional=True)
OPTIONAL_STRING_SCHEMA = Schema(Type.STRING, optional=True)
OPTIONAL_BYTES_SCHEMA = Schema(Type.BYTES, optional=True)


# -- logical types ------------------------------------------------------------------------------

_EPOCH_DATE = _dt.date(1970, 1, 1)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


class Decimal:
    """Connect's ``Decimal`` logical type: bytes holding the big-endian two's-complement unscaled value."""

    LOGICAL_NAME = "org.apache.kafka.connect.data.Decimal"
    SCALE_FIELD = "scale"

    @staticmethod
    def schema(scale: int, *, optional: bool = False, precision: int | None = None) -> Schema:
        params = {Decimal.SCALE_FIELD: str(scale)}
        if precision is not None:
            params["connect.decimal.precision"] = str(precision)
        return Schema(Type.BYTES, optional=optional, name=Decimal.LOGICAL_NAME, version=1, parameters=params)

    @staticmethod
    def scale(schema: Schema) -> int:
        try:
            return int((schema.parameters or {})[Decimal.SCALE_FIELD])
        except (KeyError, ValueError) as exc:
            raise DataError("Invalid Decimal schema: the scale parameter is missing or not an integer") from exc

    @staticmethod
    def to_bytes(value: _decimal.Decimal, scale: int) -> bytes:
        """Encode ``value`` at ``scale``; a value with more fractional digits is an error, never rounded."""
        unscaled = value.scaleb(scale)
        if unscaled != unscaled.to_integral_value():
            raise DataError(f"Decimal value {value} has more than {scale} fractional digits")
        n = int(unscaled)
        length = max(1, (n + (n < 0)).bit_length() // 8 + 1)
        return n.to_bytes(length, "big", signed=True)

    @staticmethod
    def from_bytes(data: bytes, scale: int) -> _decimal.Decimal:
        return _decimal.Decimal(int.from_bytes(data, "big", signed=True)).scaleb(-scale)


class Date:
    """Connect's ``Date`` logical type: int32 days since the Unix epoch."""

    LOGICAL_NAME = "org.apache.kafka.connect.data.Date"
    SCHEMA = Schema(Type.INT32, name=LOGICAL_NAME, version=1)
    OPTIONAL_SCHEMA = Schema(Type.INT32, optional=True, name=LOGICAL_NAME, version=1)

    @staticmethod
    def to_int(value: _dt.date) -> int:
        if isinstance(value, _dt.datetime):
            value = value.date()
        return (value - _EPOCH_DATE).days

    @staticmethod
    def from_int(days: int) -> _dt.date:
        return _EPOCH_DATE + _dt.timedelta(days=days)


class Time:
    """Connect's ``Time`` logical type: int32 milliseconds since midnight."""

    LOGICAL_NAME = "org.apache.kafka.connect.data.Time"
    SCHEMA = Schema(Type.INT32, name=LOGICAL_NAME, version=1)
    OPTIONAL_SCHEMA = Schema(Type.INT32, optional=True, name=LOGICAL_NAME, version=1)

    @staticmethod
    def to_int(value: _dt.time) -> int:
        return ((value.hour * 60 + value.minute) * 60 + value.second) * 1000 + value.microsecond // 1000

    @staticmethod
    def from_int(millis: int) -> _dt.time:
        if not 0 <= millis < 86_400_000:
            raise DataError(f"Time value {millis} is not within one day (0..86399999 ms)")
        seconds, ms = divmod(millis, 1000)
        minutes, second = divmod(seconds, 60)
        hour, minute = divmod(minutes, 60)
        return _dt.time(hour, minute, second, ms * 1000)


class Timestamp:
    """Connect's ``Timestamp`` logical type: int64 milliseconds since the Unix epoch (UTC)."""

    LOGICAL_NAME = "org.apache.kafka.connect.data.Timestamp"
    SCHEMA = Schema(Type.INT64, name=LOGICAL_NAME, version=1)
    OPTIONAL_SCHEMA = Schema(Type.INT64, optional=True, name=LOGICAL_NAME, version=1)

    @staticmethod
    def to_int(value: _dt.datetime) -> int:
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        delta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000

    @staticmethod
    def from_int(millis: int) -> _dt.datetime:
        return _EPOCH + _dt.timedelta(milliseconds=millis)


LOGICAL_TYPES = {
    Decimal.LOGICAL_NAME: Type.BYTES,
    Date.LOGICAL_NAME: Type.INT32,
    Time.LOGICAL_NAME: Type.INT32,
    Timestamp.LOGICAL_NAME: Type.INT64,
}


# -- validation ---------------------------------------------------------------------------------

_PY_TYPES: dict[Type, tuple[type, ...]] = {
    Type.INT8: (int,),
    Type.INT16: (int,),
    Type.INT32: (int,),
    Type.INT64: (int,),
    Type.FLOAT32: (float, int),
    Type.FLOAT64: (float, int),
    Type.BOOLEAN: (bool,),
    Type.STRING: (str,),
    Type.BYTES: (bytes, bytearray, memoryview),
    Type.ARRAY: (list, tuple),
    Type.MAP: (dict, Mapping),
    Type.STRUCT: (dict, Mapping),
}

_LOGICAL_PY_TYPES: dict[str, tuple[type, ...]] = {
    Decimal.LOGICAL_NAME: (_decimal.Decimal,),
    Date.LOGICAL_NAME: (_dt.date,),
    Time.LOGICAL_NAME: (_dt.time,),
    Timestamp.LOGICAL_NAME: (_dt.datetime,),
}


def _is_instance(value: Any, types: tuple[type, ...]) -> bool:
    # A separate function, so type checkers do not narrow ``value`` to ``object`` afterwards.
    return isinstance(value, types)


def validate_value(schema: Schema, value: Any, where: str = "value") -> None:
    """Raise :class:`DataError` naming the path of the first part of ``value`` that ``schema`` rejects."""
    if value is None:
        if schema.optional or schema.default is not None:
            return
        raise DataError(f"Invalid {where}: null used for required field, schema type {schema.type.value}")
    expected: tuple[type, ...] | None = _LOGICAL_PY_TYPES.get(schema.name or "")
    if expected is None:
        expected = _PY_TYPES[schema.type]
        if schema.type in _INT_RANGES or schema.type is Type.FLOAT32 or schema.type is Type.FLOAT64:
            if isinstance(value, bool):
                expected = ()
    if not _is_instance(value, expected):
        raise DataError(
            f"Invalid Java object for schema with type {schema.type.value.upper()}: {type(value).__name__} "
            f"for {where}"
        )
    rng = _INT_RANGES.get(schema.type)
    if rng is not None and schema.name is None and not rng[0] <= value <= rng[1]:
        raise DataError(f"Invalid {where}: {value} is out of range for {schema.type.value}")
    if schema.type is Type.STRUCT:
        for f in schema.fields:
            validate_value(f.schema, value.get(f.name), f"{where}.{f.name}")
        extra = set(value) - set(schema._field_index)
        if extra:
            raise DataError(f"Invalid {where}: fields {sorted(extra)} are not in the struct schema")
    elif schema.type is Type.ARRAY:
        assert schema.value_schema is not None
        for i, item in enumerate(value):
            validate_value(schema.value_schema, item, f"{where}[{i}]")
    elif schema.type is Type.MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        for k, v in value.items():
            validate_value(schema.key_schema, k, f"{where} key")
            validate_value(schema.value_schema, v, f"{where}[{k!r}]")


def infer_schema(value: Any) -> Schema | None:
    """The schema Connect would infer for schemaless ``value`` (``None`` when it cannot)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return BOOLEAN_SCHEMA
    if isinstance(value, int):
        return INT64_SCHEMA
    if isinstance(value, float):
        return FLOAT64_SCHEMA
    if isinstance(value, str):
        return STRING_SCHEMA
    if isinstance(value, (bytes, bytearray)):
        return BYTES_SCHEMA
    return None


__all__ = [
    "Type",
    "Field",
    "Schema",
    "SchemaAndValue",
    "Decimal",
    "Date",
    "Time",
    "Timestamp",
    "LOGICAL_TYPES",
    "validate_value",
    "infer_schema",
]
