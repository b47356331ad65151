"""Configuration of the binlog CDC source: Debezium's MySQL and MariaDB connector keys.

Keys, defaults and meanings are Debezium's (``io.debezium.connector.binlog.BinlogConnectorConfig``),
with these differences in this first increment:

* ``snapshot.mode`` accepts only ``no_data`` (and its old names ``never`` and ``schema_only``):
  the connector streams what is committed after it starts; any other mode is refused, naming the
  key, until snapshots come;
* tables are described from ``information_schema`` when the stream first meets them (and again
  when a table map shows other columns): there is no schema history topic yet, so
  ``include.schema.changes`` emits nothing and ``schema.history.internal.*`` is not read;
* TLS: ``database.ssl.mode`` as Debezium's, with the CA as a PEM file in Sluice's
  ``database.ssl.ca`` (under ``connector.allowed.paths``) instead of a Java trust store.

The connection follows the least-privilege rules of the JDBC connectors: TCP to one host (no Unix
socket), no option files, ``LOCAL INFILE`` always off (:mod:`.connection`).
"""

from __future__ import annotations

import zlib
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from sluice.connectors.api import ConfigError, LocalPath, split_list
from sluice.connectors.cdc.config import DEBEZIUM_UNIMPLEMENTED_KEYS, CdcSourceConfig, check_regexes
from sluice.connectors.jdbc_common.urls import HOST_PATTERN

#: The task-config key through which the connector tells its task which of Debezium's connectors it
#: is (``mysql`` or ``mariadb``: the ``source.connector`` value and the Source schema's name).
FLAVOR_KEY = "sluice.binlog.connector"
FLAVORS = ("mysql", "mariadb")

#: Debezium's snapshot modes and what this increment says about them.
_SNAPSHOT_ALIASES = {"never": "no_data", "schema_only": "no_data"}
_SNAPSHOT_MODES = ("initial", "initial_only", "when_needed", "no_data", "recovery", "schema_only_recovery",
                   "always", "configuration_based", "custom")  # fmt: skip


class BinlogCdcConfig(CdcSourceConfig):
    """Debezium ``MySqlConnector`` / ``MariaDbConnector`` keys (see the module docstring)."""

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
        "verify_identity (verify_ca, and the host name).",
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
        description="This increment streams only: no_data (also named never, schema_only) streams what is committed "
        "after the connector starts. Debezium's other modes are refused until snapshots are implemented.",
    )
    snapshot_locking_mode: Literal["minimal", "extended", "none", "custom"] = Field(
        "minimal", description="How a snapshot locks tables; no effect until snapshots are implemented."
    )
    include_schema_changes: bool = Field(
        True,
        description="Schema change events on <topic.prefix>; none are emitted yet (DDL is tracked with the schema "
        "history, which comes next).",
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

    @field_validator("database_include_list", "database_exclude_list", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return split_list(value)

    @field_validator("database_include_list", "database_exclude_list")
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        return check_regexes(value)

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
        if mode != "no_data":
            # Raised as ConfigError so that the default ("initial") names the dotted key too.
            raise ConfigError(
                f"Invalid configuration: snapshot.mode: {value!r} is not implemented yet: this connector streams "
                "only what is committed after it starts; set snapshot.mode=no_data",
                key="snapshot.mode",
            )
        return mode

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
        return self

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


_SNAPSHOT = "not applicable until snapshots are implemented (snapshot.mode=no_data only)"
_HISTORY = (
    "no schema history topic yet: tables are described from information_schema when the stream first meets them"
)

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
    "include.query": "not implemented yet: source.query is always null",
    "connect.keep.alive": "the stream asks the server for heartbeats every poll.interval.ms and reconnects itself",
    "connect.keep.alive.interval.ms": "the stream asks the server for heartbeats every poll.interval.ms",
    "binlog.buffer.size": "not implemented",
    "event.deserialization.failure.handling.mode": "not implemented: a row that cannot be decoded fails the task",
    "inconsistent.schema.handling.mode": "not implemented",
    "enable.time.adjuster": "not implemented: YEAR values are taken as the server stores them",
    "table.ignore.builtin": "the server's own databases (mysql, sys, information_schema, performance_schema) are never captured",
    "schema.history.internal*": _HISTORY,
    "database.history*": _HISTORY,
    "snapshot.locking.mode.custom.name": _SNAPSHOT,
    "snapshot.isolation.mode": _SNAPSHOT,
    "snapshot.query.mode": _SNAPSHOT,
    "snapshot.select.statement.overrides*": _SNAPSHOT,
    "snapshot.new.tables": _SNAPSHOT,
    "min.row.count.to.stream.results": _SNAPSHOT,
    "incremental.snapshot.chunk.size": _SNAPSHOT,
    "incremental.snapshot.allow.schema.changes": _SNAPSHOT,
    "signal.*": "signals come with incremental snapshots",
    "notification.*": "notifications come with snapshots",
    "provide.transaction.metadata": "not implemented yet",
    "topic.naming.strategy": "topics are always <topic.prefix>.<database>.<table>",
    "topic.delimiter": "topics are always <topic.prefix>.<database>.<table>",
    "max.queue.size": "not applicable: changes go from the binlog stream to the producer in batches of max.batch.size",
    "max.queue.size.in.bytes": "not applicable: changes go from the binlog stream to the producer in batches",
    "skip.messages.without.change": "not implemented",
    "use.nongraceful.disconnect": "not applicable",
    **DEBEZIUM_UNIMPLEMENTED_KEYS,
}
