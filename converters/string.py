"""Kafka Connect's ``StringConverter``: values as text in a configurable character set.

Writing calls the equivalent of Java's ``value.toString()``, so the bytes match what Connect
writes for the same value: ``true``/``false`` for booleans, ``1.0E20`` for doubles, ``[a, b]`` for
lists, ``{k=v}`` for maps and ``Struct{a=1,b=x}`` for structs. Reading always yields an optional
string. Like Java's ``String`` codecs, malformed input becomes U+FFFD and unmappable characters
become ``?`` instead of failing the record.
"""

from __future__ import annotations

import codecs
import datetime as _dt
import decimal
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import pydantic

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.converter import OPAQUE, Converter, HeaderConverter, WireFormat
from sluice.connectors.api.records import Headers
from sluice.connectors.api.schema import OPTIONAL_STRING_SCHEMA, Schema, SchemaAndValue, Type
from sluice.converters.json import java_decimal_str, java_double_str, java_float_str

__all__ = ["StringConverter", "StringConverterConfig", "java_to_string"]


class StringConverterConfig(PluginConfig):
    """Settings of :class:`StringConverter` (Connect's ``StringConverterConfig`` keys)."""

    converter_encoding: str = pydantic.Field(
        "UTF-8", description="Java or Python name of the character set used to encode and decode strings."
    )
    converter_type: Literal["key", "value", "header"] | None = pydantic.Field(
        None, description="Set by the runtime: what the converter is used for."
    )

    @pydantic.field_validator("converter_encoding")
    @classmethod
    def _known_charset(cls, value: str) -> str:
        try:
            codecs.lookup(value)
        except LookupError:
            raise ValueError(f"unknown character set {value!r}") from None
        return value


def _codec(encoding: str) -> tuple[Callable[[str], bytes], Callable[[bytes], str]]:
    """Encode/decode functions that behave like Java's charset of the same name."""
    name = codecs.lookup(encoding).name
    if name == "utf-16":
        # Java writes a big-endian byte order mark and reads big-endian when there is none;
        # Python's utf-16 uses the machine's byte order for both.
        def encode16(text: str) -> bytes:
            return b"\xfe\xff" + text.encode("utf-16-be", "replace") if text else b""

        def decode16(data: bytes) -> str:
            return data.decode("utf-16" if data[:2] in (b"\xfe\xff", b"\xff\xfe") else "utf-16-be", "replace")

        return encode16, decode16
    if name == "utf-32":
        # Java writes big-endian without a byte order mark and reads big-endian unless one says otherwise.
        def decode32(data: bytes) -> str:
            bom = data[:4] in (b"\x00\x00\xfe\xff", b"\xff\xfe\x00\x00")
            return data.decode("utf-32" if bom else "utf-32-be", "replace")

        return (lambda text: text.encode("utf-32-be", "replace")), decode32
    return (lambda text: text.encode(name, "replace")), (lambda data: data.decode(name, "replace"))


def java_to_string(value: Any, schema: Schema | None = None) -> str:
    """What Java's ``toString()`` returns for the Connect value ``value`` (described by ``schema``)."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        return java_float_str(value) if schema is not None and schema.type is Type.FLOAT32 else java_double_str(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return str(value)
        sign, digits, exponent = value.as_tuple()
        unscaled = int("".join(map(str, digits)) or "0")
        return java_decimal_str(-unscaled if sign else unscaled, -int(exponent))
    if isinstance(value, (list, tuple)):
        item = schema.value_schema if schema is not None and schema.type is Type.ARRAY else None
        return "[" + ", ".join(java_to_string(v, item) for v in value) + "]"
    if isinstance(value, Mapping):
        if schema is not None and schema.type is Type.STRUCT:
            # Struct.toString() lists the non-null fields in schema order.
            shown = (
                f"{f.name}={java_to_string(value[f.name], f.schema)}"
                for f in schema.fields
                if value.get(f.name) is not None
            )
            return "Struct{" + ",".join(shown) + "}"
        keys = schema.key_schema if schema is not None and schema.type is Type.MAP else None
        values = schema.value_schema if schema is not None and schema.type is Type.MAP else None
        return "{" + ", ".join(f"{java_to_string(k, keys)}={java_to_string(v, values)}" for k, v in value.items()) + "}"
    if isinstance(value, (_dt.date, _dt.time)):
        return value.isoformat()  # java.util.Date.toString() depends on the JVM's zone; ISO is the useful form
    return str(value)


class StringConverter(Converter, HeaderConverter):
    """Kafka Connect's ``StringConverter``: text in ``converter.encoding`` (UTF-8 by default).

    ``None`` stays ``None``; ``bytes`` values are written unchanged (Java would write the array's
    identity hash, which nobody wants). Reading returns an optional string schema. Called from the
    task thread.
    """

    Config: ClassVar[type[PluginConfig]] = StringConverterConfig
    version: ClassVar[str] = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = ("org.apache.kafka.connect.storage.StringConverter",)

    def __init__(self) -> None:
        self._apply(StringConverterConfig.model_validate({}))

    def configure(self, config: Mapping[str, Any], is_key: bool = False) -> None:
        """Apply ``converter.encoding``; an unknown character set raises a ``ConfigError``."""
        self._apply(StringConverterConfig.parse(config))

    def _apply(self, config: StringConverterConfig) -> None:
        self.config = config
        self._encode, self._decode = _codec(config.converter_encoding)
        self._utf8 = codecs.lookup(config.converter_encoding).name == "utf-8"

    def wire_format(self) -> WireFormat:
        """UTF-8 text; any other ``converter.encoding`` declares nothing."""
        return WireFormat("string") if self._utf8 else OPAQUE

    def from_connect_data(
        self, topic: str, schema: Schema | None, value: Any, headers: Headers | None = None
    ) -> bytes | None:
        """Encode ``value`` as text (its Java ``toString()`` when it is not a string)."""
        if value is None:
            return None
        if type(value) is not str:
            if isinstance(value, (bytes, bytearray, memoryview)):
                return bytes(value)
            value = java_to_string(value, schema)
        return self._encode(value)

    def to_connect_data(self, topic: str, data: bytes | None, headers: Headers | None = None) -> SchemaAndValue:
        """Decode ``data`` as an optional string."""
        return SchemaAndValue(OPTIONAL_STRING_SCHEMA, None if data is None else self._decode(bytes(data)))

    def from_connect_batch(
        self, topic: str, schemas: Sequence[Schema | None], values: Sequence[Any]
    ) -> list[bytes | None]:
        """Encode many values; plain strings take a single encode call each."""
        encode, convert = self._encode, self.from_connect_data
        return [encode(v) if type(v) is str else convert(topic, s, v) for s, v in zip(schemas, values)]

    def to_connect_batch(self, topic: str, datas: Sequence[bytes | None]) -> tuple[list[Schema | None], list[Any]]:
        """Decode many values."""
        schemas: list[Schema | None] = [OPTIONAL_STRING_SCHEMA] * len(datas)
        if self._utf8:
            # The sink hot path: bytes.decode called directly, no Python-level function per value.
            return schemas, [None if d is None else d.decode("utf-8", "replace") for d in datas]
        decode = self._decode
        return schemas, [None if d is None else decode(d) for d in datas]

    def from_connect_header(self, topic: str, key: str, schema: Schema | None, value: Any) -> bytes | None:
        """Encode a header value exactly as a record value, with the schema a transform attached to it if any."""
        if type(value) is SchemaAndValue:
            schema, value = value
        return self.from_connect_data(topic, schema, value)

    def to_connect_header(self, topic: str, key: str, data: bytes | None) -> SchemaAndValue:
        """Decode a header value exactly as a record value."""
        return self.to_connect_data(topic, data)
