"""Kafka Connect's ``JsonConverter``, byte for byte.

The bytes equal those of ``org.apache.kafka.connect.json.JsonConverter`` 4.1 (Jackson 2.19) for the
same schema, value and settings; ``tests/unit/converters/vectors/json_converter.jsonl`` holds the
real converter's output and the unit tests compare against it. What "identical" takes:

* Jackson's compact output and field order: the envelope is ``{"schema":…,"payload":…}``; a schema
  is ``type``, then ``items`` / ``keys``, ``values`` / ``fields``, then ``optional``, ``name``,
  ``version``, ``doc``, ``parameters``, ``default``; a struct field's schema ends with ``"field"``.
* Numbers as Java prints them. orjson's float output already equals ``Double.toString`` for
  ``1e-3 <= |x| < 1e7`` and zero, so those floats pass through untouched; the rest are rewritten
  to Java's ``1.0E20`` form and embedded as :class:`orjson.Fragment`. Non-finite numbers become the
  strings ``"NaN"``/``"Infinity"``, as Jackson writes them. float32 values print as the shortest
  decimal that reads back as the same *float* (``Float.toString``). Decimals print like
  ``BigDecimal.toString`` (NUMERIC) or as base64 of the two's-complement unscaled value (BASE64).
* Jackson's string escapes: control characters other than ``\\b \\t \\n \\f \\r`` use upper-case
  hex (``\\u001B``) and characters outside the BMP are written as escaped surrogate pairs
  (``\\uD83D\\uDE00``); orjson writes lower-case hex and raw UTF-8, so its output is patched, which
  costs two byte scans on the hot path and a regex only when such characters occur.

Java's ``Double.toString`` changed in JDK 19 (JDK-4511638): JDK 17 prints more digits than needed
for some values (integral doubles from 2**54 up, integral floats from 2**25 up, a few others). This
module follows JDK 19+, which matches Connect on Java 21 and later, and Connect on JDK 17 for all
other values; both forms read back as the same number.

Speed: a schema's JSON bytes and a conversion function are built once per schema (kept in LRU
caches sized by ``schemas.cache.size``, with an identity front cache so a repeated schema object
costs one dict lookup). Struct converters are generated as straight-line Python: a record whose
fields already are what orjson should write (strings, in-range ints, booleans, plain doubles)
is checked inline and handed to orjson as it is, so a field costs a type check, not a function
call or a copy. The envelope is assembled from bytes, and reading a known schema's envelope
parses only the payload.

Layout: :mod:`sluice.converters.json_text` writes numbers and strings as Java does,
:mod:`sluice.converters.json_write` turns Connect values into what orjson writes,
:mod:`sluice.converters.json_read` turns parsed JSON back into Connect values and schemas,
:mod:`sluice.converters.json_data` holds the settings and the writing side (``JsonData``, which
connectors use where they need the bytes without a converter plugin); this module makes that the
``Converter`` plugin and adds the reading side.
"""

from __future__ import annotations

import decimal
import json as _stdjson
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import orjson

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.converter import Converter, HeaderConverter, WireFormat
from sluice.connectors.api.errors import DataError
from sluice.connectors.api.records import Headers
from sluice.connectors.api.schema import Schema, SchemaAndValue
from sluice.converters.json_data import JsonConverterConfig, JsonData
from sluice.converters.json_read import _Decoders, _NeedExactNumbers, _reject_constant
from sluice.converters.json_text import (
    ENVELOPE_ERROR,
    REQUIRED_NULL_ERROR,
    java_decimal_str,
    java_double_str,
    java_float_str,
)

__all__ = [
    "ENVELOPE_ERROR",
    "REQUIRED_NULL_ERROR",
    "JsonConverter",
    "JsonConverterConfig",
    "java_decimal_str",
    "java_double_str",
    "java_float_str",
]


# ---------------------------------------------------------------------------------------------
# The converter
# ---------------------------------------------------------------------------------------------

_NULL = SchemaAndValue(None, None)
_new_sv = tuple.__new__  # skips NamedTuple's Python-level __new__ on the hot path
_MISSING: Any = object()


class JsonConverter(JsonData, Converter, HeaderConverter):
    """Kafka Connect's ``JsonConverter``: the same bytes, with or without the schema envelope.

    Works for keys, values and headers. Configure it with :meth:`configure` (the
    ``key.converter.*`` / ``value.converter.*`` / ``header.converter.*`` keys); until then it uses
    the defaults (``schemas.enable=true``, ``decimal.format=BASE64``). Called from the task thread;
    an instance is not meant to be shared between threads.
    """

    Config: ClassVar[type[PluginConfig]] = JsonConverterConfig
    version: ClassVar[str] = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = ("org.apache.kafka.connect.json.JsonConverter",)

    def configure(self, config: Mapping[str, Any], is_key: bool = False) -> None:
        """Apply the converter settings; unknown keys raise :class:`~connectors.api.errors.ConfigError`."""
        self._apply(JsonConverterConfig.parse(config))

    def _apply(self, config: JsonConverterConfig) -> None:
        super()._apply(config)  # the writing side: JsonData
        self._decoders = _Decoders(config.replace_null_with_default)
        self._readers: OrderedDict[bytes, tuple[Schema, Callable[[Any], Any], bytes]] = OrderedDict()
        self._last_prefix: bytes | None = None
        self._last_schema: Schema | None = None
        self._last_reader: Callable[[Any], Any] = _identity

    # -- Connect data → bytes ------------------------------------------------------------------

    def from_connect_data(
        self, topic: str, schema: Schema | None, value: Any, headers: Headers | None = None
    ) -> bytes | None:
        """Serialize ``value``; ``schema`` and ``value`` both ``None`` is a tombstone (``None``)."""
        hit = self._writers_by_id.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1](value)
        return self._writer(schema)(value)

    def from_connect_batch(
        self, topic: str, schemas: Sequence[Schema | None], values: Sequence[Any]
    ) -> list[bytes | None]:
        """Serialize many values; consecutive records with the same schema object share one lookup."""
        out: list[bytes | None] = []
        append = out.append
        last: Any = _MISSING
        write: Callable[[Any], bytes | None] = _identity
        for schema, value in zip(schemas, values):
            if schema is not last:
                write, last = self._writer(schema), schema
            append(write(value))
        return out

    # -- bytes → Connect data ------------------------------------------------------------------

    def to_connect_data(self, topic: str, data: bytes | None, headers: Headers | None = None) -> SchemaAndValue:
        """Deserialize ``data``; malformed input raises :class:`DataError` saying what was expected."""
        return self._read(data)

    def to_connect_batch(self, topic: str, datas: Sequence[bytes | None]) -> tuple[list[Schema | None], list[Any]]:
        """Deserialize many values of one topic into ``(schemas, values)``."""
        if not self._envelope:
            loads = orjson.loads
            try:
                return [None] * len(datas), [None if d is None else loads(d) for d in datas]
            except orjson.JSONDecodeError:
                pass  # find the bad one and report it the usual way
        results = list(map(self._read, datas))
        return [r[0] for r in results], [r[1] for r in results]

    def wire_format(self) -> WireFormat:
        """JSON, with the envelope when ``schemas.enable``; decimals as ``decimal.format`` says."""
        return WireFormat(
            "json",
            schemas=self._envelope,
            decimal_format=self.config.decimal_format,
            replace_null_with_default=self.config.replace_null_with_default,
        )

    def as_connect_schema(self, json_schema: Mapping[str, Any]) -> Schema:
        """Connect's ``asConnectSchema``: a parsed JSON schema object → :class:`Schema` (cached)."""
        return self._reader_for(dict(json_schema))[0]

    def _read(self, data: bytes | None) -> SchemaAndValue:
        if data is None:
            return _NULL
        if not self._envelope:
            try:
                return _new_sv(SchemaAndValue, (None, orjson.loads(data)))
            except orjson.JSONDecodeError as exc:
                return self._unparseable(data, exc)
        if type(data) is not bytes:
            data = bytes(data)
        prefix = self._last_prefix
        # Fast path: the envelope starts with the bytes of the last schema seen, so only the
        # payload needs parsing and the schema needs no lookup.
        if prefix is not None and data.startswith(prefix) and data.endswith(b"}"):
            try:
                payload = orjson.loads(data[len(prefix) : -1])  # a bytes slice parses faster than a memoryview
                return _new_sv(SchemaAndValue, (self._last_schema, self._last_reader(payload)))
            except (orjson.JSONDecodeError, _NeedExactNumbers):
                pass  # not what it looked like, or needs exact numbers: take the general path
        return self._read_envelope(data)

    def _read_envelope(self, data: bytes) -> SchemaAndValue:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            return self._unparseable(data, exc)
        if type(doc) is not dict or len(doc) != 2 or "schema" not in doc or "payload" not in doc:
            raise DataError(ENVELOPE_ERROR)
        schema_json = doc["schema"]
        if schema_json is None:
            return SchemaAndValue(None, doc["payload"])
        schema, read, prefix = self._reader_for(schema_json, data)
        if data.startswith(prefix):
            self._last_prefix, self._last_schema, self._last_reader = prefix, schema, read
        try:
            value = read(doc["payload"])
        except _NeedExactNumbers:
            value = read(self._exact(data)["payload"])
        return SchemaAndValue(schema, value)

    def _reader_for(self, schema_json: Any, data: bytes | None = None) -> tuple[Schema, Callable[[Any], Any], bytes]:
        key = orjson.dumps(schema_json, default=str)  # str() covers Decimals from an exact parse
        entry = self._readers.get(key)
        if entry is None:
            try:
                schema = self._decoders.schema(schema_json)
            except _NeedExactNumbers:
                # A NUMERIC Decimal default: orjson made it a float, so read the schema exactly.
                if data is None:
                    raise DataError(
                        "A Decimal default in this schema was parsed as a float; parse the JSON with "
                        "parse_float=decimal.Decimal"
                    ) from None
                schema = self._decoders.schema(self._exact(data)["schema"])
            prefix = b'{"schema":' + self.as_json_schema(schema) + b',"payload":'
            entry = (schema, self._decoders.node(schema).fn, prefix)
            self._remember(self._readers, key, entry)
        else:
            self._readers.move_to_end(key)
        return entry

    @staticmethod
    def _exact(data: bytes) -> Any:
        """Parse again keeping every non-integral number as an exact :class:`decimal.Decimal`."""
        try:
            return _stdjson.loads(data, parse_float=decimal.Decimal, parse_constant=_reject_constant)
        except ValueError as exc:
            raise DataError(
                f"Converting byte[] to Kafka Connect data failed due to serialization error: {exc}"
            ) from exc

    def _unparseable(self, data: Any, exc: Exception) -> SchemaAndValue:
        if not bytes(data).strip():
            # Jackson reads empty input as a missing node: no value, or not an envelope.
            if self._envelope:
                raise DataError(ENVELOPE_ERROR) from None
            return _NULL
        raise DataError(f"Converting byte[] to Kafka Connect data failed due to serialization error: {exc}") from exc

    # -- headers -------------------------------------------------------------------------------

    def from_connect_header(self, topic: str, key: str, schema: Schema | None, value: Any) -> bytes | None:
        """Serialize a header value exactly as a record value, with the schema a transform attached to it if any."""
        if type(value) is SchemaAndValue:
            schema, value = value
        return self.from_connect_data(topic, schema, value)

    def to_connect_header(self, topic: str, key: str, data: bytes | None) -> SchemaAndValue:
        """Deserialize a header value exactly as a record value."""
        return self.to_connect_data(topic, data)


def _identity(value: Any) -> Any:
    return value
