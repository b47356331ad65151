"""The binlog CDC source connectors: Debezium's ``io.debezium.connector.mysql.MySqlConnector`` and
``io.debezium.connector.mariadb.MariaDbConnector``.

Both run the same task (:mod:`.task`); they differ, as Debezium's do, only in what their events
say about their producer: ``source.connector`` (``mysql`` or ``mariadb``), the Source schema's name
and the metrics' ``plugin`` label. The connector tells its task which one it is through the task
config (:data:`~.config.FLAVOR_KEY`).
"""

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
from sluice.connectors.source.binlog_cdc.config import BINLOG_CDC_UNIMPLEMENTED_KEYS, FLAVOR_KEY, BinlogCdcConfig

_OFFSET_INTS = ("pos", "event", "row", "ts_sec", "server_id")


class _BinlogConnector(SourceConnector):
    """One binlog is read by exactly one task, as in Debezium (``tasks.max`` above 1 still yields
    one task). The connector itself only validates and hands the configuration on."""

    Config = BinlogCdcConfig
    task_class = Deferred[SourceTask]("sluice.connectors.source.binlog_cdc.task:BinlogCdcTask")
    version = "0.1.0"
    unimplemented_keys = BINLOG_CDC_UNIMPLEMENTED_KEYS
    #: Debezium's name of the connector: ``source.connector`` and the Source schema's name.
    flavor: ClassVar[str]

    def __init__(self) -> None:
        self._config: BinlogCdcConfig | None = None

    @classmethod
    def validate_connectivity(cls, config: Any, timeout_s: float) -> dict[str, str]:
        """Connect as ``database.user``: an unreachable server is ``database.hostname``'s problem,
        refused credentials ``database.password``'s; then the pre-flight checks of
        :mod:`~sluice.connectors.source.binlog_cdc.preflight` (binlog on, ROW format, FULL row
        images, the replication grants), each on its key."""
        from sluice.connectors.source.binlog_cdc.preflight import connectivity_problems  # the driver: when asked

        return connectivity_problems(config, timeout_s)

    @classmethod
    def validate_on_create(cls, config: Any, timeout_s: float) -> dict[str, str]:
        """The same checks, as Debezium's ``validate`` runs them when Connect creates the connector."""
        return cls.validate_connectivity(config, timeout_s)

    def exactly_once_support(self, config: Mapping[str, Any]) -> ExactlyOnceSupport:
        """Supported: a stored offset names a binlog position (or GTID set) the server replays from,
        in the same order. Thread: the REST request thread that validates."""
        return ExactlyOnceSupport.SUPPORTED

    def can_define_transaction_boundaries(self, config: Mapping[str, Any]) -> ConnectorTransactionBoundaries:
        """Supported: the task can end a Kafka transaction where a database transaction commits.
        Thread: the REST request thread that validates."""
        return ConnectorTransactionBoundaries.SUPPORTED

    def start(self, config: Any) -> None:
        """Keep the validated configuration. Thread: the connector thread."""
        self._config = config if isinstance(config, BinlogCdcConfig) else BinlogCdcConfig.parse(config)

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        """A single task: a binlog has one reader per connector."""
        if self._config is None:
            raise ConfigError("task_configs() called before start()")
        return [{**self._config.to_task_config(), FLAVOR_KEY: self.flavor}]

    def alter_offsets(self, config: Mapping[str, Any], offsets: Mapping[Any, Any]) -> bool:
        """Accept ``{"server": <topic.prefix>}`` partitions with Debezium offsets, e.g.
        ``{"file": "mariadb-bin.000003", "pos": 5144831}`` to stream from a binlog position recorded
        elsewhere (``event``, ``row``, ``gtids``, ``ts_sec``, ``server_id`` optional); ``null``
        resets the connector."""
        for offset in server_offsets(config, offsets):
            if not isinstance(offset.get("file"), str) or not offset["file"] or "pos" not in offset:
                raise ConfigError("An offset needs 'file' (a binlog file name) and 'pos' (a position in it)")
            for key in _OFFSET_INTS:
                value = offset.get(key)
                if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                    raise ConfigError(f"Offset key {key!r} must be a non-negative integer, got {value!r}")
            if offset.get("gtids") is not None and not isinstance(offset["gtids"], str):
                raise ConfigError(f"Offset key 'gtids' must be a string, got {offset['gtids']!r}")
        return True


class MySqlCdcSourceConnector(_BinlogConnector):
    """Debezium's MySQL connector: the binlog of a MySQL (or MariaDB) server."""

    flavor = "mysql"
    aliases: ClassVar[tuple[str, ...]] = ("io.debezium.connector.mysql.MySqlConnector", "MySqlCdcSource")


class MariaDbCdcSourceConnector(_BinlogConnector):
    """Debezium's MariaDB connector: the binlog of a MariaDB server."""

    flavor = "mariadb"
    aliases: ClassVar[tuple[str, ...]] = ("io.debezium.connector.mariadb.MariaDbConnector", "MariaDbCdcSource")

