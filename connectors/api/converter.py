"""Converters: Connect data ↔ the bytes stored in Kafka."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from connectors.api.config import PluginConfig
from connectors.api.records import Headers
from connectors.api.schema import Schema, SchemaAndValue


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

    def check_batch(self, topic: str, datas: Sequence[bytes | None]) -> str | None:
        """Whether :meth:`to_connect_batch` is known to succeed on ``datas`` without running it.

        A converter that can tell much faster than it converts answers the kind of bytes they are
        (``"json"``, ``"bytes"``); the runtime may then defer the conversion for a sink task that
        might not need it (see :attr:`~connectors.api.SinkTask.lazy_values`). ``None``, the
        default, means "convert now".
        """
        return None

    def unchecked_format(self, topic: str) -> str | None:
        """The kind of bytes :meth:`check_batch` would answer for a batch that passes it, for a task
        that checks them itself (:attr:`~connectors.api.SinkTask.parses_raw_json`); ``None``, the
        default, means such a task gets checked batches like any other."""
        return None


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
