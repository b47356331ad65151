"""SetSchemaMetadata: set the name and/or version of the key or value schema."""

from __future__ import annotations

from pydantic import Field, model_validator

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.schema import Schema
from sluice.connectors.api.transform import R
from sluice.transforms._support import KeyOrValueTransformation, SchemaCache, require_schema

__all__ = ["SetSchemaMetadata", "SetSchemaMetadataKey", "SetSchemaMetadataValue"]

_PKG = "org.apache.kafka.connect.transforms"


class SetSchemaMetadataConfig(PluginConfig):
    """Settings of SetSchemaMetadata."""

    schema_name: str | None = Field(None, description="Schema name to set.")
    schema_version: int | None = Field(None, description="Schema version to set.")
    replace_null_with_default: bool = Field(True, description="Accepted for compatibility; values are not rewritten.")

    @model_validator(mode="after")
    def _something(self) -> SetSchemaMetadataConfig:
        if not self.schema_name and self.schema_version is None:
            raise ValueError("Neither schema name nor version configured")
        return self


class SetSchemaMetadata(KeyOrValueTransformation):
    """Set the schema's name and/or version; the data is unchanged. A schema is required."""

    Config = SetSchemaMetadataConfig

    def _configured(self, config: SetSchemaMetadataConfig) -> None:
        changes: dict[str, object] = {}
        if config.schema_name:
            changes["name"] = config.schema_name
        if config.schema_version is not None:
            changes["version"] = config.schema_version
        self._changes = changes
        self._schemas: SchemaCache[Schema, Schema] = SchemaCache()

    def apply(self, record: R) -> R:
        schema, data = self.operating(record)
        schema = require_schema(schema, self.label, "updating schema metadata")
        return self.updated(record, self._schemas.get(schema, lambda s: s.with_(**self._changes)), data)


class SetSchemaMetadataKey(SetSchemaMetadata):
    """SetSchemaMetadata on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.SetSchemaMetadata$Key",)


class SetSchemaMetadataValue(SetSchemaMetadata):
    """SetSchemaMetadata on the record value."""

    aliases = (f"{_PKG}.SetSchemaMetadata$Value",)
