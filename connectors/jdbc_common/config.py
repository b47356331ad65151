"""Configuration pieces the JDBC source and sink share: connection keys and list parsing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field, SecretStr, field_validator

from sluice.connectors.api import ConfigError, PluginConfig
from sluice.connectors.jdbc_common.types import timezone
from sluice.connectors.jdbc_common.urls import parse_connection_url


class JdbcConnectionConfig(PluginConfig):
    """``connection.*`` keys, as Confluent's JDBC connectors spell them."""

    connection_url: str = Field(
        description="The database: a SQLAlchemy URL (postgresql://…, mysql://…, sqlite:///path) or a JDBC URL "
        "(jdbc:postgresql://host:5432/db, jdbc:mysql://…, jdbc:sqlite:/path). Only allow-listed parameters "
        "are accepted; a SQLite file and files named by parameters (sslrootcert=, ssl_ca=, …) must lie under "
        "the worker's connector.allowed.paths."
    )
    connection_user: str | None = Field(None, description="The user name; overrides one in the URL.")
    connection_password: SecretStr | None = Field(None, description="The password; overrides one in the URL.")
    connection_attempts: int = Field(3, ge=1, description="Attempts to connect before giving up.")
    connection_backoff_ms: int = Field(10_000, ge=0, description="Wait between connection attempts, in ms.")
    dialect_name: str = Field(
        "", description="Accepted for Confluent compatibility; the dialect always follows the connection URL."
    )
    db_timezone: str = Field("UTC", description="Time zone of timestamp columns without one (and of queries on them).")

    @field_validator("connection_url")
    @classmethod
    def _url_not_empty(cls, value: str) -> str:
        if not value:
            raise ValueError("must not be empty")
        return value

    @field_validator("db_timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            timezone(value)
        except Exception:  # noqa: BLE001 - whatever the time-zone lookup raises means unknown
            raise ValueError(f"unknown time zone {value!r}") from None
        return value

    @property
    def password(self) -> str | None:
        return self.connection_password.get_secret_value() if self.connection_password is not None else None

    def local_paths(self) -> dict[str, str | tuple[str, ...]]:
        """The files ``connection.url`` names — a SQLite database, ``sslrootcert=``, ``ssl_ca=``, … —
        under ``connection.url``, for the worker to confine to ``connector.allowed.paths``."""
        found = super().local_paths()
        files = parse_connection_url(self.connection_url).files()
        if files:
            found["connection.url"] = files
        return found

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, ignore: frozenset[str] | set[str] = frozenset()) -> Any:
        """Validate like :meth:`PluginConfig.parse`; errors name the dotted key even for checked defaults."""
        try:
            return super().parse(raw, ignore=ignore)
        except ConfigError as exc:
            info = cls.model_fields.get(exc.key or "")
            if info is None or exc.key is None:
                raise
            dotted_key = info.alias or exc.key
            raise ConfigError(str(exc).replace(f"{exc.key}:", f"{dotted_key}:"), key=dotted_key) from None

    @classmethod
    def known_keys(cls) -> set[str]:
        return {info.alias or name for name, info in cls.model_fields.items()} | set(cls.model_fields)

    @classmethod
    def from_task_config(cls, raw: Mapping[str, Any]) -> Any:
        """Parse a task configuration, ignoring the keys the runtime adds (``name``, ``task.class``, …)."""
        return cls.parse(raw, ignore=set(raw) - cls.known_keys())

    def to_task_config(self) -> dict[str, Any]:
        """The task configuration in Connect's dotted spelling, the password in clear (the runtime
        masks task configurations itself)."""
        data = self.model_dump(by_alias=True, exclude_none=True, mode="json")
        for key, value in list(data.items()):
            if isinstance(value, list):
                data[key] = ",".join(str(v) for v in value)
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if isinstance(value, SecretStr):
                data[info.alias or name] = value.get_secret_value()
        return data


#: Keys of Confluent's JDBC connectors (both) that Sluice accepts and does not honour, with the reason.
JDBC_UNIMPLEMENTED_KEYS: dict[str, str] = {
    "jdbc.credentials.provider.class": "credentials come from connection.user/connection.password or a config provider (${env:…}, ${file:…})",
    "quote.sql.identifiers": "identifiers are always quoted (Confluent's default)",
    "connection.provider.class": "Sluice opens connections through SQLAlchemy; there is no JDBC provider",
}

JDBC_SOURCE_UNIMPLEMENTED_KEYS: dict[str, str] = {
    **JDBC_UNIMPLEMENTED_KEYS,
    "incrementing.column.mapping": "per-table column mappings are not implemented; set incrementing.column.name",
    "timestamp.columns.mapping": "per-table column mappings are not implemented; set timestamp.column.name",
    "timestamp.granularity": "timestamps are always Connect logical Timestamps (connect_logical)",
    "numeric.precision.mapping": "deprecated by Confluent; use numeric.mapping",
    "query.masked": "not implemented; set query (its text is not a secret Sluice masks)",
    "query.retry.attempts": "not implemented",
    "transaction.isolation.mode": "not implemented; queries run at the database's default isolation level",
    "date.calendar.system": "not implemented; dates are proleptic Gregorian",
    "max.buffer.size": "not implemented; batch.max.rows bounds a poll",
    "poll.linger.ms": "not implemented; batch.max.rows bounds a poll",
}

JDBC_SINK_UNIMPLEMENTED_KEYS: dict[str, str] = {
    **JDBC_UNIMPLEMENTED_KEYS,
    "table.types": "only tables are written (TABLE); writing to views is not implemented",
    "date.timezone": "not implemented; db.timezone applies",
    "timestamp.precision.mode": "not implemented",
    "timestamp.fields.list": "not implemented (only read with timestamp.precision.mode=nanoseconds)",
    "replace.null.with.default": "not implemented",
    "string.output.value.column.name": "not implemented",
    "mssql.use.merge.holdlock": "SQL Server is not a supported database",
    "trim.sensitive.log": "not implemented",
}
