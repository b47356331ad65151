"""Flatten: nested structs (and, without a schema, nested maps) become top-level fields."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.schema import Schema, Type
from sluice.connectors.api.transform import R
from sluice.transforms._support import (
    KeyOrValueTransformation,
    SchemaCache,
    copy_struct_schema,
    require_map,
    require_struct,
)

__all__ = ["Flatten", "FlattenKey", "FlattenValue"]

_PKG = "org.apache.kafka.connect.transforms"


class FlattenConfig(PluginConfig):
    """Settings of Flatten."""

    delimiter: str = Field(".", description="Inserted between the names of a parent and a child field.")


class Flatten(KeyOrValueTransformation):
    """Flatten nested structs into one level, naming fields ``parent<delimiter>child``.

    With a schema, arrays and maps are kept as they are and a field nested in an optional struct
    becomes optional. Without one, nested maps are flattened too. Tombstones pass through.
    """

    Config = FlattenConfig

    def _configured(self, config: FlattenConfig) -> None:
        self._delimiter = config.delimiter
        self._schemas: SchemaCache[Schema, Schema] = SchemaCache()

    def _name(self, prefix: str, name: str) -> str:
        return f"{prefix}{self._delimiter}{name}" if prefix else name

    def _flat_fields(self, schema: Schema, prefix: str, optional: bool, out: list[tuple[str, Schema]]) -> None:
        for f in schema.fields:
            name = self._name(prefix, f.name)
            if f.schema.type is Type.STRUCT:
                self._flat_fields(f.schema, name, optional or f.schema.optional, out)
            else:
                out.append((name, f.schema.as_optional() if optional else f.schema))

    def _flat_schema(self, schema: Schema) -> Schema:
        fields: list[tuple[str, Schema]] = []
        self._flat_fields(schema, "", False, fields)
        return copy_struct_schema(schema, fields)

    def _flat_struct(self, schema: Schema, data: dict[str, Any] | None, prefix: str, out: dict[str, Any]) -> None:
        for f in schema.fields:
            name = self._name(prefix, f.name)
            value = data.get(f.name) if data is not None else None
            if f.schema.type is Type.STRUCT:
                self._flat_struct(f.schema, value, name, out)
            else:
                out[name] = value

    def _flat_map(self, data: dict[str, Any], prefix: str, out: dict[str, Any]) -> None:
        for key, value in data.items():
            name = self._name(prefix, str(key))
            if isinstance(value, dict):
                self._flat_map(value, name, out)
            else:
                out[name] = value

    def apply(self, record: R) -> R:
        schema, data = self.operating(record)
        if data is None:
            return record
        out: dict[str, Any] = {}
        if schema is None:
            self._flat_map(require_map(data, self.label, "flattening"), "", out)
            return self.updated(record, None, out)
        self._flat_struct(schema, require_struct(data, schema, self.label, "flattening"), "", out)
        return self.updated(record, self._schemas.get(schema, self._flat_schema), out)


class FlattenKey(Flatten):
    """Flatten on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.Flatten$Key",)


class FlattenValue(Flatten):
    """Flatten on the record value."""

    aliases = (f"{_PKG}.Flatten$Value",)
