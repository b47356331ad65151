"""The PostgreSQL CDC source connector (Debezium's ``io.debezium.connector.postgresql.PostgresConnector``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from sluice.connectors.api import (
    ConfigError,
    ConnectorTransactionBoundaries,
    Deferred,
    ExactlyOnceSupport,
    SourceConnector,
    SourceTask,
)
from sluice.connectors.cdc.offsets import server_offsets
from sluice.connectors.source.postgres_cdc.config import POSTGRES_CDC_UNIMPLEMENTED_KEYS, PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.values import parse_lsn

_OFFSET_INTS = ("lsn", "lsn_proc", "lsn_commit", "txId", "ts_usec")


class PostgresCdcSourceConnector(SourceConnector):
    """One replication slot is read by exactly one task, as in Debezium (``tasks.max`` above 1 still
    yields one task). The connector itself only validates and hands the configuration on."""

    Config = PostgresCdcConfig
    task_class = Deferred[SourceTask]("sluice.connectors.source.postgres_cdc.task:PostgresCdcTask")
    version = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = (
        "io.debezium.connector.postgresql.PostgresConnector",
        "PostgresCdcSource",
    )
    unimplemented_keys = POSTGRES_CDC_UNIMPLEMENTED_KEYS

    def __init__(self) -> None:
        self._config: PostgresCdcConfig | None = None

    @classmethod
    def validate_connectivity(cls, config: Any, timeout_s: float) -> dict[str, str]:
        """Connect as ``database.user`` to ``database.dbname``: an unreachable server is
        ``database.hostname``'s problem, refused credentials ``database.password``'s, an unknown
        user ``database.user``'s, an unknown database ``database.dbname``'s; a ``message.key.columns``
        entry naming a column a captured table lacks is that key's; then the pre-flight checks of
        :mod:`~sluice.connectors.source.postgres_cdc.preflight` (wal_level, replication rights,
        publication, slot, tables PostgreSQL cannot publish), each on its key."""
        from sluice.connectors.source.postgres_cdc.preflight import connectivity_problems  # psycopg: when asked

        return connectivity_problems(config, timeout_s)

    @classmethod
    def validate_on_create(cls, config: Any, timeout_s: float) -> dict[str, str]:
        """The same checks, as Debezium's ``validate`` runs them when Connect creates the connector;
        a slot another client is reading is left to the task (``slot.max.retries``)."""
        from sluice.connectors.source.postgres_cdc.preflight import connectivity_problems  # psycopg: when asked

        return connectivity_problems(config, timeout_s, transient=False)

    def exactly_once_support(self, config: Mapping[str, Any]) -> ExactlyOnceSupport:
        """Supported: a stored offset names an LSN the slot streams again from, in the same order
        (as Debezium's connector declares). Thread: the REST request thread that validates."""
        return ExactlyOnceSupport.SUPPORTED

    def can_define_transaction_boundaries(self, config: Mapping[str, Any]) -> ConnectorTransactionBoundaries:
        """Supported: the task can end a Kafka transaction where a database transaction commits.
        Thread: the REST request thread that validates."""
        return ConnectorTransactionBoundaries.SUPPORTED

    def start(self, config: Any) -> None:
        """Keep the validated configuration. Thread: the connector thread."""
        self._config = config if isinstance(config, PostgresCdcConfig) else PostgresCdcConfig.parse(config)

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        """A single task: a logical replication slot has one reader."""
        if self._config is None:
            raise ConfigError("task_configs() called before start()")
        return [self._config.to_task_config()]

    def alter_offsets(self, config: Mapping[str, Any], offsets: Mapping[Any, Any]) -> bool:
        """Accept ``{"server": <topic.prefix>}`` partitions with Debezium offsets, e.g.
        ``{"lsn": 24023128, "lsn_commit": 24023128}`` to start streaming after an LSN recorded by a
        backfill (``lsn`` may also be written as ``"0/16E8F58"``); ``null`` resets the connector."""
        for offset in server_offsets(config, offsets):
            if "lsn" not in offset:
                raise ConfigError("An offset needs at least 'lsn' (the position to stream after)")
            for key in _OFFSET_INTS:
                value = offset.get(key)
                if value is None:
                    continue
                if isinstance(value, str) and key.startswith("lsn"):
                    try:
                        parse_lsn(value)
                    except ValueError:
                        raise ConfigError(f"Offset key {key!r} is not an LSN: {value!r}") from None
                elif isinstance(value, bool) or not isinstance(value, int):
                    raise ConfigError(f"Offset key {key!r} must be an integer, got {value!r}")
        return True

