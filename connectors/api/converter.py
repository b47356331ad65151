"""Converters: Connect data ↔ the bytes stored in Kafka."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.errors import DataError
from sluice.connectors.api.records import Headers
from sluice.connectors.api.schema import Schema, SchemaAndValue
from sluice.connectors.api.wire import OPAQUE, WireFormat


class Converter(abc.ABC):
    """Turns a record's key or value into bytes and back.

    The runtime makes one instance per connector for keys and one for values, calls
    :meth:`configure` once, then calls the conversion methods from the task thread. The batch
    methods exist so a converter can do a whole poll or consume batch in one tight loop; the
    defaults call the single-record methods.
    """

    Config: ClassVar[type[PluginConfig]] = PluginConfig
    version: ClassVar[str] = "0.0.0"

    def configure(self, config: Mapping[str, Any], is_key: bool) -> None:  # noqa: B027 - optional hook
        """Apply the converter's settings (the ``key.converter.*`` / ``value.converter.*`` keys)."""

    @abc.abstractmethod
    def from_connect_data(self, topic: str, schema: Schema | None, value: Any, headers: Headers | None = None) -> bytes | None:
        """Serialize ``value`` (described by ``schema``); ``None`` stays ``None`` (a tombstone)."""

    @abc.abstractmethod
    def to_connect_data(self, topic: str, data: bytes | None, headers: Headers | None = None) -> SchemaAndValue:
        """Deserialize ``data``; raise :class:`~connectors.api.errors.DataError` if it is malformed."""

    def from_connect_batch(self, topic: str, schemas: Sequence[Schema | None], values: Sequence[Any]) -> list[bytes | None]:
        """Serialize many values of one topic."""
        convert = self.from_connect_data
        return [convert(topic, s, v) for s, v in zip(schemas, values)]

    def to_connect_batch(self, topic: str, datas: Sequence[bytes | None]) -> tuple[list[Schema | None], list[Any]]:
        """Deserialize many values of one topic into ``(schemas, values)``, aligned with ``datas``.

        Two parallel lists rather than a :class:`SchemaAndValue` per record: a converter whose
        schema is fixed answers ``[schema] * n`` at almost no cost.
        """
        convert = self.to_connect_data
        results = [convert(topic, d) for d in datas]
        return [r.schema for r in results], [r.value for r in results]

    def wire_format(self) -> WireFormat:
        """What this converter's bytes are, declared so that the runtime and a task can agree on a
        fast path without looking inside the converter: a sink task that takes raw values
        (:attr:`~connectors.api.SinkTask.value_format`) gets the consumed bytes when they are
        schemaless JSON, and a source task may serialize its own output when it can write exactly
        these bytes (:attr:`~connectors.api.SourceTaskContext.serialization`). The default,
        ``opaque``, agrees to nothing.
        """
        return OPAQUE

    def writer_schema(self, schema_id: int) -> Mapping[str, Any]:
        """The writer schema registered under ``schema_id``, parsed, for a converter whose wire
        format names schemas by id (``avro``): what a sink task that reads raw values
        (:attr:`~connectors.api.SinkRecordBatch.raw_values`) decodes them with. Raises
        :class:`~connectors.api.errors.DataError` for an unknown id or a converter without ids."""
        raise DataError(f"{type(self).__name__} does not name schemas by id")


class HeaderConverter(abc.ABC):
    """Turns one header value into bytes and back."""

    Config: ClassVar[type[PluginConfig]] = PluginConfig
    version: ClassVar[str] = "0.0.0"

    def configure(self, config: Mapping[str, Any]) -> None:  # noqa: B027 - optional hook
        """Apply the converter's settings (the ``header.converter.*`` keys)."""

    @abc.abstractmethod
    def from_connect_header(self, topic: str, key: str, schema: Schema | None, value: Any) -> bytes | None: ...

    @abc.abstractmethod
    def to_connect_header(self, topic: str, key: str, data: bytes | None) -> SchemaAndValue: ...
