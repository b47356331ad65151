"""Connect data → the bytes of Kafka Connect's ``JsonConverter``, for code that is not a converter.

:class:`JsonData` writes a value (with or without the ``{"schema":…,"payload":…}`` envelope) and a
schema's envelope JSON exactly as the :class:`~sluice.converters.json.JsonConverter` plugin does —
the plugin is this class plus Connect's ``Converter`` interface and the reading side. Connectors
that assemble records themselves (the CDC source's native encoder, the backfills writing a
connector's records from Spark) use it with the connector's converter settings, instead of
instantiating a converter plugin.

The settings are the converter's keys (:class:`JsonConverterConfig`: ``schemas.enable``,
``decimal.format``, ``replace.null.with.default``, ``schemas.cache.size``). How the bytes are made
and kept identical to Connect's is told in :mod:`sluice.converters.json`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Literal

import orjson
import pydantic

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.schema import Schema
from sluice.converters.json_text import _jackson_escapes, _serialization_error, dumps
from sluice.converters.json_write import _MAX_ID_CACHE, _Encoders, _schema_json, _schemaless_json

__all__ = ["JsonConverterConfig", "JsonData"]


class JsonConverterConfig(PluginConfig):
    """Settings of :class:`~sluice.converters.json.JsonConverter` and :class:`JsonData`: the keys of
    Connect's ``JsonConverterConfig``."""

    schemas_enable: bool = pydantic.Field(True, description="Wrap each value in a schema/payload envelope.")
    schemas_cache_size: int = pydantic.Field(1000, description="Schemas cached per direction by one converter.")
    decimal_format: Literal["BASE64", "NUMERIC"] = pydantic.Field(
        "BASE64", description="Write Decimal values as base64 bytes or as JSON numbers (case-insensitive)."
    )
    replace_null_with_default: bool = pydantic.Field(
        True, description="Write (and read) a null field that has a default as its default value."
    )
    converter_type: Literal["key", "value", "header"] | None = pydantic.Field(
        None, description="Set by the runtime: what the converter is used for."
    )

    @pydantic.field_validator("decimal_format", mode="before")
    @classmethod
    def _case_insensitive(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class JsonData:
    """Connect values and schemas → ``JsonConverter``'s bytes, for one set of converter settings.

    ``settings`` are the converter's keys without their prefix (``{"schemas.enable": False}``);
    unknown or invalid ones raise :class:`~sluice.connectors.api.errors.ConfigError`. Schemas'
    JSON and writers are cached per schema (``schemas.cache.size``). Not meant to be shared
    between threads.
    """

    def __init__(self, settings: Mapping[str, Any] | None = None) -> None:
        self._apply(JsonConverterConfig.parse(settings or {}))

    def _apply(self, config: JsonConverterConfig) -> None:
        self.config = config
        self._envelope = config.schemas_enable
        self._cache_size = max(1, config.schemas_cache_size)
        self._encoders = _Encoders(config.decimal_format == "NUMERIC", config.replace_null_with_default)
        self._writers: OrderedDict[Schema | None, Callable[[Any], bytes | None]] = OrderedDict()
        self._writers_by_id: dict[int, tuple[Schema | None, Callable[[Any], bytes | None]]] = {}
        self._schema_bytes: OrderedDict[Schema, bytes] = OrderedDict()

    def value_json(self, schema: Schema | None, value: Any) -> bytes | None:
        """``value`` as the converter writes it (in the envelope when ``schemas.enable``);
        ``schema`` and ``value`` both ``None`` is a tombstone (``None``)."""
        hit = self._writers_by_id.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1](value)
        return self._writer(schema)(value)

    def as_json_schema(self, schema: Schema) -> bytes:
        """The schema's JSON exactly as it appears in the envelope (Connect's ``asJsonSchema``)."""
        cached = self._schema_bytes.get(schema)
        if cached is None:
            cached = dumps(_schema_json(schema, self._encoders))
            self._remember(self._schema_bytes, schema, cached)
        else:
            self._schema_bytes.move_to_end(schema)
        return cached

    def _remember(self, cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
        cache[key] = value
        if len(cache) > self._cache_size:
            cache.popitem(last=False)

    def _writer(self, schema: Schema | None) -> Callable[[Any], bytes | None]:
        write = self._writers.get(schema)
        if write is None:
            write = self._build_writer(schema)
            self._remember(self._writers, schema, write)
        else:
            self._writers.move_to_end(schema)
        by_id = self._writers_by_id
        if len(by_id) >= _MAX_ID_CACHE:
            by_id.clear()
        by_id[id(schema)] = (schema, write)  # keeps the schema alive, so its id() cannot be reused
        return write

    def _build_writer(self, schema: Schema | None) -> Callable[[Any], bytes | None]:
        # The writers below inline dumps (orjson.dumps, then Jackson's escapes only when the output
        # holds a "\\u00" escape or non-ASCII: what they rewrite) because a call costs as much as the checks.
        dumps, escapes, join, failed = orjson.dumps, _jackson_escapes, b"".join, orjson.JSONEncodeError
        if schema is None:
            head = b'{"schema":null,"payload":' if self._envelope else b""

            def write_schemaless(value: Any) -> bytes | None:
                if value is None:
                    return None  # a tombstone
                try:
                    payload = dumps(value if type(value) is str else _schemaless_json(value))
                except failed as exc:
                    raise _serialization_error(exc) from exc
                if 92 in payload and b"\\u00" in payload or not payload.isascii():
                    payload = escapes(payload)
                return join((head, payload, b"}")) if head else b"%b" % payload

            return write_schemaless

        node = self._encoders.node(schema)
        convert, fast = node.fn, node.fast
        if node.f64 or fast is int:
            fast = None  # the generic path below handles range checks and Java's float layout
        if not self._envelope:

            def write_plain(value: Any) -> bytes:
                try:
                    payload = dumps(value if type(value) is fast else convert(value))
                except failed as exc:
                    raise _serialization_error(exc) from exc
                if 92 in payload and b"\\u00" in payload or not payload.isascii():
                    return escapes(payload)
                # "%b" copies orjson's output into a right-sized object: orjson returns bytes shrunk
                # from a 1 KiB buffer, and keeping thousands of those alive costs ~1.5 µs each in
                # fresh-memory page faults, against ~50 ns for the copy.
                return b"%b" % payload

            return write_plain

        head = b'{"schema":' + self.as_json_schema(schema) + b',"payload":'

        def write_envelope(value: Any) -> bytes:
            try:
                payload = dumps(value if type(value) is fast else convert(value))
            except failed as exc:
                raise _serialization_error(exc) from exc
            if 92 in payload and b"\\u00" in payload or not payload.isascii():
                payload = escapes(payload)
            return join((head, payload, b"}"))  # one allocation; head + payload + b"}" copies twice

        return write_envelope
