"""``SimpleHeaderConverter``: header values as plain UTF-8 text, Kafka Connect's default.

Writing follows Connect's ``Values.convertToString``: strings as they are, booleans as
``true``/``false``, numbers as Java prints them, dates and times in ISO 8601 (UTC), lists and maps
as compact JSON; bytes pass through. Reading returns the text with a STRING schema, or the raw
bytes with a BYTES schema when they are not UTF-8. (Connect's reader also guesses a type from the
text, so ``"42"`` comes back as an INT8; Sluice leaves typing to the consumer.)
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import orjson
import pydantic

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.converter import HeaderConverter
from sluice.connectors.api.errors import DataError
from sluice.connectors.api.schema import BYTES_SCHEMA, STRING_SCHEMA, Schema, SchemaAndValue, Type
from sluice.converters.json import java_double_str, java_float_str
from sluice.converters.string import java_to_string

__all__ = ["SimpleHeaderConverter", "SimpleHeaderConverterConfig"]

_NULL = SchemaAndValue(None, None)


class SimpleHeaderConverterConfig(PluginConfig):
    """Settings of :class:`SimpleHeaderConverter`: none besides the runtime's ``converter.type``."""

    converter_type: Literal["key", "value", "header"] | None = pydantic.Field(
        None, description="Set by the runtime: what the converter is used for."
    )


def _iso(value: _dt.date | _dt.time) -> str:
    """Connect's header text for dates and times: ``2024-02-29``, ``13:45:30.123Z``, ``…T…Z``."""
    if isinstance(value, _dt.datetime):
        utc = value.astimezone(_dt.UTC) if value.tzinfo else value
        return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"
    if isinstance(value, _dt.time):
        return value.strftime("%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    return value.isoformat()


def _json_ready(value: Any, schema: Schema | None) -> Any:
    """``value`` with every part orjson would print differently from Connect already converted."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        text = java_float_str(value) if schema is not None and schema.type is Type.FLOAT32 else java_double_str(value)
        return orjson.Fragment(text) if text[-1].isdigit() else text
    if isinstance(value, decimal.Decimal):
        return orjson.Fragment(java_to_string(value)) if value.is_finite() else str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (_dt.date, _dt.time)):
        return _iso(value)
    if isinstance(value, (list, tuple)):
        item = schema.value_schema if schema is not None and schema.type is Type.ARRAY else None
        return [_json_ready(v, item) for v in value]
    if isinstance(value, Mapping):
        if schema is not None and schema.type is Type.STRUCT:
            return {f.name: _json_ready(value.get(f.name), f.schema) for f in schema.fields}
        values = schema.value_schema if schema is not None and schema.type is Type.MAP else None
        return {k if isinstance(k, str) else java_to_string(k): _json_ready(v, values) for k, v in value.items()}
    raise DataError(f"Failed to serialize unexpected value type {type(value).__qualname__}: {value!r}")


class SimpleHeaderConverter(HeaderConverter):
    """The default header converter: UTF-8 text for scalars, compact JSON for lists and maps.

    Called from the task thread for every header of every record, so the common cases (``str``,
    ``bytes``, ``None``) are handled first.
    """

    Config: ClassVar[type[PluginConfig]] = SimpleHeaderConverterConfig
    version: ClassVar[str] = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = ("org.apache.kafka.connect.storage.SimpleHeaderConverter",)

    def configure(self, config: Mapping[str, Any]) -> None:
        """Validate the settings (there are none to apply)."""
        SimpleHeaderConverterConfig.parse(config)

    def from_connect_header(self, topic: str, key: str, schema: Schema | None, value: Any) -> bytes | None:
        """Header ``key``'s value as UTF-8 text; ``None`` stays ``None`` and bytes pass through."""
        kind = type(value)
        if kind is SchemaAndValue:  # a schema a transform attached: it types numbers and containers
            schema, value = value
            kind = type(value)
        if kind is str:
            return value.encode("utf-8", "replace")
        if value is None or kind is bytes:
            return value
        if isinstance(value, (bytearray, memoryview)):
            return bytes(value)
        if isinstance(value, (list, tuple, Mapping)):
            try:
                return orjson.dumps(_json_ready(value, schema))
            except orjson.JSONEncodeError as exc:
                raise DataError(f"Failed to serialize value for header '{key}' on topic '{topic}': {exc}") from exc
        if isinstance(value, (_dt.date, _dt.time)):
            return _iso(value).encode("ascii")
        return java_to_string(value, schema).encode("utf-8", "replace")

    def to_connect_header(self, topic: str, key: str, data: bytes | None) -> SchemaAndValue:
        """The text of header ``key`` (STRING), or its raw bytes (BYTES) when they are not UTF-8."""
        if data is None:
            return _NULL
        try:
            return SchemaAndValue(STRING_SCHEMA, bytes(data).decode("utf-8"))
        except UnicodeDecodeError:
            return SchemaAndValue(BYTES_SCHEMA, bytes(data))
