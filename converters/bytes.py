"""Kafka Connect's ``ByteArrayConverter``: bytes pass through untouched."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

import pydantic

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.converter import Converter, HeaderConverter, WireFormat
from sluice.connectors.api.errors import DataError
from sluice.connectors.api.records import Headers
from sluice.connectors.api.schema import OPTIONAL_BYTES_SCHEMA, Schema, SchemaAndValue, Type

__all__ = ["ByteArrayConverter", "ByteArrayConverterConfig"]


class ByteArrayConverterConfig(PluginConfig):
    """Settings of :class:`ByteArrayConverter`: none besides the runtime's ``converter.type``."""

    converter_type: Literal["key", "value", "header"] | None = pydantic.Field(
        None, description="Set by the runtime: what the converter is used for."
    )


class ByteArrayConverter(Converter, HeaderConverter):
    """Kafka Connect's ``ByteArrayConverter``: the value is the record's bytes.

    Writing accepts ``bytes``, ``bytearray`` and ``memoryview`` (as Connect accepts ``byte[]`` and
    ``ByteBuffer``) with no schema or a BYTES schema; anything else is a :class:`DataError`. Reading
    returns an optional bytes schema. Called from the task thread.
    """

    Config: ClassVar[type[PluginConfig]] = ByteArrayConverterConfig
    version: ClassVar[str] = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = ("org.apache.kafka.connect.converters.ByteArrayConverter",)

    def configure(self, config: Mapping[str, Any], is_key: bool = False) -> None:
        """Validate the settings (there are none to apply)."""
        ByteArrayConverterConfig.parse(config)

    def from_connect_data(
        self, topic: str, schema: Schema | None, value: Any, headers: Headers | None = None
    ) -> bytes | None:
        """Return ``value`` itself; a non-BYTES schema or a non-bytes value is a :class:`DataError`."""
        if schema is not None and schema.type is not Type.BYTES:
            raise DataError(f"Invalid schema type for ByteArrayConverter: {schema.type.name}")
        if value is None or type(value) is bytes:
            return value
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        raise DataError(f"ByteArrayConverter is not compatible with objects of type {type(value)}")

    def to_connect_data(self, topic: str, data: bytes | None, headers: Headers | None = None) -> SchemaAndValue:
        """Return the bytes with an optional bytes schema."""
        return SchemaAndValue(OPTIONAL_BYTES_SCHEMA, data)

    def from_connect_batch(
        self, topic: str, schemas: Sequence[Schema | None], values: Sequence[Any]
    ) -> list[bytes | None]:
        """Check and pass through many values."""
        convert, bytes_type = self.from_connect_data, Type.BYTES
        return [
            v if type(v) is bytes and (s is None or s.type is bytes_type) else convert(topic, s, v)
            for s, v in zip(schemas, values)
        ]

    def to_connect_batch(self, topic: str, datas: Sequence[bytes | None]) -> tuple[list[Schema | None], list[Any]]:
        """Wrap many values."""
        return [OPTIONAL_BYTES_SCHEMA] * len(datas), list(datas)

    def from_connect_header(self, topic: str, key: str, schema: Schema | None, value: Any) -> bytes | None:
        """Pass a header value through exactly as a record value, with the schema a transform attached to it if any."""
        if type(value) is SchemaAndValue:
            schema, value = value
        return self.from_connect_data(topic, schema, value)

    def to_connect_header(self, topic: str, key: str, data: bytes | None) -> SchemaAndValue:
        """Wrap a header value exactly as a record value."""
        return self.to_connect_data(topic, data)

    def wire_format(self) -> WireFormat:
        """The values are the bytes."""
        return WireFormat("bytes")
