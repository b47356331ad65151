"""Configuration of the PostgreSQL CDC source: Debezium's PostgreSQL connector keys.

Existing Debezium configurations port over: the keys, their defaults and their meaning are
Debezium's, except ``heartbeat.interval.ms``, which is on (10 s) by default so an idle database
never retains WAL. Sluice adds ``streaming.start.lsn`` (start streaming at an LSN recorded
elsewhere, e.g. by a Spark backfill), ``snapshot.chunk.size`` (rows per resumable chunk of the
initial snapshot), ``native.encoding`` (serialize row changes natively, on by default) and the
slot guard's ``slot.max.retained.wal.bytes``, ``slot.retained.wal.warn.ratio`` and
``slot.retained.wal.action`` (see :mod:`sluice.connectors.source.postgres_cdc.slot_guard`).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator

from sluice.connectors.api import LocalPath, split_list
from sluice.connectors.cdc.config import DEBEZIUM_UNIMPLEMENTED_KEYS, SignalingCdcConfig, check_regexes
from sluice.connectors.jdbc_common.urls import HOST_PATTERN as _HOST
from sluice.connectors.jdbc_common.urls import NO_FILE
from sluice.connectors.source.postgres_cdc.values import parse_lsn

#: Debezium's post processor that reselects unavailable (TOASTed) and null column values.
RESELECTOR_CLASS = "io.debezium.processors.reselect.ReselectColumnsPostProcessor"


class SlotWalAction(enum.StrEnum):
    """What happens when a slot reaches ``slot.max.retained.wal.bytes``."""

    WARN = "warn"
    DEGRADE = "degrade"
    FAIL = "fail"


class SnapshotMode(enum.StrEnum):
    INITIAL = "initial"
    NO_DATA = "no_data"
    WHEN_NEEDED = "when_needed"
    INITIAL_ONLY = "initial_only"


class PublicationMode(enum.StrEnum):
    ALL_TABLES = "all_tables"
    FILTERED = "filtered"
    DISABLED = "disabled"


_SNAPSHOT_ALIASES = {"never": "no_data", "schema_only": "no_data"}


class PostgresCdcConfig(SignalingCdcConfig):
    """Debezium ``PostgresConnector`` keys (plus Sluice's additions, see the module docstring); the
    checks of the keys every CDC source shares come from :class:`CdcSourceConfig`."""

    prefixed_keys: ClassVar[Mapping[str, str]] = {"signal.consumer.": "signal_consumer"}

    database_hostname: str = Field("localhost", description="Host name of the PostgreSQL server.")
    database_port: int = Field(5432, ge=1, le=65535, description="Port of the PostgreSQL server.")
    database_user: str = Field(
        "postgres", description="User with the REPLICATION attribute (and SELECT on the tables)."
    )
    database_password: SecretStr | None = Field(None, description="Password of database.user.")
    database_dbname: str = Field(description="The database to capture.")
    database_sslmode: Literal["disable", "allow", "prefer", "require", "verify-ca", "verify-full"] = Field(
        "prefer",
        description="libpq sslmode: disable, allow, prefer, require, verify-ca, verify-full (the verify modes "
        "need database.sslrootcert).",
    )
    # Not typed LocalPath: "system" is no path. local_paths() reports a file for confinement.
    database_sslrootcert: str | None = Field(
        None,
        description="The CA certificate(s) the server's certificate must chain to (PEM), under the worker's "
        "connector.allowed.paths, or 'system' for the operating system's store. The worker's "
        "~/.postgresql/root.crt is never read.",
    )
    database_sslcert: LocalPath | None = Field(
        None, description="A client certificate (PEM) under connector.allowed.paths; none is sent otherwise."
    )
    database_sslkey: LocalPath | None = Field(
        None, description="The client certificate's key (unencrypted PEM) under connector.allowed.paths."
    )
    database_connect_timeout_ms: int = Field(30_000, ge=1000, description="Connection timeout.")
    topic_prefix: str = Field(
        description="Prefix of every topic (<prefix>.<schema>.<table>) and the offsets' partition."
    )
    plugin_name: str = Field(
        "pgoutput", description="Logical decoding plugin; only pgoutput (built into PostgreSQL 10+)."
    )
    slot_name: str = Field("debezium", description="Replication slot to create or reuse.")
    slot_drop_on_stop: bool = Field(False, description="Drop the slot when the task stops (development only).")
    slot_failover: bool = Field(
        False,
        description="Create the slot as a failover slot (PostgreSQL 17+), which a standby with "
        "sync_replication_slots=on keeps in step, so capture resumes after a failover.",
    )
    publication_name: str = Field("dbz_publication", description="Publication pgoutput streams from.")
    publication_autocreate_mode: PublicationMode = Field(
        PublicationMode.ALL_TABLES,
        description="all_tables (CREATE PUBLICATION … FOR ALL TABLES), filtered (FOR TABLE the captured tables, "
        "kept in step with the filters) or disabled (the publication must exist).",
    )
    snapshot_mode: SnapshotMode = Field(
        SnapshotMode.INITIAL,
        description="initial (snapshot when no offset exists, then stream), no_data (stream only), when_needed "
        "(snapshot also when the stored position is no longer available), initial_only (snapshot, no streaming).",
    )
    snapshot_chunk_size: int = Field(10_000, ge=1, description="Rows per resumable chunk of the initial snapshot.")
    schema_include_list: list[str] = Field(default_factory=list, description="Regexes of schemas to capture.")
    schema_exclude_list: list[str] = Field(default_factory=list, description="Regexes of schemas to leave out.")
    table_include_list: list[str] = Field(default_factory=list, description="Regexes of <schema>.<table> to capture.")
    table_exclude_list: list[str] = Field(default_factory=list, description="Regexes of <schema>.<table> to leave out.")
    column_include_list: list[str] = Field(
        default_factory=list, description="Regexes of <schema>.<table>.<column> to keep."
    )
    column_exclude_list: list[str] = Field(
        default_factory=list, description="Regexes of <schema>.<table>.<column> to drop."
    )
    tombstones_on_delete: bool = Field(True, description="Follow each delete event with a tombstone (null value).")
    skipped_operations: list[str] = Field(
        default_factory=lambda: ["t"], description="Operations not emitted: any of c, u, d, t; 'none' emits all."
    )
    heartbeat_interval_ms: int = Field(
        10_000, ge=0, description="Heartbeat records (and slot position updates) this often; 0 disables them."
    )
    heartbeat_action_query: str = Field(
        "", description="SQL run at each heartbeat, e.g. an INSERT into a heartbeat table."
    )
    topic_heartbeat_prefix: str = Field("__debezium-heartbeat", description="Heartbeat topic is <this>.<topic.prefix>.")
    decimal_handling_mode: str = Field("precise", description="numeric as precise (Connect Decimal), double or string.")
    time_precision_mode: str = Field(
        "adaptive", description="adaptive, adaptive_time_microseconds or connect (Connect's Date/Time/Timestamp)."
    )
    binary_handling_mode: Literal["bytes", "base64", "base64-url-safe", "hex"] = Field(
        "bytes", description="bytea as bytes, or as a string: base64, base64-url-safe or hex (lower case)."
    )
    interval_handling_mode: Literal["numeric", "string"] = Field(
        "numeric",
        description="interval as microseconds (io.debezium.time.MicroDuration) or an ISO 8601 string "
        "(io.debezium.time.Interval, P<y>Y<m>M<d>DT<h>H<m>M<s>S).",
    )
    schema_name_adjustment_mode: str = Field(
        "none",
        description="none, avro (characters Avro refuses in the Key/Value/Envelope schema names become _) or "
        "avro_unicode (they become _uXXXX); topic names are not changed.",
    )
    field_name_adjustment_mode: str = Field(
        "none",
        description="Only none: column names are kept as they are (the AvroConverter's scrub.invalid.names "
        "adjusts them in Avro schemas).",
    )
    max_batch_size: int = Field(2048, ge=1, description="Most change events returned by one poll.")
    poll_interval_ms: int = Field(500, ge=0, description="Longest wait for new changes in one poll.")
    status_update_interval_ms: int = Field(10_000, ge=100, description="Standby status (position) updates this often.")
    native_encoding: bool = Field(
        True,
        description="Serialize row changes with the native encoder when the converters are JsonConverters with "
        "base64 decimals (the same bytes, several times cheaper); false always takes the Python path.",
    )
    signal_data_collection: str = Field("", description="Signal table <schema>.<table> (columns id, type, data).")
    provide_transaction_metadata: bool = Field(
        False, description="Emit BEGIN/END events to <prefix>.transaction and a transaction block in each event."
    )
    hstore_handling_mode: Literal["json", "map"] = Field(
        "json",
        description="hstore as a JSON object string (io.debezium.data.Json) or a map of string to optional string.",
    )
    include_unknown_datatypes: bool = Field(
        False,
        description="Columns of types without a mapping (pg_lsn, multiranges, composite types, …): false leaves them "
        "out of the events, true captures their text as bytes (per binary.handling.mode).",
    )
    message_key_columns: str = Field(
        "",
        description="Custom event keys: <schema>.<table>:<column>[,<column>…] entries separated by ';' (table and "
        "column are regexes, case-insensitive); other tables keep their primary key.",
    )
    slot_max_retries: int = Field(
        6, ge=0, description="Retries when the replication slot is active for another connection, then the task fails."
    )
    slot_retry_delay_ms: int = Field(
        10_000, ge=0, description="Wait between those retries (a slot held by another connection)."
    )
    slot_max_retained_wal_bytes: int = Field(
        0,
        ge=0,
        description="Sluice: most WAL the slot may make the server keep (from its restart_lsn), in bytes; at it the "
        "task acts per slot.retained.wal.action. 0 turns the guard off.",
    )
    slot_retained_wal_warn_ratio: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Sluice: share of slot.max.retained.wal.bytes past which the log warns, naming the slot and the bytes.",
    )
    slot_retained_wal_action: SlotWalAction = Field(
        SlotWalAction.DEGRADE,
        description="Sluice: at slot.max.retained.wal.bytes, warn (log only), degrade (the task's status shows it "
        "degraded while it streams on; cleared back under the bound) or fail (fail the task, with what to do).",
    )
    unavailable_value_placeholder: str = Field(
        "__debezium_unavailable_value",
        description="What an unchanged TOASTed value becomes; 'hex:<digits>' gives the bytes in hex.",
    )
    money_fraction_digits: int = Field(
        2, ge=0, le=38, description="Scale of money columns under decimal.handling.mode=precise."
    )
    streaming_start_lsn: str = Field(
        "",
        description="Sluice: with no stored offset, stream only changes committed after this LSN (e.g. 0/16B6C50, "
        "recorded by a backfill). The slot must already exist at or before it.",
    )
    message_prefix_include_list: list[str] = Field(
        default_factory=list, description="Regexes of logical decoding message prefixes emitted as events (op m)."
    )
    message_prefix_exclude_list: list[str] = Field(
        default_factory=list, description="Regexes of logical decoding message prefixes not emitted as events."
    )
    post_processors: list[str] = Field(
        default_factory=list, description="Post processors by name; 'reselector' (the reselector.* keys) is available."
    )
    reselector_type: str = Field("", validate_default=True, description=f"The reselector's class: {RESELECTOR_CLASS}.")
    reselector_reselect_columns_include_list: list[str] = Field(
        default_factory=list, description="Regexes of <schema>.<table>.<column> the reselector fills (default: all)."
    )
    reselector_reselect_columns_exclude_list: list[str] = Field(
        default_factory=list, description="Regexes of <schema>.<table>.<column> the reselector leaves alone."
    )
    reselector_reselect_unavailable_values: bool = Field(
        True, description="Reselect columns holding the unavailable-value placeholder (unchanged TOASTed values)."
    )
    reselector_reselect_null_values: bool = Field(True, description="Reselect columns that are null in the event.")
    reselector_reselect_use_event_key: bool = Field(
        False, description="Find the row by the event key (message.key.columns) instead of the primary key."
    )

    @field_validator(
        "schema_include_list",
        "schema_exclude_list",
        "message_prefix_include_list",
        "message_prefix_exclude_list",
        "reselector_reselect_columns_include_list",
        "reselector_reselect_columns_exclude_list",
        mode="before",
    )
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return split_list(value)

    @field_validator("schema_include_list", "schema_exclude_list", "message_prefix_include_list",
                     "message_prefix_exclude_list", "reselector_reselect_columns_include_list",
                     "reselector_reselect_columns_exclude_list")  # fmt: skip
    @classmethod
    def _regexes(cls, value: list[str]) -> list[str]:
        return check_regexes(value)

    @field_validator("snapshot_mode", mode="before")
    @classmethod
    def _snapshot_alias(cls, value: Any) -> Any:
        return _SNAPSHOT_ALIASES.get(value, value) if isinstance(value, str) else value

    @field_validator("plugin_name")
    @classmethod
    def _pgoutput(cls, value: str) -> str:
        if value != "pgoutput":
            raise ValueError("only pgoutput is supported (built into PostgreSQL 10+; decoderbufs needs an extension)")
        return value

    @field_validator("signal_data_collection")
    @classmethod
    def _signal_table(cls, value: str) -> str:
        if value and value.count(".") != 1:
            raise ValueError("must be <schema>.<table>")
        return value

    @field_validator("streaming_start_lsn")
    @classmethod
    def _lsn(cls, value: str) -> str:
        if value:
            try:
                parse_lsn(value)
            except ValueError:
                raise ValueError("must be an LSN such as 0/16B6C50 or an integer") from None
        return value

    @field_validator("unavailable_value_placeholder")
    @classmethod
    def _placeholder(cls, value: str) -> str:
        if value.startswith("hex:"):
            try:
                bytes.fromhex(value[4:])
            except ValueError:
                raise ValueError("hex: must be followed by an even number of hex digits") from None
        return value

    @field_validator("post_processors")
    @classmethod
    def _post_processors(cls, value: list[str]) -> list[str]:
        if any(name != "reselector" for name in value):
            raise ValueError("the one post processor available is named 'reselector' (configured by reselector.*)")
        return value

    @field_validator("reselector_type")
    @classmethod
    def _reselector_type(cls, value: str, info: ValidationInfo) -> str:
        if "reselector" in info.data.get("post_processors", ()) and value != RESELECTOR_CLASS:
            raise ValueError(f"reselector.type must be {RESELECTOR_CLASS} when post.processors names the reselector")
        return value

    @field_validator("database_hostname")
    @classmethod
    def _tcp_host(cls, value: str) -> str:
        # libpq takes a leading "/" as a Unix socket directory (peer authentication as the worker's
        # user) and a comma as a list of hosts: one host name or address, over TCP.
        if not _HOST.fullmatch(value):
            raise ValueError("must be one host name or IP address (no Unix socket directory, no list)")
        return value

    @field_validator("database_dbname")
    @classmethod
    def _plain_dbname(cls, value: str) -> str:
        if "=" in value or "\0" in value or "://" in value:
            raise ValueError("must be a database name, not a connection string")
        return value

    @field_validator("database_sslrootcert")
    @classmethod
    def _rootcert(cls, value: str | None) -> str | None:
        return value or None

    @model_validator(mode="after")
    def _verify_needs_rootcert(self) -> PostgresCdcConfig:
        if self.database_sslmode.startswith("verify") and not self.database_sslrootcert:
            raise ValueError(
                f"database.sslmode={self.database_sslmode} needs database.sslrootcert (a file under the "
                "allowed paths, or 'system'): the worker's ~/.postgresql/root.crt is not read"
            )
        return self

    def local_paths(self) -> dict[str, str | tuple[str, ...]]:
        """The SSL files, ``database.sslrootcert`` too unless it is ``system`` (the operating system's store)."""
        found = super().local_paths()
        if self.database_sslrootcert and self.database_sslrootcert != "system":
            found["database.sslrootcert"] = self.database_sslrootcert
        return found

    @model_validator(mode="after")
    def _topic_prefix_not_empty(self) -> PostgresCdcConfig:
        if not self.topic_prefix:
            raise ValueError("topic.prefix must not be empty")
        return self

    # -- helpers ---------------------------------------------------------------------------------

    @property
    def password(self) -> str | None:
        return self.database_password.get_secret_value() if self.database_password is not None else None

    def conninfo(self, *, replication: bool = False) -> dict[str, Any]:
        """psycopg connection keywords; the session runs in UTC with ISO dates, which the type
        conversions rely on (timestamptz text is printed in the session's time zone)."""
        info: dict[str, Any] = {
            "host": self.database_hostname,
            "port": self.database_port,
            "user": self.database_user,
            "dbname": self.database_dbname,
            "sslmode": self.database_sslmode,
            "sslrootcert": self.database_sslrootcert or NO_FILE,
            "sslcert": self.database_sslcert or NO_FILE,
            "sslkey": self.database_sslkey or NO_FILE,
            # Neither ~/.pgpass nor ~/.postgresql/* nor the files PGPASSFILE/PGSSLKEY/… name: the
            # worker's own credentials must not follow database.hostname to a server the caller chose.
            "passfile": NO_FILE,
            "sslcrl": NO_FILE,
            "connect_timeout": max(1, self.database_connect_timeout_ms // 1000),
            "application_name": "sluice-postgres-cdc",
            "options": "-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=postgres -c extra_float_digits=3 "
            "-c bytea_output=hex",
        }
        if self.password is not None:
            info["password"] = self.password
        if replication:
            info["replication"] = "database"
        return info

    @property
    def placeholder_bytes(self) -> bytes:
        """``unavailable.value.placeholder`` as bytes (``hex:`` followed by hex digits, or the text)."""
        text = self.unavailable_value_placeholder
        return bytes.fromhex(text[4:]) if text.startswith("hex:") else text.encode()

    @property
    def heartbeat_topic(self) -> str:
        return f"{self.topic_heartbeat_prefix}.{self.topic_prefix}"

    def secrets_in_clear(self) -> dict[str, str]:
        """``database.password`` in clear for the task config (the runtime masks task configs)."""
        return {"database.password": self.password} if self.password is not None else {}


_SNAPSHOT = "the snapshot reads primary-key chunks between WAL watermarks while streaming, not in one transaction"

#: Keys of Debezium's PostgreSQL connector that Sluice accepts and does not honour, with the reason.
POSTGRES_CDC_UNIMPLEMENTED_KEYS: dict[str, str] = {
    "database.server.name": "replaced by topic.prefix in Debezium 2.0; set topic.prefix",
    "database.initial.statements": "not implemented",
    "slot.stream.params": "not implemented",
    "lsn.flush.mode": "the slot's LSN is always flushed by the connector after Kafka acknowledged (connector)",
    "flush.lsn.source": "the slot's LSN is always flushed by the connector after Kafka acknowledged",
    "offset.mismatch.strategy": "not implemented",
    "publish.via.partition.root": "not implemented",
    "snapshot.isolation.mode": f"not applicable: {_SNAPSHOT}",
    "snapshot.locking.mode": f"not applicable: {_SNAPSHOT}, and takes no table locks (as Debezium's default, none)",
    "snapshot.query.mode": f"not implemented; {_SNAPSHOT}",
    "snapshot.select.statement.overrides*": f"not implemented; {_SNAPSHOT}",
    "replica.identity.autoset.values": "not implemented; the connector warns about tables without a primary key",
    "schema.refresh.mode": "schemas are refreshed from relation messages (columns_diff)",
    "topic.naming.strategy": "topics are always <topic.prefix>.<schema>.<table>",
    "topic.delimiter": "topics are always <topic.prefix>.<schema>.<table>",
    "max.queue.size": "not applicable: changes go straight from the WAL stream to the producer in batches of max.batch.size",
    "max.queue.size.in.bytes": "not applicable: changes go straight from the WAL stream to the producer in batches",
    "include.schema.changes": "PostgreSQL's logical decoding carries no DDL; there are no schema change events",
    **DEBEZIUM_UNIMPLEMENTED_KEYS,
}
