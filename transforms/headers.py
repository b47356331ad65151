"""Header SMTs: DropHeaders, HeaderFrom, InsertHeader.

Headers are ``(key, value)`` pairs with plain-data values; the header converter serializes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.schema import Schema
from sluice.connectors.api.transform import R
from sluice.transforms._support import (
    BuiltinTransformation,
    CommaList,
    KeyOrValueTransformation,
    SchemaCache,
    copy_struct_schema,
    require_map,
    require_struct,
)

__all__ = ["DropHeaders", "HeaderFrom", "HeaderFromKey", "HeaderFromValue", "InsertHeader"]

_PKG = "org.apache.kafka.connect.transforms"


# -- DropHeaders ---------------------------------------------------------------------------------


class DropHeadersConfig(PluginConfig):
    """Settings of DropHeaders."""

    headers: CommaList = Field(description="Names of the headers to remove.", min_length=1)


class DropHeaders(BuiltinTransformation):
    """Remove every header whose key is one of ``headers``."""

    Config = DropHeadersConfig
    aliases: ClassVar[tuple[str, ...]] = (f"{_PKG}.DropHeaders",)

    def _configured(self, config: DropHeadersConfig) -> None:
        self._drop = frozenset(config.headers)

    def apply(self, record: R) -> R:
        headers = record.headers
        if not headers:
            return record
        drop = self._drop
        kept = tuple(h for h in headers if h[0] not in drop)
        return record if len(kept) == len(headers) else record.replace(headers=kept)

    def apply_batch(self, records: Sequence[R]) -> list[R]:
        apply = self.apply
        return [r if not r.headers else apply(r) for r in records]


# -- HeaderFrom ----------------------------------------------------------------------------------


class HeaderFromConfig(PluginConfig):
    """Settings of HeaderFrom."""

    fields: CommaList = Field(description="Fields to copy or move into headers.", min_length=1)
    headers: CommaList = Field(description="Header names, one per field, in the same order.", min_length=1)
    operation: Literal["move", "copy"] = Field(description="move removes the fields; copy keeps them.")
    replace_null_with_default: bool = Field(True, description="Use a field's default when its value is null.")

    @model_validator(mode="after")
    def _same_length(self) -> HeaderFromConfig:
        if len(self.fields) != len(self.headers):
            raise ValueError("'fields' config must have the same number of elements as 'headers' config")
        return self


class HeaderFrom(KeyOrValueTransformation):
    """Copy or move fields of the key or value into headers (appended after existing ones)."""

    Config = HeaderFromConfig

    def _configured(self, config: HeaderFromConfig) -> None:
        self._pairs = tuple(zip(config.fields, config.headers))
        self._move = config.operation == "move"
        self._moved = frozenset(config.fields)
        self._replace_null = config.replace_null_with_default
        self._schemas: SchemaCache[Schema, Schema] = SchemaCache()

    def _without_moved(self, schema: Schema) -> Schema:
        return copy_struct_schema(schema, [(f.name, f.schema) for f in schema.fields if f.name not in self._moved])

    def apply(self, record: R) -> R:
        schema, data = self.operating(record)
        if data is None:
            return record
        if schema is None:
            values = require_map(data, self.label, "header extraction")
            new_schema = None
        else:
            values = require_struct(data, schema, self.label, "header extraction")
            new_schema = self._schemas.get(schema, self._without_moved) if self._move else schema
        added: list[tuple[str, Any]] = []
        for field, header in self._pairs:
            value = values.get(field)
            if value is None and schema is not None and self._replace_null:
                f = schema.field(field)
                value = f.schema.default if f is not None else None
            added.append((header, value))
        headers = (*(record.headers or ()), *added)
        if self._move:
            data = {k: v for k, v in values.items() if k not in self._moved}
        return self.updated(record, new_schema, data).replace(headers=headers)


class HeaderFromKey(HeaderFrom):
    """HeaderFrom on the record key."""

    operates_on_key = True
    aliases = (f"{_PKG}.HeaderFrom$Key",)


class HeaderFromValue(HeaderFrom):
    """HeaderFrom on the record value."""

    aliases = (f"{_PKG}.HeaderFrom$Value",)


# -- InsertHeader --------------------------------------------------------------------------------


class InsertHeaderConfig(PluginConfig):
    """Settings of InsertHeader."""

    header: str = Field(description="Name of the header to add.")
    value_literal: str = Field(description="Value of the header, as text.")


class InsertHeader(BuiltinTransformation):
    """Append a header with a fixed value to every record.

    The value stays text: the header converter writes the same bytes Connect's would for the
    literal, without the round trip through ``Values.parseString``.
    """

    Config = InsertHeaderConfig
    aliases: ClassVar[tuple[str, ...]] = (f"{_PKG}.InsertHeader",)

    def _configured(self, config: InsertHeaderConfig) -> None:
        self._header = (config.header, config.value_literal)

    def apply(self, record: R) -> R:
        return record.replace(headers=(*(record.headers or ()), self._header))
