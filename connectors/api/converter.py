"""Converters: Connect data ↔ the bytes stored in Kafka."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.records import Headers
from sluice.connectors.api.schema import Schema, SchemaAndValue


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


class WireFormat(NamedTuple):
    """The bytes a converter writes, as a declaration (see :meth:`Converter.wire_format`)."""

    #: ``"json"`` (Connect's JsonConverter format), ``"bytes"`` (the value is the bytes),
    #: ``"string"`` (UTF-8 text) or ``"opaque"`` (anything else: nothing may be assumed).
    kind: str
    #: For ``json``: each value is the ``{"schema": …, "payload": …}`` envelope.
    schemas: bool = False
    #: For ``json``: how decimals are written, ``"BASE64"`` (Connect's default) or ``"NUMERIC"``.
    decimal_format: str = "BASE64"

    @property
    def schemaless_json(self) -> bool:
        """Whether every value is one plain JSON document (or a null)."""
        return self.kind == "json" and not self.schemas


#: What a converter that declares nothing writes.
OPAQUE = WireFormat("opaque")


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
