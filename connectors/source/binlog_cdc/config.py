"""Configuration of the binlog CDC source: Debezium's MySQL and MariaDB connector keys.

Keys, defaults and meanings are Debezium's (``io.debezium.connector.binlog.BinlogConnectorConfig``),
with these differences in this first increment:

* ``snapshot.mode``: ``initial`` (the default), ``initial_only``, ``when_needed``, ``always`` and
  ``no_data`` (also named ``never``, ``schema_only``); snapshots are read in primary-key chunks
  beside streaming (:mod:`.snapshot`), ``snapshot.fetch.size`` rows per chunk;
* the schema history (:mod:`.history`) is Debezium's: ``schema.history.internal.kafka.topic`` and
  ``.kafka.bootstrap.servers`` are required, with the history's own client settings
  (``schema.history.internal.producer.*`` / ``.consumer.*``, checked against librdkafka as
  ``signal.consumer.*`` is); ``schema.history.internal`` may name ``MemorySchemaHistory`` instead
  (tests), and ``snapshot.mode=recovery`` (``schema_only_recovery``) rebuilds a lost history;
* TLS: ``database.ssl.mode`` as Debezium's, with the CA as a PEM file in Sluice's
  ``database.ssl.ca`` (under ``connector.allowed.paths``) instead of a Java trust store.

The connection follows the least-privilege rules of the JDBC connectors: TCP to one host (no Unix
socket), no option files, ``LOCAL INFILE`` always off (:mod:`.connection`).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator

from sluice.connectors.api import ConfigError, LocalPath, dotted, split_list
from sluice.connectors.api.client_keys import check_denied
from sluice.connectors.cdc.config import DEBEZIUM_UNIMPLEMENTED_KEYS, SignalingCdcConfig, check_regexes
from sluice.connectors.jdbc_common.urls import HOST_PATTERN

#: The task-config key through which the connector tells its task which of Debezium's connectors it
#: is (``mysql`` or ``mariadb``: the ``source.connector`` value and the Source schema's name).
FLAVOR_KEY = "sluice.binlog.connector"
FLAVORS = ("mysql", "mariadb")

#: Debezium's schema history classes this source implements (``schema.history.internal``).
KAFKA_HISTORY = "io.debezium.storage.kafka.history.KafkaSchemaHistory"
MEMORY_HISTORY = "io.debezium.relational.history.MemorySchemaHistory"

#: ``database.ssl.mode`` as Debezium's MariaDB connector spells it → the MySQL connector's mode.
_MARIADB_SSL_MODES = {"disable": "disabled", "trust": "required", "verify-ca": "verify_ca", "verify-full": "verify_identity"}

#: Debezium's snapshot modes and what this increment says about them.
_SNAPSHOT_ALIASES = {"never": "no_data", "schema_only": "no_data", "schema_only_recovery": "recovery"}
_SNAPSHOT_MODES = ("initial", "initial_only", "when_needed", "no_data", "recovery", "schema_only_recovery",
                   "always", "configuration_based", "custom")  # fmt: skip
_IMPLEMENTED_SNAPSHOT_MODES = ("initial", "initial_only", "when_needed", "always", "no_data", "recovery")


class BinlogCdcConfig(SignalingCdcConfig):
    """Debezium ``MySqlConnector`` / ``MariaDbConnector`` keys (see the module docstring)."""

    prefixed_keys: ClassVar[Mapping[str, str]] = {
        "signal.consumer.": "signal_consumer",
        "snapshot.select.statement.overrides.": "snapshot_select_statements",
        "schema.history.internal.producer.": "schema_history_internal_producer",
        "schema.history.internal.consumer.": "schema_history_internal_consumer",
    }

    database_hostname: str = Field("localhost", description="Host name or IP address of the MySQL or MariaDB server.")
    database_port: int = Field(3306, ge=1, le=65535, description="Port of the server.")
    database_user: str = Field(
        description="User with REPLICATION SLAVE and REPLICATION CLIENT (MariaDB 10.5+: BINLOG MONITOR), and SELECT "
        "on the captured tables."
    )
    database_password: SecretStr | None = Field(None, description="Password of database.user.")
    database_server_id: int | None = Field(
        None,
        ge=1,
        le=4294967295,
        description="The replica server id this connector reads the binlog as; unique among the server's replicas. "
        "Default: 5400 + (a hash of topic.prefix) % 1000, stable across restarts.",
    )
    database_ssl_mode: Literal["disabled", "preferred", "required", "verify_ca", "verify_identity"] = Field(
        "preferred",
        description="disabled (plain TCP), preferred (TLS when the server offers it), required (TLS, certificate "
        "not checked), verify_ca (TLS, certificate checked against database.ssl.ca or the system's CAs), "
        "verify_identity (verify_ca, and the host name). Debezium's MariaDB names are accepted too: disable, trust "
        "(= required), verify-ca, verify-full (= verify_identity).",
    )
    database_ssl_ca: LocalPath | None = Field(
        None,
        description="Sluice: the CA certificate(s) (PEM) the server's certificate must chain to for verify_ca and "
        "verify_identity, under the worker's connector.allowed.paths; the system's CAs when unset.",
    )
    connect_timeout_ms: int = Field(30_000, ge=1000, description="Connection timeout.")
    topic_prefix: str = Field(description="Prefix of every topic (<prefix>.<database>.<table>) and the offsets' partition.")
    database_include_list: list[str] = Field(default_factory=list, description="Regexes of databases to capture.")
    database_exclude_list: list[str] = Field(default_factory=list, description="Regexes of databases to leave out.")
    table_include_list: list[str] = Field(default_factory=list, description="Regexes of <database>.<table> to capture.")
    table_exclude_list: list[str] = Field(default_factory=list, description="Regexes of <database>.<table> to leave out.")
    column_include_list: list[str] = Field(
        default_factory=list, description="Regexes of <database>.<table>.<column> to keep."
    )
    column_exclude_list: list[str] = Field(
        default_factory=list, description="Regexes of <database>.<table>.<column> to drop."
    )
    message_key_columns: str = Field(
        "",
        description="Custom event keys: <database>.<table>:<column>[,<column>...] entries separated by ';' (regexes, "
        "case-insensitive); other tables keep their primary key.",
    )
    snapshot_mode: str = Field(
        "initial",
        validate_default=True,
        description="initial (no stored offset: snapshot the captured tables beside streaming), initial_only "
        "(snapshot, then no streaming), when_needed (also when the stored binlog file is gone), always (at every "
        "start), no_data (also named never, schema_only: stream only).",
    )
    snapshot_locking_mode: Literal["minimal", "extended", "none"] = Field(
        "minimal",
        description="minimal: LOCK TABLES ... READ on the captured tables while their shapes and the snapshot's start "
        "position are read; extended: held until the initial snapshot is read (writes wait); none: no lock (chunks "
        "are consistent without one).",
    )
    snapshot_fetch_size: int = Field(10_000, ge=1, description="Rows per resumable chunk of the initial snapshot.")
    snapshot_max_threads: int = Field(1, ge=1, le=1, description="Tables are read one after the other (1 only).")
    snapshot_include_collection_list: list[str] = Field(
        default_factory=list, description="Regexes of <database>.<table>: the captured tables the initial snapshot reads."
    )
    snapshot_select_statement_overrides: list[str] = Field(
        default_factory=list,
        description="<database>.<table> names whose initial snapshot reads the SELECT statement of "
        "snapshot.select.statement.overrides.<database>.<table> (in one read, not in chunks) instead of the table.",
    )
    snapshot_select_statements: dict[str, str] = Field(
        default_factory=dict,
        description="snapshot.select.statement.overrides.<database>.<table>: the statements of the tables listed.",
    )
    signal_data_collection: str = Field("", description="Signal table <database>.<table> (columns id, type, data).")
    include_schema_changes: bool = Field(
        True, description="Schema change events (Debezium's SchemaChangeValue, one per DDL) on <topic.prefix>."
    )
    include_query: bool = Field(
        False,
        description="Put the SQL statement behind each row change into its event's source.query (null otherwise). "
        "The server must log statements beside row events: binlog_annotate_row_events=ON on MariaDB (its default), "
        "binlog_rows_query_log_events=ON on MySQL; without it query stays null (a warning at start says so). "
        "Snapshot events never carry one. Off by default: the statement may show values of columns or tables "
        "the connector leaves out.",
    )
    schema_history_internal: str = Field(
        "io.debezium.storage.kafka.history.KafkaSchemaHistory",
        alias="schema.history.internal",
        description="Where the schema history is kept: io.debezium.storage.kafka.history.KafkaSchemaHistory (a Kafka "
        "topic) or io.debezium.relational.history.MemorySchemaHistory (the task's memory only: after a restart tables "
        "are described from information_schema; for tests).",
    )
    schema_history_internal_kafka_topic: str = Field(
        "",
        validate_default=True,
        description="The schema history topic (one partition, kept forever): every DDL with the binlog position it "
        "ends at. One per connector. Required with the Kafka history.",
    )
    schema_history_internal_kafka_bootstrap_servers: str = Field(
        "",
        validate_default=True,
        description="The Kafka cluster of the schema history topic, reached with the connector's own clients "
        "(schema.history.internal.producer.* / .consumer.*), never the worker's credentials. Required with the Kafka "
        "history.",
    )
    schema_history_internal_producer: dict[str, str] = Field(
        default_factory=dict,
        description="schema.history.internal.producer.<setting>: librdkafka settings of the history producer "
        "(security, SASL, ...).",
    )
    schema_history_internal_consumer: dict[str, str] = Field(
        default_factory=dict,
        description="schema.history.internal.consumer.<setting>: librdkafka settings of the history consumer.",
    )
    schema_history_internal_store_only_captured_tables_ddl: bool = Field(
        False, description="Record only the DDL of captured tables (default: every table's)."
    )
    schema_history_internal_store_only_captured_databases_ddl: bool = Field(
        False, description="Record only the DDL of captured databases (default: every database's)."
    )
    schema_history_internal_skip_unparseable_ddl: bool = Field(
        False,
        description="Ignore DDL the parser does not follow; by default the tables such a statement names are "
        "described again from information_schema (with a warning naming the statement).",
    )
    tombstones_on_delete: bool = Field(True, description="Follow each delete event with a tombstone (null value).")
    skipped_operations: list[str] = Field(
        default_factory=lambda: ["t"], description="Operations not emitted: any of c, u, d, t; 'none' emits all."
    )
    heartbeat_interval_ms: int = Field(
        0, ge=0, description="Heartbeat records (with the current binlog position as offset) this often; 0: none."
    )
    heartbeat_action_query: str = Field("", description="SQL run at each heartbeat, e.g. an update of a heartbeat table.")
    topic_heartbeat_prefix: str = Field("__debezium-heartbeat", description="Heartbeat topic is <this>.<topic.prefix>.")
    decimal_handling_mode: str = Field("precise", description="DECIMAL as precise (Connect Decimal), double or string.")
    time_precision_mode: str = Field(
        "adaptive_time_microseconds",
        description="adaptive_time_microseconds (Debezium's io.debezium.time types, TIME in microseconds) or connect "
        "(Connect's Date, Time and Timestamp).",
    )
    bigint_unsigned_handling_mode: Literal["long", "precise"] = Field(
        "long",
        description="BIGINT UNSIGNED as INT64 (long; values above 2^63-1 wrap, as Java's long) or a Decimal of scale 0 "
        "(precise).",
    )
    binary_handling_mode: Literal["bytes", "base64", "base64-url-safe", "hex"] = Field(
        "bytes", description="BINARY, VARBINARY and BLOB as bytes, or as a string: base64, base64-url-safe or hex."
    )
    schema_name_adjustment_mode: str = Field(
        "none", description="none, avro or avro_unicode: how Key/Value/Envelope schema names are adjusted."
    )
    field_name_adjustment_mode: str = Field("none", description="Only none: column names are kept as they are.")
    max_batch_size: int = Field(2048, ge=1, description="Most change events returned by one poll.")
    poll_interval_ms: int = Field(500, ge=10, description="Longest wait for new changes in one poll.")

    @field_validator(
        "database_include_list", "database_exclude_list", "snapshot_include_collection_list",
        "snapshot_select_statement_overrides", mode="before",
    )  # fmt: skip
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return split_list(value)

    @field_validator("database_include_list", "database_exclude_list", "snapshot_include_collection_list")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        return check_regexes(value)

    @field_validator("database_ssl_mode", mode="before")
    @classmethod
    def _mariadb_ssl_mode(cls, value: Any) -> Any:
        """Debezium's MariaDB connector names the modes as MariaDB Connector/J does; each maps to
        the MySQL name of the same behaviour."""
        return _MARIADB_SSL_MODES.get(str(value).strip().lower(), value) if isinstance(value, str) else value

    @field_validator("database_hostname")
    @classmethod
    def _tcp_host(cls, value: str) -> str:
        # One host over TCP: never a Unix socket path (the server would take the worker's own user).
        if not HOST_PATTERN.fullmatch(value):
            raise ValueError("must be one host name or IP address (no socket path, no list)")
        return value

    @field_validator("snapshot_mode")
    @classmethod
    def _snapshot_mode(cls, value: str) -> str:
        mode = _SNAPSHOT_ALIASES.get(value, value)
        if mode not in _SNAPSHOT_MODES:
            raise ConfigError(
                f"Invalid configuration: snapshot.mode: unknown mode {value!r}; Debezium's modes are "
                f"{', '.join(_SNAPSHOT_MODES)}",
                key="snapshot.mode",
            )
        if mode not in _IMPLEMENTED_SNAPSHOT_MODES:
            # Raised as ConfigError so that a default names the dotted key too.
            raise ConfigError(
                f"Invalid configuration: snapshot.mode: {value!r} is not implemented yet; the implemented modes are "
                f"{', '.join(_IMPLEMENTED_SNAPSHOT_MODES)}",
                key="snapshot.mode",
            )
        return mode

    @field_validator("signal_data_collection")
    @classmethod
    def _signal_table(cls, value: str) -> str:
        if value and value.count(".") != 1:
            raise ValueError("must be <database>.<table>")
        return value

    @field_validator("schema_history_internal")
    @classmethod
    def _history_class(cls, value: str) -> str:
        if value not in (KAFKA_HISTORY, MEMORY_HISTORY):
            raise ValueError(f"must be {KAFKA_HISTORY} or {MEMORY_HISTORY}")
        return value

    @field_validator("schema_history_internal_kafka_topic", "schema_history_internal_kafka_bootstrap_servers")
    @classmethod
    def _history_kafka(cls, value: str, info: ValidationInfo) -> str:
        if not value and info.data.get("schema_history_internal", KAFKA_HISTORY) == KAFKA_HISTORY:
            # A default is validated under the attribute's name; the error names the dotted key.
            key = dotted(info.field_name or "")
            raise ConfigError(f"Invalid configuration: {key}: required (the schema history topic)", key=key)
        return value

    @field_validator("schema_history_internal_producer", "schema_history_internal_consumer")
    @classmethod
    def _history_clients(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        """Each setting must be one librdkafka knows (as ``signal.consumer.*``'s are checked)."""
        if not value:
            return value
        producer = info.field_name == "schema_history_internal_producer"
        prefix = "schema.history.internal.producer." if producer else "schema.history.internal.consumer."
        check_denied(value, prefix)  # before any client is built from them
        from confluent_kafka import Consumer, KafkaException, Producer  # the worker's client; loaded only when used

        try:
            servers = info.data.get("schema_history_internal_kafka_bootstrap_servers") or "localhost:9092"
            if producer:
                Producer({"bootstrap.servers": servers, **value})
            else:
                Consumer({"bootstrap.servers": servers, "group.id": "sluice-config-check", **value}).close()
        except (KafkaException, ValueError, TypeError) as exc:
            named = [setting for setting in value if f'"{setting}"' in str(exc)]
            key = prefix + (named or list(value))[0]
            raise ConfigError(f"Invalid configuration: {key}: {exc}", key=key) from None
        return value

    @field_validator("time_precision_mode")
    @classmethod
    def _binlog_time_mode(cls, value: str) -> str:
        if value not in ("adaptive_time_microseconds", "connect"):
            raise ValueError("must be adaptive_time_microseconds or connect (Debezium's MySQL modes)")
        return value

    @model_validator(mode="after")
    def _checks(self) -> BinlogCdcConfig:
        if not self.topic_prefix:
            raise ValueError("topic.prefix must not be empty")
        if self.database_ssl_ca and not self.database_ssl_mode.startswith("verify"):
            raise ValueError("database.ssl.ca is read only with database.ssl.mode=verify_ca or verify_identity")
        for table in self.snapshot_select_statement_overrides:
            if not self.snapshot_select_statements.get(table, "").strip():
                key = f"snapshot.select.statement.overrides.{table}"
                raise ConfigError(f"Invalid configuration: {key}: required (the table is in "
                                  "snapshot.select.statement.overrides)", key=key)  # fmt: skip
        return self

    @property
    def snapshot_overrides(self) -> dict[str, str]:
        """``database.table`` → the SELECT statement the snapshot reads it with."""
        return {t: self.snapshot_select_statements[t] for t in self.snapshot_select_statement_overrides}

    # -- helpers -----------------------------------------------------------------------------------

    @property
    def password(self) -> str | None:
        return self.database_password.get_secret_value() if self.database_password is not None else None

    @property
    def server_id(self) -> int:
        """``database.server.id``, or the stable default derived from ``topic.prefix``."""
        if self.database_server_id is not None:
            return self.database_server_id
        return 5400 + zlib.crc32(self.topic_prefix.encode()) % 1000

    @property
    def heartbeat_topic(self) -> str:
        return f"{self.topic_heartbeat_prefix}.{self.topic_prefix}"

    def secrets_in_clear(self) -> dict[str, str]:
        """``database.password`` in clear for the task config (the runtime masks task configs)."""
        return {"database.password": self.password} if self.password is not None else {}


_SNAPSHOT = "not implemented: snapshots read primary-key chunks, each in a consistent snapshot of its own"
_HISTORY = "not implemented: the history topic is read and written with fixed timeouts (30 s)"

#: Keys of Debezium's MySQL and MariaDB connectors accepted and not honoured, with the reason.
BINLOG_CDC_UNIMPLEMENTED_KEYS: dict[str, str] = {
    "database.server.name": "replaced by topic.prefix in Debezium 2.0; set topic.prefix",
    "database.initial.statements": "not implemented",
    "database.ssl.keystore*": "client certificates are not supported yet",
    "database.ssl.truststore*": "use database.ssl.ca (a PEM file) instead of a Java trust store",
    "database.jdbc.driver": "not applicable: the connector speaks the MySQL protocol itself",
    "database.protocol": "not applicable",
    "gtid.source.includes": "not implemented: every GTID source is read",
    "gtid.source.excludes": "not implemented: every GTID source is read",
    "gtid.source.filter.dml.events": "not implemented",
    "connect.keep.alive": "the stream asks the server for heartbeats every poll.interval.ms and reconnects itself",
    "connect.keep.alive.interval.ms": "the stream asks the server for heartbeats every poll.interval.ms",
    "binlog.buffer.size": "not implemented",
    "event.deserialization.failure.handling.mode": "not implemented: a row that cannot be decoded fails the task",
    "inconsistent.schema.handling.mode": "not implemented",
    "enable.time.adjuster": "not implemented: YEAR values are taken as the server stores them",
    "table.ignore.builtin": "the server's own databases (mysql, sys, information_schema, performance_schema) are never captured",
    "schema.history.internal.kafka.recovery.poll.interval.ms": _HISTORY,
    "schema.history.internal.kafka.recovery.attempts": _HISTORY,
    "schema.history.internal.kafka.query.timeout.ms": _HISTORY,
    "schema.history.internal.kafka.create.timeout.ms": _HISTORY,
    "schema.history.internal.ddl.filter": "not implemented: DDL of views, routines and grants is never recorded",
    "schema.history.internal.prefer.ddl": "not implemented: a restart applies the records' tableChanges",
    "schema.history.internal.file.filename": "only the Kafka and memory histories are implemented",
    "database.history*": "renamed schema.history.internal.* in Debezium 2.0",
    "snapshot.locking.mode.custom.name": "snapshot.locking.mode=custom is not implemented",
    "snapshot.isolation.mode": _SNAPSHOT,
    "snapshot.query.mode": _SNAPSHOT,
    "snapshot.new.tables": _SNAPSHOT,
    "min.row.count.to.stream.results": _SNAPSHOT,
    "incremental.snapshot.allow.schema.changes": _SNAPSHOT,
    "provide.transaction.metadata": "not implemented yet",
    "topic.naming.strategy": "topics are always <topic.prefix>.<database>.<table>",
    "topic.delimiter": "topics are always <topic.prefix>.<database>.<table>",
    "max.queue.size": "not applicable: changes go from the binlog stream to the producer in batches of max.batch.size",
    "max.queue.size.in.bytes": "not applicable: changes go from the binlog stream to the producer in batches",
    "skip.messages.without.change": "not implemented",
    "use.nongraceful.disconnect": "not applicable",
    **DEBEZIUM_UNIMPLEMENTED_KEYS,
}
for _key in ("snapshot.fetch.size", "snapshot.include.collection.list", "snapshot.max.threads", "read.only"):
    # Honoured here: snapshot.fetch.size is the rows per chunk; read.only is how the snapshot always works.
    BINLOG_CDC_UNIMPLEMENTED_KEYS.pop(_key)
BINLOG_CDC_UNIMPLEMENTED_KEYS["read.only"] = "always: the snapshot's watermarks are binlog positions it reads"
