"""Cast: change the type of fields, or of the whole key or value, to a primitive type."""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import math
from collections.abc import Callable
from typing import Any

from pydantic import Field

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.errors import ConfigError, DataError
from sluice.connectors.api.schema import Date, Schema, Time, Timestamp, Type
from sluice.connectors.api.transform import R
from sluice.transforms._support import (
    CommaList,
    KeyOrValueTransformation,
    SchemaCache,
    copy_struct_schema,
    require_struct,
)

__all__ = ["Cast", "CastKey", "CastValue"]

_PKG = "org.apache.kafka.connect.transforms"

_TARGETS = {
    t.value: t
    for t in (Type.INT8, Type.INT16, Type.INT32, Type.INT64, Type.FLOAT32, Type.FLOAT64, Type.BOOLEAN, Type.STRING)
}
_RANGES = {Type.INT8: 2**7, Type.INT16: 2**15, Type.INT32: 2**31, Type.INT64: 2**63}
_LOGICAL = {Date.LOGICAL_NAME, Time.LOGICAL_NAME, Timestamp.LOGICAL_NAME, "org.apache.kafka.connect.data.Decimal"}


class CastConfig(PluginConfig):
    """Settings of Cast."""

    spec: CommaList = Field(
        description="field:type pairs (f1:int32,f2:string), or one type to cast the whole key or value.",
        min_length=1,
    )
    replace_null_with_default: bool = Field(True, description="Use a field's default when its value is null.")


def _iso(value: _dt.date | _dt.time) -> str:
    # Connect prints logical types with Values.dateFormatFor: millisecond precision, UTC.
    if isinstance(value, _dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(_dt.UTC)
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    if isinstance(value, _dt.date):
        return value.isoformat()
    return value.strftime("%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def _as_number(value: Any) -> int | float | decimal.Decimal:
    """A value as Connect's Cast sees a number (logical types by their encoding)."""
    if isinstance(value, bool):
        return 1 if value else 0
    if isinstance(value, (int, float, decimal.Decimal)):
        return value
    if isinstance(value, _dt.datetime):
        return Timestamp.to_int(value)
    if isinstance(value, _dt.date):
        return Date.to_int(value)
    if isinstance(value, _dt.time):
        return Time.to_int(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            return float(text)
    raise TypeError(type(value).__name__)


def _caster(target: Type) -> Callable[[Any], Any]:
    if target in _RANGES:
        bound = _RANGES[target]

        def to_int(value: Any) -> int:
            number = _as_number(value)
            if isinstance(number, float) and not math.isfinite(number):
                raise ValueError(f"{number} has no integer value")
            result = int(number)  # truncates toward zero, as Java's intValue() does
            if not -bound <= result < bound:
                raise ValueError(f"{result} is out of range for {target.value}")
            return result

        return to_int
    if target in (Type.FLOAT32, Type.FLOAT64):
        return lambda value: float(_as_number(value))
    if target is Type.BOOLEAN:

        def to_bool(value: Any) -> bool:
            if isinstance(value, str):
                return value.strip().lower() == "true"  # Java's Boolean.parseBoolean
            return _as_number(value) != 0

        return to_bool

    def to_str(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (bytes, bytearray, memoryview)):
            return base64.b64encode(bytes(value)).decode("ascii")
        if isinstance(value, (_dt.date, _dt.time)):
            return _iso(value)
        if isinstance(value, (dict, list)):
            raise TypeError(type(value).__name__)
        return str(value)

    return to_str


def _parse_spec(spec: tuple[str, ...]) -> tuple[Type | None, dict[str, Type]]:
    """``("int64",)`` casts the whole value; ``("a:int32", "b:string")`` casts fields."""
    if len(spec) == 1 and ":" not in spec[0]:
        return _target(spec[0]), {}
    casts: dict[str, Type] = {}
    for item in spec:
        name, sep, type_name = item.rpartition(":")
        if not sep or not name.strip():
            raise ConfigError(f"Invalid cast spec {item!r}: expected field:type or a single type", key="spec")
        casts[name.strip()] = _target(type_name)
    return None, casts


def _target(name: str) -> Type:
    target = _TARGETS.get(name.strip().lower())
    if target is None:
        raise ConfigError(f"Invalid cast type {name!r}: expected one of {', '.join(_TARGETS)}", key="spec")
    return target


class Cast(KeyOrValueTransformation):
    """Cast fields, or the whole key or value, to int8…int64, float32/64, boolean or string.

    Logical types cast to string in ISO 8601 (UTC) and to numbers by their Connect encoding; bytes
    cast to string in base64. Tombstones pass through. A number that does not fit the target type
    is a data error (Java would wrap it silently).
    """

    Config = CastConfig

    def _configured(self, config: CastConfig) -> None:
        whole, casts = _parse_spec(config.spec)
        self._whole = whole
        self._whole_cast = _caster(whole) if whole is not None else None
        self._casts = {name: _caster(target) for name, target in casts.items()}
        self._targets = casts
        self._replace_null = config.replace_null_with_default
        self._schemas: SchemaCache[Schema, Schema] = SchemaCache()

    def _cast(self, fn: Callable[[Any], Any], value: Any, target: Type, where: str) -> Any:
        try:
            return fn(value)
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise DataError(
                f"{self.label}: cannot cast {where} {value!r} ({type(value).__name__}) to {target.value}: {exc}"
            ) from None

    def _target_schema(self, source: Schema, target: Type, where: str) -> Schema:
        if not (source.type.is_primitive or source.name in _LOGICAL):
            raise DataError(f"{self.label}: cannot cast {where} of type {source.type.value}; only primitive types")
        default = source.default
        if default is not None:
            default = self._cast(_caster(target), default, target, f"the default of {where}")
        return Schema(target, optional=source.optional, default=default)

    def _updated_schema(self, schema: Schema) -> Schema:
        if self._whole is not None:
            return self._target_schema(schema, self._whole, f"the {self.part}")
        if schema.type is not Type.STRUCT:
            raise DataError(f"{self.label}: field casts need a struct {self.part}, found type {schema.type.value}")
        fields = []
        for f in schema.fields:
            target = self._targets.get(f.name)
            fields.append((f.name, self._target_schema(f.schema, target, f"field {f.name}") if target else f.schema))
        return copy_struct_schema(schema, fields)

    def apply(self, record: R) -> R:
        schema, data = self.operating(record)
        if data is None:
            return record
        new_schema = self._schemas.get(schema, self._updated_schema) if schema is not None else None
        if self._whole_cast is not None:
            assert self._whole is not None
            if isinstance(data, (dict, list)):
                raise DataError(f"{self.label}: cannot cast a whole {self.part} of type {type(data).__name__}")
            return self.updated(record, new_schema, self._cast(self._whole_cast, data, self._whole, f"the {self.part}"))
        if schema is None:
            if not isinstance(data, dict):
                raise DataError(f"{self.label}: field casts need a map {self.part}, found {type(data).__name__}")
            out = dict(data)
            for name, fn in self._casts.items():
                value = out.get(name)
                if value is not None:
                    out[name] = self._cast(fn, value, self._targets[name], f"field {name}")
            return self.updated(record, None, out)
        struct = require_struct(data, schema, self.label, "casting")
        out = {}
        for f in schema.fields:
            value = struct.get(f.name)
            if value is None and self._replace_null:
                value = f.schema.default
            field_cast = self._casts.get(f.name)
            if field_cast is not None and value is not None:
                value = self._cast(field_cast, value, self._targets[f.name], f"field {f.name}")
            out[f.name] = value
        return self.updated(record, new_schema, out)


class CastKey(Cast):
    """Cast on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.Cast$Key",)


class CastValue(Cast):
    """Cast on the record value."""

    aliases = (f"{_PKG}.Cast$Value",)
