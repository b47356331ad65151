"""Configuration of the Elasticsearch sink: the keys of Confluent's ``ElasticsearchSinkConnector`` 11.x.

Defaults are Confluent's. Sluice additions are marked in their descriptions. Keystores and
truststores are PEM files: Python cannot read Java's JKS format, so ``*.type`` other than PEM is
refused with a message naming the key.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_core import PydanticCustomError

from sluice.connectors.api import ConfigError, LocalPath, PluginConfig


def split_list(value: Any) -> Any:
    """Connect's LIST type: ``"a, b"`` and ``["a", "b"]`` mean the same; empty items are dropped."""
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    if isinstance(value, (list, tuple)):
        return [item.strip() if isinstance(item, str) else item for item in value if not (isinstance(item, str) and not item.strip())]
    return value


class WriteMethod(enum.StrEnum):
    INSERT = "insert"
    UPSERT = "upsert"


class NullValueBehavior(enum.StrEnum):
    IGNORE = "ignore"
    DELETE = "delete"
    FAIL = "fail"


class MalformedDocBehavior(enum.StrEnum):
    IGNORE = "ignore"
    WARN = "warn"
    FAIL = "fail"


class DataStreamType(enum.StrEnum):
    NONE = "none"
    LOGS = "logs"
    METRICS = "metrics"


class SecurityProtocol(enum.StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"


class ElasticsearchSinkConfig(PluginConfig):
    """Where documents go, how records become documents, and how bulk requests are paced."""

    # -- connection --------------------------------------------------------------------------------
    connection_url: list[str] = Field(
        description="Elasticsearch/OpenSearch URLs (http:// or https://); requests go round robin and fail over to the next."
    )
    connection_username: str | None = Field(None, description="User name for HTTP basic authentication.")
    connection_password: SecretStr | None = Field(None, description="Password for HTTP basic authentication.")
    connection_compression: bool = Field(False, description="gzip the bodies of bulk requests.")
    connection_timeout_ms: int = Field(1000, ge=1, description="Time to establish a connection, in ms.")
    read_timeout_ms: int = Field(3000, ge=1, description="Time to wait for a response, in ms (a timeout is retried).")
    max_connection_idle_time_ms: int = Field(60000, ge=0, description="Idle connections are closed after this long.")
    elastic_security_protocol: SecurityProtocol = Field(
        SecurityProtocol.PLAINTEXT, description="PLAINTEXT, or SSL to apply the elastic.https.* settings."
    )
    # LocalPath: PEM files the worker reads, so confined to connector.allowed.paths like any local file.
    elastic_https_ssl_truststore_location: LocalPath | None = Field(
        None, description="PEM file of the CA certificates to trust (default: the system's)."
    )
    elastic_https_ssl_truststore_password: SecretStr | None = Field(None, description="Accepted; PEM truststores have no password.")
    elastic_https_ssl_truststore_type: str = Field("PEM", description="Only PEM is supported.")
    elastic_https_ssl_keystore_location: LocalPath | None = Field(
        None, description="PEM file with the client certificate (and its key, unless elastic.https.ssl.key.location is set)."
    )
    elastic_https_ssl_keystore_password: SecretStr | None = Field(None, description="Password of an encrypted client key.")
    elastic_https_ssl_keystore_type: str = Field("PEM", description="Only PEM is supported.")
    elastic_https_ssl_key_location: LocalPath | None = Field(None, description="Sluice addition: PEM file of the client key.")
    elastic_https_ssl_key_password: SecretStr | None = Field(None, description="Password of an encrypted client key.")
    elastic_https_ssl_endpoint_identification_algorithm: str = Field(
        "https", description="'https' checks the server's host name against its certificate; empty disables the check."
    )
    elastic_https_ssl_verify: bool = Field(
        True, description="Sluice addition: false skips certificate verification altogether (testing only)."
    )

    # -- records to documents ----------------------------------------------------------------------
    key_ignore: bool = Field(False, description="Use topic+partition+offset as the document id instead of the record key.")
    topic_key_ignore: list[str] = Field(default_factory=list, description="Topics for which key.ignore=true applies.")
    schema_ignore: bool = Field(False, description="Do not create mappings from record schemas (dynamic mapping applies).")
    topic_schema_ignore: list[str] = Field(default_factory=list, description="Topics for which schema.ignore=true applies.")
    compact_map_entries: bool = Field(True, description="Write string-keyed maps as JSON objects (always done).")
    write_method: WriteMethod = Field(WriteMethod.INSERT, description="insert (index/replace) or upsert (partial update).")
    use_autogenerated_ids: bool = Field(False, description="Let the server choose ids (insert only; replays duplicate).")
    behavior_on_null_values: NullValueBehavior = Field(
        NullValueBehavior.FAIL, description="Tombstones: ignore, delete the document with the key's id, or fail."
    )
    behavior_on_malformed_documents: MalformedDocBehavior = Field(
        MalformedDocBehavior.FAIL,
        description="Documents the server rejects: ignore or warn (and send them to the DLQ), or fail the task.",
    )
    drop_invalid_message: bool = Field(
        False, description="Drop records that cannot become documents (bad key, non-object value) instead of reporting them."
    )
    external_version_header: str | None = Field(
        None,
        description="Header whose integer value becomes the document version (version_type=external); unset: no versioning.",
    )
    external_version_field: str | None = Field(
        None, description="Sluice addition: top-level value field whose integer value becomes the document version."
    )

    # -- bulk requests -----------------------------------------------------------------------------
    batch_size: int = Field(2000, ge=1, le=1_000_000, description="Most actions per bulk request.")
    bulk_size_bytes: int = Field(5 * 1024 * 1024, ge=1024, description="Most bytes per bulk request.")
    max_in_flight_requests: int = Field(5, ge=1, le=64, description="Concurrent bulk requests per task.")
    max_buffered_records: int = Field(
        20000, ge=1, description="Records buffered per task; when reached, consumption pauses until requests complete."
    )
    linger_ms: int = Field(1, ge=0, le=86_400_000, description="Wait this long for a bulk request to fill up.")
    flush_timeout_ms: int = Field(180000, ge=1, description="How long a flush waits for buffered records before the task fails.")
    flush_synchronously: bool = Field(False, description="Wait for every buffered record at each offset commit.")
    max_retries: int = Field(5, ge=0, description="Retries of a failed bulk request before the task fails.")
    retry_backoff_ms: int = Field(
        100, ge=0, description="First retry wait; it doubles per attempt (with jitter), capped at 10 s (Sluice cap)."
    )

    # -- data streams ------------------------------------------------------------------------------
    data_stream_type: DataStreamType = Field(DataStreamType.NONE, description="NONE (indices), LOGS or METRICS.")
    data_stream_dataset: str | None = Field(None, description="Dataset part of the data stream name {type}-{dataset}-{namespace}.")
    data_stream_namespace: str = Field("${topic}", description="Namespace part of the data stream name; ${topic} is the topic.")
    data_stream_timestamp_field: list[str] = Field(
        default_factory=list, description="Value fields to use as @timestamp (first present wins); else the Kafka timestamp."
    )

    @field_validator(
        "connection_url", "topic_key_ignore", "topic_schema_ignore", "data_stream_timestamp_field", mode="before"
    )
    @classmethod
    def _lists(cls, value: object) -> object:
        return split_list(value)

    @field_validator("write_method", "behavior_on_null_values", "behavior_on_malformed_documents", "data_stream_type", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("elastic_security_protocol", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("connection_url")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        if not value:
            raise PydanticCustomError("connection_url", "must name at least one URL")
        for url in value:
            if not url.lower().startswith(("http://", "https://")):
                raise PydanticCustomError("connection_url", "{url!r} is not an http:// or https:// URL", {"url": url})
        return [url.rstrip("/") for url in value]

    @field_validator("elastic_https_ssl_truststore_type", "elastic_https_ssl_keystore_type")
    @classmethod
    def _pem_only(cls, value: str) -> str:
        if value.strip().upper() != "PEM":
            raise PydanticCustomError(
                "store_type", "{v!r} is not supported: convert the store to PEM (openssl pkcs12 -in store.p12 -out store.pem)",
                {"v": value},
            )
        return "PEM"

    @field_validator("data_stream_dataset")
    @classmethod
    def _dataset(cls, value: str | None) -> str | None:
        if value is not None and value.strip() == "":
            return None
        if value is not None and (len(value) > 100 or any(c in value for c in '\\/*?"<>| ,#:-') or value != value.lower()):
            raise PydanticCustomError(
                "dataset", "must be lower case, at most 100 characters, without '-' or any of \\/*?\"<>| ,#:"
            )
        return value

    @model_validator(mode="after")
    def _combinations(self) -> ElasticsearchSinkConfig:
        # ConfigError (not a pydantic error) so the message names the key, not the whole model.
        streams = self.data_stream_type is not DataStreamType.NONE
        if streams != (self.data_stream_dataset is not None):
            raise ConfigError(
                "Invalid configuration: data.stream.type and data.stream.dataset must be set together (or neither)",
                key="data.stream.dataset" if streams else "data.stream.type",
            )
        if streams and self.write_method is WriteMethod.UPSERT:
            raise ConfigError(
                "Invalid configuration: write.method=upsert cannot write to data streams (they are append-only)",
                key="write.method",
            )
        if self.write_method is WriteMethod.UPSERT and self.use_autogenerated_ids:
            raise ConfigError(
                "Invalid configuration: use.autogenerated.ids=true needs write.method=insert", key="use.autogenerated.ids"
            )
        if self.versioned and self.write_method is WriteMethod.UPSERT:
            key = "external.version.header" if self.external_version_header else "external.version.field"
            raise ConfigError(
                f"Invalid configuration: {key} (external versions) cannot be used with write.method=upsert", key=key
            )
        if self.external_version_header and self.external_version_field:
            raise ConfigError(
                "Invalid configuration: set external.version.header or external.version.field, not both",
                key="external.version.field",
            )
        if (self.connection_username is None) != (self.connection_password is None):
            key = "connection.password" if self.connection_username is not None else "connection.username"
            raise ConfigError(
                "Invalid configuration: connection.username and connection.password must be set together", key=key
            )
        return self

    # -- derived -----------------------------------------------------------------------------------

    @property
    def versioned(self) -> bool:
        return bool(self.external_version_header or self.external_version_field)

    def ignores_key(self, topic: str) -> bool:
        return self.key_ignore or topic in self.topic_key_ignore

    def ignores_schema(self, topic: str) -> bool:
        return self.schema_ignore or topic in self.topic_schema_ignore

    @classmethod
    def from_task_config(cls, raw: Mapping[str, Any]) -> ElasticsearchSinkConfig:
        """Parse a task configuration, ignoring the keys the runtime adds (``name``, ``task.class``, …)."""
        known = {info.alias or name for name, info in cls.model_fields.items()} | set(cls.model_fields)
        config: ElasticsearchSinkConfig = cls.parse(raw, ignore=set(raw) - known)
        return config

    def to_task_config(self) -> dict[str, Any]:
        """The task configuration, secrets in clear (the runtime masks task configurations itself)."""
        out = self.model_dump(by_alias=True, exclude_none=True, mode="json")
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            key = info.alias or name
            if isinstance(value, SecretStr):
                out[key] = value.get_secret_value()
            elif isinstance(value, list):
                out[key] = ",".join(str(v) for v in value)
        return out


#: Keys of Confluent's Elasticsearch sink that Sluice accepts and does not honour, with the reason.
ELASTICSEARCH_UNIMPLEMENTED_KEYS: dict[str, str] = {
    "type.name": "mapping types were removed from Elasticsearch 7 (and from Confluent's 11.x); documents get _doc",
    "topic.index.map": "removed in Confluent's 11.x; rename with the RegexRouter or TimestampRouter transform",
    "kerberos.*": "Kerberos authentication is not implemented; use connection.username/connection.password or TLS",
    "proxy.*": "HTTP proxies are not implemented",
    "external.resource.usage": "writing to pre-existing indices, aliases or data streams by mapping is not implemented",
    "topic.to.external.resource.mapping": "writing to pre-existing indices, aliases or data streams by mapping is not implemented",
    "log.sensitive.data": "not implemented",
}
