"""Field-level SMTs: ExtractField, HoistField, MaskField, ValueToKey here; InsertField and ReplaceField
(re-exported) in :mod:`~sluice.transforms.insert_field` and :mod:`~sluice.transforms.replace_field`."""

from __future__ import annotations

import datetime as _dt
import decimal
from typing import Any, ClassVar, Literal

from pydantic import Field

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.errors import DataError
from sluice.connectors.api.schema import Schema, Type
from sluice.connectors.api.transform import R
from sluice.transforms._support import (
    BuiltinTransformation,
    CommaList,
    KeyOrValueTransformation,
    SchemaCache,
    field_path,
    require_map,
    require_struct,
    with_key,
)
from sluice.transforms.insert_field import InsertField, InsertFieldConfig, InsertFieldKey, InsertFieldValue
from sluice.transforms.replace_field import ReplaceField, ReplaceFieldConfig, ReplaceFieldKey, ReplaceFieldValue

__all__ = [
    "ExtractField",
    "ExtractFieldKey",
    "ExtractFieldValue",
    "HoistField",
    "HoistFieldKey",
    "HoistFieldValue",
    "InsertField",
    "InsertFieldConfig",
    "InsertFieldKey",
    "InsertFieldValue",
    "MaskField",
    "MaskFieldKey",
    "MaskFieldValue",
    "ReplaceField",
    "ReplaceFieldConfig",
    "ReplaceFieldKey",
    "ReplaceFieldValue",
    "ValueToKey",
]

_PKG = "org.apache.kafka.connect.transforms"

SyntaxVersion = Literal["V1", "V2"]


# -- ExtractField --------------------------------------------------------------------------------


class ExtractFieldConfig(PluginConfig):
    """Settings of ExtractField."""

    field: str = Field(description="Field name to extract (a dotted path with field.syntax.version=V2).")
    field_syntax_version: SyntaxVersion = Field("V1", description="V1: names as written; V2: dotted nested paths.")
    replace_null_with_default: bool = Field(True, description="Use the field's default when its value is null.")


class ExtractField(KeyOrValueTransformation):
    """Replace the key or value with one of its fields (``ExtractField$Key`` / ``$Value``)."""

    Config = ExtractFieldConfig

    def _configured(self, config: ExtractFieldConfig) -> None:
        self._path = field_path(config.field, config.field_syntax_version)
        self._replace_null = config.replace_null_with_default
        self._schemas: SchemaCache[Schema, Schema] = SchemaCache()

    def _field_schema(self, schema: Schema) -> Schema:
        current = schema
        for name in self._path:
            if current.type is not Type.STRUCT:
                raise DataError(f"{self.label}: {'.'.join(self._path)} is not a path of struct fields")
            f = current.field(name)
            if f is None:
                raise DataError(f"{self.label}: unknown field {'.'.join(self._path)} in the {self.part} schema")
            current = f.schema
        return current

    def apply(self, record: R) -> R:
        schema, data = self.operating(record)
        if schema is None:
            if data is None:
                return self.updated(record, None, None)
            current = require_map(data, self.label, "field extraction")
            for name in self._path[:-1]:
                nested = current.get(name)
                if not isinstance(nested, dict):
                    return self.updated(record, None, None)
                current = nested
            return self.updated(record, None, current.get(self._path[-1]))
        field_schema = self._schemas.get(schema, self._field_schema)
        if data is None:
            return self.updated(record, field_schema, None)
        current = require_struct(data, schema, self.label, "field extraction")
        value: Any = current
        for name in self._path:
            value = value.get(name) if value is not None else None
        if value is None and self._replace_null:
            value = field_schema.default
        return self.updated(record, field_schema, value)


class ExtractFieldKey(ExtractField):
    """ExtractField on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.ExtractField$Key",)


class ExtractFieldValue(ExtractField):
    """ExtractField on the record value."""

    aliases = (f"{_PKG}.ExtractField$Value",)


# -- HoistField ----------------------------------------------------------------------------------


class HoistFieldConfig(PluginConfig):
    """Settings of HoistField."""

    field: str = Field(description="Name of the single field of the resulting struct or map.")


class HoistField(KeyOrValueTransformation):
    """Wrap the key or value in a struct (with a schema) or a map (without) of one field."""

    Config = HoistFieldConfig

    def _configured(self, config: HoistFieldConfig) -> None:
        self._field = config.field
        self._schemas: SchemaCache[Schema, Schema] = SchemaCache()

    def _wrap_schema(self, schema: Schema) -> Schema:
        return Schema.struct([(self._field, schema)])

    def apply(self, record: R) -> R:
        schema, data = self.operating(record)
        if schema is None:
            return self.updated(record, None, {self._field: data})
        return self.updated(record, self._schemas.get(schema, self._wrap_schema), {self._field: data})


class HoistFieldKey(HoistField):
    """HoistField on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.HoistField$Key",)


class HoistFieldValue(HoistField):
    """HoistField on the record value."""

    aliases = (f"{_PKG}.HoistField$Value",)


# -- MaskField -----------------------------------------------------------------------------------


class MaskFieldConfig(PluginConfig):
    """Settings of MaskField."""

    fields: CommaList = Field(description="Names of the fields to mask.", min_length=1)
    replacement: str | None = Field(
        None,
        description="Replacement for numeric and string fields; without it a field becomes its type's empty value.",
    )


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)


def _empty_like(value: Any) -> Any:
    """Connect's masked value: the type's zero or empty value."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return 0
    if isinstance(value, float):
        return 0.0
    if isinstance(value, decimal.Decimal):
        return decimal.Decimal(0)
    if isinstance(value, str):
        return ""
    if isinstance(value, _dt.datetime):
        return _EPOCH
    if isinstance(value, _dt.date):
        return _EPOCH.date()
    if isinstance(value, _dt.time):
        return _dt.time(0)
    if isinstance(value, list):
        return []
    if isinstance(value, dict):
        return {}
    raise DataError(f"MaskField: cannot mask value of type {type(value).__name__}")


class MaskField(KeyOrValueTransformation):
    """Replace fields with their type's empty value (or ``replacement``); the schema is unchanged."""

    Config = MaskFieldConfig

    def _configured(self, config: MaskFieldConfig) -> None:
        self._fields = frozenset(config.fields)
        self._replacement = config.replacement

    def _masked(self, name: str, value: Any) -> Any:
        if value is None:
            return None
        if self._replacement is None:
            return _empty_like(value)
        replacement = self._replacement
        try:
            if isinstance(value, bool):
                raise TypeError
            if isinstance(value, int):
                return int(replacement)
            if isinstance(value, float):
                return float(replacement)
            if isinstance(value, decimal.Decimal):
                return decimal.Decimal(replacement)
            if isinstance(value, str):
                return replacement
        except (ValueError, ArithmeticError):
            raise DataError(
                f"{self.label}: cannot use replacement {replacement!r} for field {name} of type {type(value).__name__}"
            ) from None
        except TypeError:
            pass
        raise DataError(
            f"{self.label}: cannot mask field {name} of type {type(value).__name__} with a custom replacement"
        )

    def apply(self, record: R) -> R:
        schema, data = self.operating(record)
        if data is None:
            return record
        if schema is None:
            masked = dict(require_map(data, self.label, "masking"))
            for name in self._fields:
                if name in masked:
                    masked[name] = self._masked(name, masked[name])
            return self.updated(record, None, masked)
        struct = require_struct(data, schema, self.label, "masking")
        masked = {
            f.name: self._masked(f.name, struct.get(f.name)) if f.name in self._fields else struct.get(f.name)
            for f in schema.fields
        }
        return self.updated(record, schema, masked)


class MaskFieldKey(MaskField):
    """MaskField on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.MaskField$Key",)


class MaskFieldValue(MaskField):
    """MaskField on the record value."""

    aliases = (f"{_PKG}.MaskField$Value",)


# -- ValueToKey ----------------------------------------------------------------------------------


class ValueToKeyConfig(PluginConfig):
    """Settings of ValueToKey."""

    fields: CommaList = Field(description="Value fields that make up the key.", min_length=1)
    replace_null_with_default: bool = Field(True, description="Use a field's default when its value is null.")


class ValueToKey(BuiltinTransformation):
    """Replace the key with a struct (or map) of fields taken from the value.

    As in Connect, a tombstone has no value to take fields from and is a data error; route
    tombstones around this transform with the ``RecordIsTombstone`` predicate and ``negate``.
    """

    Config = ValueToKeyConfig
    aliases: ClassVar[tuple[str, ...]] = (f"{_PKG}.ValueToKey",)

    def _configured(self, config: ValueToKeyConfig) -> None:
        self._fields = config.fields
        self._replace_null = config.replace_null_with_default
        self._schemas: SchemaCache[Schema, Schema] = SchemaCache()

    def _key_schema(self, schema: Schema) -> Schema:
        fields = []
        for name in self._fields:
            f = schema.field(name)
            if f is None:
                raise DataError(f"{self.label}: field {name} does not exist in the value schema")
            fields.append((name, f.schema))
        return Schema.struct(fields)

    def apply(self, record: R) -> R:
        if record.value_schema is None:
            value = require_map(record.value, self.label, "copying fields from value to key")
            return with_key(record, None, {name: value.get(name) for name in self._fields})
        struct = require_struct(record.value, record.value_schema, self.label, "copying fields from value to key")
        key_schema = self._schemas.get(record.value_schema, self._key_schema)
        key = {}
        for f in key_schema.fields:
            v = struct.get(f.name)
            key[f.name] = f.schema.default if v is None and self._replace_null else v
        return with_key(record, key_schema, key)
