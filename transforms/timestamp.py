"""TimestampConverter: convert timestamps between strings, Unix epochs and Connect's logical types."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.errors import ConfigError, DataError
from sluice.connectors.api.schema import INT64_SCHEMA, STRING_SCHEMA, Date, Schema, Time, Timestamp, Type
from sluice.connectors.api.transform import R
from sluice.transforms._support import (
    KeyOrValueTransformation,
    SchemaCache,
    copy_struct_schema,
    require_map,
    require_struct,
)
from sluice.transforms.java_time import JavaDateFormat

__all__ = ["TimestampConverter", "TimestampConverterKey", "TimestampConverterValue"]

_PKG = "org.apache.kafka.connect.transforms"
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_US_PER_UNIT = {"seconds": 1_000_000, "milliseconds": 1000, "microseconds": 1}

TargetType = Literal["string", "unix", "Date", "Time", "Timestamp"]


class TimestampConverterConfig(PluginConfig):
    """Settings of TimestampConverter."""

    field: str = Field("", description="The field to convert; empty converts the whole key or value.")
    target_type: TargetType = Field(description="string, unix, Date, Time or Timestamp.")
    format: str = Field("", description="java.text.SimpleDateFormat pattern for string input or output (UTC).")
    unix_precision: Literal["seconds", "milliseconds", "microseconds", "nanoseconds"] = Field(
        "milliseconds", description="Unit of Unix epoch values read or written."
    )
    replace_null_with_default: bool = Field(True, description="Use the field's default when its value is null.")

    @field_validator("format")
    @classmethod
    def _pattern(cls, value: str) -> str:
        if value:
            try:
                JavaDateFormat(value)
            except ConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _format_for_strings(self) -> TimestampConverterConfig:
        if self.target_type == "string" and not self.format:
            raise ValueError("TimestampConverter requires format option to be specified when using string timestamps")
        return self


def _target_schema(target: str, optional: bool) -> Schema:
    base = {
        "string": STRING_SCHEMA,
        "unix": INT64_SCHEMA,
        "Date": Date.SCHEMA,
        "Time": Time.SCHEMA,
        "Timestamp": Timestamp.SCHEMA,
    }[target]
    return base.as_optional() if optional else base


class TimestampConverter(KeyOrValueTransformation):
    """Convert a timestamp field (or the whole key or value) to ``target.type``.

    Input types come from the schema (``Timestamp``/``Date``/``Time`` logical types, string,
    int64) or, without one, from the Python value (``datetime``/``date``/``time``, ``str``,
    ``int``). String formats are Java ``SimpleDateFormat`` patterns, read and written in UTC.
    """

    Config = TimestampConverterConfig

    def _configured(self, config: TimestampConverterConfig) -> None:
        self._field = config.field
        self._target = config.target_type
        self._format = JavaDateFormat(config.format) if config.format else None
        self._precision = config.unix_precision
        self._replace_null = config.replace_null_with_default
        self._schemas: SchemaCache[Schema, Schema] = SchemaCache()

    # -- value conversion -----------------------------------------------------------------------

    def _kind_of_schema(self, schema: Schema, where: str) -> str:
        if schema.name in (Timestamp.LOGICAL_NAME, Date.LOGICAL_NAME, Time.LOGICAL_NAME):
            return schema.name.rsplit(".", 1)[-1]
        if schema.type is Type.STRING:
            return "string"
        if schema.type is Type.INT64:
            return "unix"
        raise DataError(f"{self.label}: {where} has schema type {schema.type.value}, not a timestamp type")

    def _kind_of_value(self, value: Any, where: str) -> str:
        if isinstance(value, _dt.datetime):
            return "Timestamp"
        if isinstance(value, _dt.date):
            return "Date"
        if isinstance(value, _dt.time):
            return "Time"
        if isinstance(value, str):
            return "string"
        if isinstance(value, int) and not isinstance(value, bool):
            return "unix"
        raise DataError(f"{self.label}: {where} is a {type(value).__name__}, not a timestamp, string or epoch number")

    def _to_instant(self, value: Any, kind: str, where: str) -> _dt.datetime:
        try:
            if kind == "Timestamp":
                return value if value.tzinfo is not None else value.replace(tzinfo=_dt.UTC)
            if kind == "Date":
                return _dt.datetime(value.year, value.month, value.day, tzinfo=_dt.UTC)
            if kind == "Time":
                return _dt.datetime.combine(_EPOCH.date(), value.replace(tzinfo=None), tzinfo=_dt.UTC)
            if kind == "string":
                if self._format is None:
                    raise DataError(
                        f"{self.label}: requires format option to be specified when using string timestamps ({where})"
                    )
                return self._format.parse(value)
            if self._precision == "nanoseconds":
                return _EPOCH + _dt.timedelta(microseconds=value // 1000)
            return _EPOCH + _dt.timedelta(microseconds=value * _US_PER_UNIT[self._precision])
        except (AttributeError, TypeError, OverflowError) as exc:
            raise DataError(f"{self.label}: cannot read {where} {value!r} as a {kind} timestamp: {exc}") from None

    def _from_instant(self, instant: _dt.datetime) -> Any:
        target = self._target
        if target == "Timestamp":
            return instant
        if target == "Date":
            return instant.astimezone(_dt.UTC).date()
        if target == "Time":
            return instant.astimezone(_dt.UTC).time()
        if target == "string":
            assert self._format is not None
            return self._format.format(instant)
        micros = (instant - _EPOCH) // _dt.timedelta(microseconds=1)
        if self._precision == "nanoseconds":
            return micros * 1000
        return micros // _US_PER_UNIT[self._precision]

    def _convert(self, value: Any, schema: Schema | None, where: str) -> Any:
        if value is None:
            return None
        kind = self._kind_of_schema(schema, where) if schema is not None else self._kind_of_value(value, where)
        return self._from_instant(self._to_instant(value, kind, where))

    # -- records --------------------------------------------------------------------------------

    def _updated_schema(self, schema: Schema) -> Schema:
        if not self._field:
            self._kind_of_schema(schema, f"the {self.part}")
            return _target_schema(self._target, schema.optional)
        if schema.type is not Type.STRUCT:
            raise DataError(f"{self.label}: field {self._field} needs a struct {self.part}, found {schema.type.value}")
        if schema.field(self._field) is None:
            raise DataError(f"{self.label}: field {self._field} is not in the {self.part} schema")
        fields = [
            (f.name, _target_schema(self._target, f.schema.optional) if f.name == self._field else f.schema)
            for f in schema.fields
        ]
        return copy_struct_schema(schema, fields)

    def apply(self, record: R) -> R:
        schema, data = self.operating(record)
        if schema is None:
            if data is None:
                return record
            if not self._field:
                return self.updated(record, None, self._convert(data, None, f"the {self.part}"))
            values = require_map(data, self.label, "converting timestamp formats")
            if self._field not in values:
                return record
            out = dict(values)
            out[self._field] = self._convert(values[self._field], None, f"field {self._field}")
            return self.updated(record, None, out)
        new_schema = self._schemas.get(schema, self._updated_schema)
        if not self._field:
            if data is None and self._replace_null:
                data = schema.default
            return self.updated(record, new_schema, self._convert(data, schema, f"the {self.part}"))
        if data is None:
            return self.updated(record, new_schema, None)
        struct = require_struct(data, schema, self.label, "converting timestamp formats")
        field = schema.field(self._field)
        assert field is not None
        value = struct.get(self._field)
        if value is None and self._replace_null:
            value = field.schema.default
        out = {f.name: struct.get(f.name) for f in schema.fields}
        out[self._field] = self._convert(value, field.schema, f"field {self._field}")
        return self.updated(record, new_schema, out)


class TimestampConverterKey(TimestampConverter):
    """TimestampConverter on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.TimestampConverter$Key",)


class TimestampConverterValue(TimestampConverter):
    """TimestampConverter on the record value."""

    aliases = (f"{_PKG}.TimestampConverter$Value",)
