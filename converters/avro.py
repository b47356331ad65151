"""Confluent's ``AvroConverter``: Avro bodies whose schemas live in a Schema Registry.

Each value is written in Confluent's wire format: a zero byte, the schema's registry id as four
big-endian bytes, then the Avro binary encoding. Schemas are mapped as Confluent's ``AvroData``
maps them (:mod:`sluice.converters.avro_data`) and registered under the subject the configured
strategy names (``<topic>-key`` / ``<topic>-value`` by default), so Java workers, Confluent's
deserializers, ksqlDB and Sluice all read each other's records.

Settings are the ``key.converter.*`` / ``value.converter.*`` keys of Confluent's converter:
``schema.registry.url``, ``auto.register.schemas``, ``use.latest.version``,
``key.subject.name.strategy`` / ``value.subject.name.strategy``, ``basic.auth.credentials.source``
with ``basic.auth.user.info``, ``bearer.auth.token``, ``connect.meta.data``,
``enhanced.avro.schema.support``, ``scrub.invalid.names`` and ``schemas.cache.config``. Keys it
does not know (``schemas.enable`` is often left in configs copied from JSON set-ups) are logged
and ignored, as Connect does.

Speed: the Avro schema, its registry id, fastavro's parsed form and the value conversion are
built once per Connect schema (and once per schema id when reading). A struct of primitive
fields (most rows) is written by the native writer (``sluice_native.AvroRecordWriter``, Rust),
which checks each field as the Python encoder does and hands back any record it does not take
as it is, and a record of primitive fields is read by ``sluice_native.AvroRecordReader``, which
hands back any body it cannot read; everything else goes through fastavro.
"""

from __future__ import annotations

import io
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

import orjson
import pydantic

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.converter import Converter, WireFormat
from sluice.connectors.api.errors import ConfigError, DataError
from sluice.connectors.api.records import Headers
from sluice.connectors.api.schema import Schema, SchemaAndValue, infer_schema
from sluice.converters.avro_data import AvroData, native_plan, native_read_plan, strip_logical_types
from sluice.converters.schema_registry import SchemaRegistryClient

try:
    import sluice_native
except ImportError:  # pragma: no cover - make setup builds it; without it every record takes fastavro
    sluice_native = None

__all__ = ["AvroConverter", "AvroConverterConfig", "MAGIC_BYTE"]

log = logging.getLogger(__name__)

MAGIC_BYTE = 0

_STRATEGY_PACKAGE = "io.confluent.kafka.serializers.subject."
_STRATEGIES = ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")


def _strategy(value: Any) -> Any:
    if isinstance(value, str):
        short = value.strip().removeprefix(_STRATEGY_PACKAGE)
        if short not in _STRATEGIES:
            raise ValueError(f"unknown subject name strategy {value!r}; use one of {', '.join(_STRATEGIES)}")
        return short
    return value


class AvroConverterConfig(PluginConfig):
    """Settings of :class:`AvroConverter` (the keys of Confluent's ``AvroConverterConfig``)."""

    model_config = pydantic.ConfigDict(extra="ignore")

    schema_registry_url: str = pydantic.Field(
        description="Comma-separated base URLs of the Schema Registry (Confluent's REST API: Confluent, Karapace, "
        "Redpanda, Apicurio's /apis/ccompat/v7).",
    )
    auto_register_schemas: bool = pydantic.Field(
        True, description="Register a record's schema when the subject does not have it yet."
    )
    use_latest_version: bool = pydantic.Field(
        False,
        description="Write with the subject's latest registered schema instead of the record's own (with "
        "auto.register.schemas=false).",
    )
    key_subject_name_strategy: str = pydantic.Field(
        "TopicNameStrategy",
        description="How key subjects are named: TopicNameStrategy (<topic>-key), "
        "RecordNameStrategy (<record name>) or TopicRecordNameStrategy (<topic>-<record name>).",
    )
    value_subject_name_strategy: str = pydantic.Field(
        "TopicNameStrategy", description="How value subjects are named (as key.subject.name.strategy)."
    )
    basic_auth_credentials_source: Literal["URL", "USER_INFO", "SASL_INHERIT"] = pydantic.Field(
        "URL", description="Where basic-auth credentials come from: the URL's user info, or basic.auth.user.info."
    )
    basic_auth_user_info: pydantic.SecretStr | None = pydantic.Field(
        None, description="user:password for HTTP basic authentication (with basic.auth.credentials.source=USER_INFO)."
    )
    bearer_auth_token: pydantic.SecretStr | None = pydantic.Field(None, description="A static bearer token.")
    connect_meta_data: bool = pydantic.Field(
        True, description="Keep Connect's schema name, version, doc, parameters and defaults in connect.* attributes."
    )
    enhanced_avro_schema_support: bool = pydantic.Field(
        False, description="Write strings that were Avro enums back as those enums."
    )
    scrub_invalid_names: bool = pydantic.Field(
        False, description="Replace characters Avro does not allow in record and field names with '_'."
    )
    schemas_cache_config: int = pydantic.Field(1000, ge=1, description="Schemas cached per direction.")
    schema_registry_request_timeout_ms: int = pydantic.Field(
        30_000, ge=1, description="How long one request to the registry may take."
    )
    converter_type: Literal["key", "value", "header"] | None = pydantic.Field(
        None, description="Set by the runtime: what the converter is used for."
    )

    _normalize_key_strategy = pydantic.field_validator("key_subject_name_strategy", mode="before")(_strategy)
    _normalize_value_strategy = pydantic.field_validator("value_subject_name_strategy", mode="before")(_strategy)

    @pydantic.field_validator("basic_auth_credentials_source", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class _Writer:
    """What writing one Connect schema takes: the datum conversion, fastavro's schema, the subject's
    id header, and the native writer when the schema is a flat struct."""

    __slots__ = ("encode", "header", "native", "parsed")

    def __init__(self, encode: Callable[[Any], Any], parsed: Any, header: bytes, native: Any = None) -> None:
        self.encode = encode
        self.parsed = parsed
        self.header = header
        self.native = native


class _Reader:
    __slots__ = ("decode", "native", "parsed", "schema")

    def __init__(self, schema: Schema, decode: Callable[[Any], Any] | None, parsed: Any, native: Any = None) -> None:
        self.schema = schema
        self.decode = decode
        self.parsed = parsed
        self.native = native


def _fastavro() -> Any:
    try:
        import fastavro
    except ImportError:  # pragma: no cover - fastavro comes with the avro and s3 extras
        raise ConfigError("AvroConverter needs fastavro: pip install 'sluice[avro]'") from None
    return fastavro


class AvroConverter(Converter):
    """Confluent's ``AvroConverter``: Confluent's wire format with schemas in a Schema Registry.

    Use it for keys or values. A record without a schema has one inferred for primitive values
    (string, int64, float64, boolean, bytes); a schemaless map or list is refused with a message
    that says so. Called from the task thread.
    """

    Config: ClassVar[type[PluginConfig]] = AvroConverterConfig
    version: ClassVar[str] = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = ("io.confluent.connect.avro.AvroConverter",)

    #: Whether flat structs are written and read by ``sluice_native`` (built by ``make setup``).
    native_enabled: bool = sluice_native is not None and hasattr(sluice_native, "AvroRecordReader")

    def __init__(self) -> None:
        self.config: AvroConverterConfig | None = None
        self._is_key = False
        self._registry: SchemaRegistryClient | None = None

    def configure(self, config: Mapping[str, Any], is_key: bool = False) -> None:
        """Apply the converter settings; ``schema.registry.url`` is required."""
        parsed: AvroConverterConfig = AvroConverterConfig.parse(config)
        known = {info.alias for info in AvroConverterConfig.model_fields.values()}
        unknown = sorted(k for k in config if k not in known)
        if unknown:
            log.warning("AvroConverter ignores the settings it does not know: %s", ", ".join(unknown))
        creds = parsed.basic_auth_user_info.get_secret_value() if parsed.basic_auth_user_info else None
        if parsed.basic_auth_credentials_source == "USER_INFO" and creds is None:
            raise ConfigError(
                "basic.auth.credentials.source=USER_INFO needs basic.auth.user.info (user:password)",
                key="basic.auth.user.info",
            )
        try:
            registry = SchemaRegistryClient(
                parsed.schema_registry_url,
                user_info=creds if parsed.basic_auth_credentials_source == "USER_INFO" else None,
                token=parsed.bearer_auth_token.get_secret_value() if parsed.bearer_auth_token else None,
                timeout_s=parsed.schema_registry_request_timeout_ms / 1000,
            )
        except ValueError as exc:
            raise ConfigError(f"Invalid schema.registry.url: {exc}", key="schema.registry.url") from None
        self.close()
        self.config = parsed
        self._is_key = is_key or parsed.converter_type == "key"
        self._registry = registry
        self._fastavro = _fastavro()
        self._data = AvroData(
            connect_meta_data=parsed.connect_meta_data,
            scrub_invalid_names=parsed.scrub_invalid_names,
            enhanced_schema_support=parsed.enhanced_avro_schema_support,
        )
        strategy = parsed.key_subject_name_strategy if self._is_key else parsed.value_subject_name_strategy
        self._strategy = strategy
        self._cache_size = parsed.schemas_cache_config
        # (topic, Connect schema) → writer; the identity front cache makes a repeated schema object one lookup.
        self._writers: OrderedDict[tuple[str, Schema], _Writer] = OrderedDict()
        self._writers_by_id: dict[tuple[str, int], tuple[Schema, _Writer]] = {}
        self._readers: OrderedDict[int, _Reader] = OrderedDict()
        self._buffer = io.BytesIO()

    def close(self) -> None:
        if self._registry is not None:
            self._registry.close()
            self._registry = None

    # -- writing ----------------------------------------------------------------------------------

    def from_connect_data(
        self, topic: str, schema: Schema | None, value: Any, headers: Headers | None = None
    ) -> bytes | None:
        """Serialize ``value`` in Confluent's wire format, registering its schema if needed."""
        if value is None:
            return None
        return self._write(topic, schema, value)

    def from_connect_batch(
        self, topic: str, schemas: Sequence[Schema | None], values: Sequence[Any]
    ) -> list[bytes | None]:
        """Serialize many values of one topic; a batch of one flat schema is written natively in one call."""
        write = self._write
        if values and schemas and self.native_enabled:
            first = schemas[0]
            if first is not None and all(s is first for s in schemas):
                writer = self._writer_for(topic, first)
                if writer.native is not None:
                    # A record the native writer leaves to Python (None) is written the Python way.
                    out: list[bytes | None] = writer.native.write_batch(
                        values if type(values) is list else list(values)
                    )
                    for i, data in enumerate(out):
                        if data is None and values[i] is not None:
                            out[i] = self._write_python(topic, writer, values[i])
                    return out
        return [None if v is None else write(topic, s, v) for s, v in zip(schemas, values)]

    def _writer_for(self, topic: str, schema: Schema) -> _Writer:
        front = self._writers_by_id.get((topic, id(schema)))
        if front is not None and front[0] is schema:
            return front[1]
        return self._writer(topic, schema)

    def _write(self, topic: str, schema: Schema | None, value: Any) -> bytes:
        if schema is None:
            schema = _inferred(value)
        writer = self._writer_for(topic, schema)
        if writer.native is not None:
            data: bytes | None = writer.native.write(value)
            if data is not None:
                return data
        return self._write_python(topic, writer, value)

    def _write_python(self, topic: str, writer: _Writer, value: Any) -> bytes:
        datum = writer.encode(value)
        buffer = self._buffer
        buffer.seek(0)
        buffer.truncate()
        buffer.write(writer.header)
        try:
            self._fastavro.schemaless_writer(buffer, writer.parsed, datum)
        except Exception as exc:  # fastavro raises TypeError, ValueError, struct.error, … for a datum it cannot write
            raise DataError(f"Value does not match its Avro schema for topic {topic!r}: {exc}") from exc
        return buffer.getvalue()

    def _writer(self, topic: str, schema: Schema) -> _Writer:
        key = (topic, schema)
        writer = self._writers.get(key)
        if writer is None:
            writer = self._new_writer(topic, schema)
            self._writers[key] = writer
            if len(self._writers) > self._cache_size:
                self._writers.popitem(last=False)
        else:
            self._writers.move_to_end(key)
        if len(self._writers_by_id) >= self._cache_size:
            self._writers_by_id.clear()
        self._writers_by_id[(topic, id(schema))] = (schema, writer)
        return writer

    def _new_writer(self, topic: str, schema: Schema) -> _Writer:
        assert self.config is not None and self._registry is not None
        avro = self._data.avro_schema(schema)
        text = orjson.dumps(avro).decode()
        subject = self._subject(topic, avro)
        if self.config.use_latest_version:
            latest = self._registry.latest(subject)
            schema_id, avro = latest.id, orjson.loads(latest.schema)
            parsed = self._parse(avro, subject)
        else:
            parsed = self._parse(avro, subject)  # before registering: never register what cannot be written
            if self.config.auto_register_schemas:
                schema_id = self._registry.register(subject, text)
            else:
                schema_id = self._registry.lookup(subject, text).id
        header = bytes([MAGIC_BYTE]) + schema_id.to_bytes(4, "big")
        native = None
        if self.native_enabled and not self.config.use_latest_version:
            plan = native_plan(schema, enhanced=self.config.enhanced_avro_schema_support)
            if plan is not None:
                native = sluice_native.AvroRecordWriter(header, plan)
        return _Writer(self._data.encoder(schema), parsed, header, native)

    def _parse(self, avro: Any, subject: str) -> Any:
        try:
            return self._fastavro.parse_schema(strip_logical_types(avro))
        except Exception as exc:  # fastavro raises several types for a schema it refuses
            raise DataError(f"The Avro schema for subject {subject!r} is not valid Avro: {exc}") from exc

    def _subject(self, topic: str, avro: Any) -> str:
        if self._strategy == "TopicNameStrategy":
            return f"{topic}-{'key' if self._is_key else 'value'}"
        name = _record_name(avro)
        return name if self._strategy == "RecordNameStrategy" else f"{topic}-{name}"

    # -- reading ----------------------------------------------------------------------------------

    def wire_format(self) -> WireFormat:
        """Confluent's Avro wire format: schemas by registry id (see :meth:`writer_schema`)."""
        return WireFormat("avro")

    def writer_schema(self, schema_id: int) -> Mapping[str, Any]:
        """The Avro schema registered under ``schema_id`` (parsed JSON; from the registry client's cache)."""
        if self._registry is None:
            raise DataError("AvroConverter is not configured")
        try:
            schema: Mapping[str, Any] = orjson.loads(self._registry.schema(schema_id))
        except orjson.JSONDecodeError as exc:
            raise DataError(f"Schema id {schema_id} from the registry is not valid JSON: {exc}") from exc
        return schema

    def to_connect_data(self, topic: str, data: bytes | None, headers: Headers | None = None) -> SchemaAndValue:
        """Deserialize bytes in Confluent's wire format, fetching the writer's schema by its id."""
        if data is None:
            return SchemaAndValue(None, None)
        reader, value = self._read(topic, data)
        return SchemaAndValue(reader.schema, value)

    def to_connect_batch(self, topic: str, datas: Sequence[bytes | None]) -> tuple[list[Schema | None], list[Any]]:
        """Deserialize many values of one topic."""
        schemas: list[Schema | None] = []
        values: list[Any] = []
        read = self._read
        for data in datas:
            if data is None:
                schemas.append(None)
                values.append(None)
                continue
            reader, value = read(topic, data)
            schemas.append(reader.schema)
            values.append(value)
        return schemas, values

    def _read(self, topic: str, data: bytes) -> tuple[_Reader, Any]:
        if len(data) < 5 or data[0] != MAGIC_BYTE:
            raise DataError(
                f"Unknown magic byte: the data in topic {topic!r} is not in Confluent's Avro wire format "
                f"(first bytes {bytes(data[:5])!r}); was it written by another converter?"
            )
        schema_id = int.from_bytes(data[1:5], "big")
        reader = self._readers.get(schema_id)
        if reader is None:
            reader = self._new_reader(topic, schema_id)
        if reader.native is not None and type(data) is bytes:
            value = reader.native.read(data, 5)
            if value is not None:
                return reader, value
        stream = io.BytesIO(data)
        stream.seek(5)
        try:
            datum = self._fastavro.schemaless_reader(
                stream, reader.parsed, None, return_record_name=True, return_record_name_override=True
            )
        except Exception as exc:  # truncated or corrupt bodies raise EOFError, ValueError, …
            raise DataError(f"Cannot read Avro data with schema id {schema_id} in topic {topic!r}: {exc}") from exc
        return reader, datum if reader.decode is None else reader.decode(datum)

    def _new_reader(self, topic: str, schema_id: int) -> _Reader:
        assert self._registry is not None
        text = self._registry.schema(schema_id)
        try:
            avro = orjson.loads(text)
            parsed = self._fastavro.parse_schema(strip_logical_types(avro))
        except Exception as exc:
            raise DataError(f"Schema id {schema_id} from the registry is not a valid Avro schema: {exc}") from exc
        schema, decode = self._data.connect_schema(avro)
        if schema.version is None and self._strategy == "TopicNameStrategy":
            # As Confluent's converter: without connect.version, the subject version becomes the schema version.
            version = self._registry.version(self._subject(topic, avro), schema_id)
            if version is not None:
                schema = schema.with_(version=version)
        native = None
        if self.native_enabled:
            plan = native_read_plan(avro, connect_meta_data=self._data.connect_meta_data)
            if plan is not None:
                native = sluice_native.AvroRecordReader(plan)
        reader = _Reader(schema, decode, parsed, native)
        self._readers[schema_id] = reader
        if len(self._readers) > self._cache_size:
            self._readers.popitem(last=False)
        return reader


def _record_name(avro: Any) -> str:
    """The full name a record-name strategy uses: the record's, or the primitive type's name."""
    if isinstance(avro, list):
        named = [b for b in avro if b != "null"]
        avro = named[0] if len(named) == 1 else avro
    if isinstance(avro, dict):
        if avro.get("type") in ("record", "enum", "fixed"):
            name: str = avro["name"]
            namespace = avro.get("namespace")
            return name if "." in name or not namespace else f"{namespace}.{name}"
        return str(avro.get("type"))
    if isinstance(avro, str):
        return avro
    raise DataError("RecordNameStrategy needs a record schema, not a union")


def _inferred(value: Any) -> Schema:
    """The schema Connect infers for a schemaless primitive value; structured values are refused."""
    schema = infer_schema(bytes(value) if isinstance(value, memoryview) else value)
    if schema is None:
        raise DataError(
            f"AvroConverter needs a schema for a {type(value).__name__} value; this record has none. Give the "
            "source connector a schema (for JSON input: JsonConverter with schemas.enable=true), or write "
            "schemaless data with JsonConverter (schemas.enable=false)."
        )
    return schema
