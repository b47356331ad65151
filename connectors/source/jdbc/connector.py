"""The JDBC source connector (Confluent's ``io.confluent.connect.jdbc.JdbcSourceConnector``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, ClassVar

from sluice.connectors.api import (
    ConfigError,
    ConnectError,
    Deferred,
    ExactlyOnceSupport,
    SourceConnector,
    SourceTask,
    offset_pairs,
)
from sluice.connectors.jdbc_common.config import JDBC_SOURCE_UNIMPLEMENTED_KEYS
from sluice.connectors.jdbc_common.connection import (
    connect_with_retries,
    connectivity_problems,
    create_engine,
    safe_url,
    to_sqlalchemy_url,
)
from sluice.connectors.source.jdbc.config import JdbcSourceConfig
from sluice.connectors.source.jdbc.tables import catalog_name, group_tables, list_tables

log = logging.getLogger(__name__)


class JdbcSourceConnector(SourceConnector):
    """Lists the tables to read, spreads them over ``tasks.max`` tasks, and watches for tables
    being added or dropped (every ``table.poll.interval.ms``), asking for new task configurations
    when the list changes. With ``query`` there is exactly one task and no watching."""

    Config = JdbcSourceConfig
    task_class = Deferred[SourceTask]("sluice.connectors.source.jdbc.task:JdbcSourceTask")
    version = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = (
        "io.confluent.connect.jdbc.JdbcSourceConnector",
        "JdbcSourceConnector",
        "JdbcSource",
    )
    unimplemented_keys = JDBC_SOURCE_UNIMPLEMENTED_KEYS

    def __init__(self) -> None:
        self._config: JdbcSourceConfig | None = None
        self._engine: Any = None
        self._tables: list[str] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._monitor: threading.Thread | None = None

    def exactly_once_support(self, config: Mapping[str, Any]) -> ExactlyOnceSupport:
        """Supported: a task resumes its queries after the stored offsets, so the records of a
        committed transaction are never read again (its transactions end per poll or interval; it
        defines no boundaries of its own). Thread: the REST request thread that validates."""
        return ExactlyOnceSupport.SUPPORTED

    @classmethod
    def validate(cls, raw: Mapping[str, Any]) -> Any:
        """Check the keys, and that ``connection.url`` names a database Sluice can reach."""
        config: JdbcSourceConfig = super().validate(raw)
        to_sqlalchemy_url(config.connection_url, config.connection_user, config.password)
        return config

    @classmethod
    def validate_connectivity(cls, config: Any, timeout_s: float) -> dict[str, str]:
        """Open one connection: ``connection.url`` when the database cannot be reached,
        ``connection.user``/``connection.password`` when it refuses the credentials."""
        url = to_sqlalchemy_url(config.connection_url, config.connection_user, config.password)
        return connectivity_problems(url, timeout_s)

    def start(self, config: Any) -> None:
        """List the tables and start watching them. Thread: the connector thread."""
        cfg = config if isinstance(config, JdbcSourceConfig) else JdbcSourceConfig.parse(config)
        self._config = cfg
        self._stopping.clear()
        if cfg.query:
            return
        url = to_sqlalchemy_url(cfg.connection_url, cfg.connection_user, cfg.password)
        self._url = url
        self._url_text = safe_url(url)
        self._catalog = catalog_name(url.database, url.get_backend_name())
        self._engine = create_engine(url, db_timezone=cfg.db_timezone, pool_size=1)
        self._tables = self._list_tables()
        if not self._tables:
            log.warning("No tables in %s match the table include/exclude settings", self._url_text)
        if cfg.table_poll_interval_ms > 0:
            self._monitor = threading.Thread(target=self._watch, name="jdbc-table-monitor", daemon=True)
            self._monitor.start()

    def _list_tables(self) -> list[str]:
        cfg = self._config
        assert cfg is not None
        conn = connect_with_retries(
            self._engine.connect,
            attempts=cfg.connection_attempts,
            backoff_ms=cfg.connection_backoff_ms,
            what=self._url_text,
            url=self._url,
            wait=self._stopping.wait,
        )
        try:
            return [t.qualified for t in list_tables(conn, cfg, self._engine.dialect.name, self._catalog)]
        finally:
            conn.close()

    def _watch(self) -> None:
        cfg = self._config
        assert cfg is not None
        while not self._stopping.wait(cfg.table_poll_interval_ms / 1000):
            try:
                tables = self._list_tables()
            except (ConnectError, Exception) as exc:  # noqa: BLE001 - the database may be down for a while
                log.warning("Listing the tables of %s failed: %s", self._url_text, exc)
                continue
            with self._lock:
                changed = tables != self._tables
                if changed:
                    added = sorted(set(tables) - set(self._tables))
                    dropped = sorted(set(self._tables) - set(tables))
                    self._tables = tables
            if changed and not self._stopping.is_set():
                log.info("Tables changed (added %s, dropped %s); reconfiguring tasks", added, dropped)
                self.context.request_task_reconfiguration()

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        """One task for a query; otherwise the tables in up to ``max_tasks`` contiguous groups."""
        cfg = self._config
        if cfg is None:
            raise ConfigError("task_configs() called before start()")
        base = cfg.to_task_config()
        if cfg.query:
            return [base]
        with self._lock:
            tables = list(self._tables)
        return [{**base, "tables": ",".join(group)} for group in group_tables(tables, max_tasks)]

    def stop(self) -> None:
        """Stop watching and release the connection pool. Never raises."""
        self._stopping.set()
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            monitor.join(timeout=5)
        if self._engine is not None:
            try:
                self._engine.dispose()
            except Exception:
                log.debug("Disposing the engine failed", exc_info=True)

    def alter_offsets(self, config: Mapping[str, Any], offsets: Mapping[Any, Any]) -> bool:
        """Accept table/query partitions with ``incrementing``/``timestamp`` offsets (or ``None`` to reset)."""
        for partition, offset in offset_pairs(offsets):
            if not isinstance(partition, Mapping) or not ({"table", "query"} & set(partition)):
                raise ConfigError(f"Partition {partition!r} must be an object with the key 'table' (or 'query')")
            if offset is None:
                continue
            if not isinstance(offset, Mapping):
                raise ConfigError(f"Offset {offset!r} must be an object")
            unknown = set(offset) - {"incrementing", "timestamp", "timestamp_nanos"}
            if unknown:
                raise ConfigError(f"Offset {dict(offset)!r} has unknown keys {sorted(unknown)}")
            for key, value in offset.items():
                if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                    raise ConfigError(f"Offset key {key!r} must be an integer, got {value!r}")
        return True

