"""The JDBC source task: polls its tables (or the query) in turn and returns rows as record batches.

Each table has a :class:`~connectors.source.jdbc.querier.Querier` with its own due time: a poll
takes the table that is due first, returns up to ``batch.max.rows`` of its rows, and once its
result is exhausted schedules it ``poll.interval.ms`` later. A poll with nothing due waits at most
a second (less if :meth:`stop` is called), so pause and stop are observed promptly.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any, NoReturn

from sluice.connectors.api import ConnectError, RetriableError, SourceRecordBatch, SourceTask, SourceTaskContext
from sluice.connectors.jdbc_common.connection import connect_with_retries, create_engine, safe_url, to_sqlalchemy_url
from sluice.connectors.jdbc_common.dialects import dialect_for
from sluice.connectors.jdbc_common.errors import Failure, classify, describe
from sluice.connectors.jdbc_common.types import timezone
from sluice.connectors.source.jdbc.config import JdbcSourceTaskConfig
from sluice.connectors.source.jdbc.querier import Querier
from sluice.connectors.source.jdbc.tables import TableRef, catalog_name

log = logging.getLogger(__name__)

_MAX_IDLE_WAIT_S = 1.0
PROTOCOL_V1 = "1"


def table_partition(table: TableRef) -> dict[str, str]:
    """The source partition of a table (Confluent's offset protocol 1)."""
    return {"protocol": PROTOCOL_V1, "table": table.qualified}


def legacy_table_partition(table: TableRef) -> dict[str, str]:
    """The partition older Confluent versions stored (protocol 0), read when no v1 offset exists."""
    return {"table": table.name}


QUERY_PARTITION = {"query": "query"}


class JdbcSourceTask(SourceTask):
    """Reads the tables of its task configuration. :meth:`start` and :meth:`poll` run on the task
    thread; :meth:`stop` comes from a control thread."""

    version = "0.1.0"

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._queriers: list[Querier] = []
        self._engine: Any = None
        self._config: JdbcSourceTaskConfig | None = None

    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        """Reflect the tables and read their stored offsets. Thread: the task thread."""
        self.context = context
        cfg: JdbcSourceTaskConfig = JdbcSourceTaskConfig.from_task_config(config)
        self._config = cfg
        self._stopping.clear()
        url = to_sqlalchemy_url(cfg.connection_url, cfg.connection_user, cfg.password)
        self._url = url
        self._url_text = safe_url(url)
        self._engine = create_engine(url, db_timezone=cfg.db_timezone)
        backend = self._engine.dialect.name
        self._backend = backend
        self._dialect = dialect_for(backend, self._engine.dialect.paramstyle)
        self._tz = timezone(cfg.db_timezone)
        catalog = catalog_name(url.database, backend)
        queriers = []
        if cfg.query:
            queriers.append(self._querier(cfg, cfg.topic_prefix, None, QUERY_PARTITION, None))
        else:
            for text in cfg.tables:
                table = TableRef.parse(text, backend, catalog)
                queriers.append(
                    self._querier(
                        cfg, cfg.topic_prefix + table.name, table, table_partition(table), legacy_table_partition(table)
                    )
                )
        conn = connect_with_retries(
            self._engine.connect,
            attempts=cfg.connection_attempts,
            backoff_ms=cfg.connection_backoff_ms,
            what=self._url_text,
            url=self._url,
            wait=self._stopping.wait,
        )
        try:
            now = self._db_now(conn) if cfg.timestamp_initial == -1 else None
            for q in queriers:
                q.prepare(conn)
        finally:
            conn.close()
        self._restore_offsets(queriers, now)
        self._queriers = queriers
        log.info(
            "Reading %s from %s in %s mode",
            ", ".join(q.name for q in queriers) or "no tables",
            self._url_text,
            cfg.mode,
        )

    def _querier(
        self,
        cfg: JdbcSourceTaskConfig,
        topic: str,
        table: TableRef | None,
        partition: Mapping[str, Any],
        legacy: Mapping[str, Any] | None,
    ) -> Querier:
        return Querier(
            config=cfg,
            dialect=self._dialect,
            backend=self._backend,
            tz=self._tz,
            topic=topic,
            table=table,
            partition=partition,
            legacy_partition=legacy,
        )

    def _restore_offsets(self, queriers: list[Querier], now: _dt.datetime | None) -> None:
        reader = self.context.offset_reader
        partitions: list[Mapping[str, Any]] = [q.partition for q in queriers]
        partitions += [q.legacy_partition for q in queriers if q.legacy_partition is not None]
        stored = reader.offsets(partitions) if partitions else []
        by_key = {_key(p): o for p, o in zip(partitions, stored)}
        for q in queriers:
            offset = by_key.get(_key(q.partition))
            if offset is None and q.legacy_partition is not None:
                offset = by_key.get(_key(q.legacy_partition))
            q.restore(offset, now)
            if offset:
                log.info("Resuming %s from offset %s", q.name, dict(offset))

    def poll(self) -> SourceRecordBatch | None:
        """Rows of the table that is due first, or ``None`` after a short wait. Thread: the task thread."""
        cfg = self._config
        if cfg is None or not self._queriers:
            self._stopping.wait(_MAX_IDLE_WAIT_S)
            return None
        querier = min(self._queriers, key=lambda q: q.next_due)
        wait = querier.next_due - time.monotonic()
        if wait > 0:
            self._stopping.wait(min(wait, _MAX_IDLE_WAIT_S))
            return None
        if self._stopping.is_set():
            return None
        try:
            if not querier.is_open:
                querier.open(self._engine, self._end_time(querier))
            batch, done = querier.fetch(cfg.batch_max_rows)
        except Exception as exc:  # noqa: BLE001 - the driver's error types vary; _fail classifies them
            querier.close()
            self._fail(querier, exc)
        if done:
            querier.next_due = time.monotonic() + cfg.poll_interval_ms / 1000
        return batch

    def _fail(self, querier: Querier, exc: Exception) -> NoReturn:
        cfg = self._config
        assert cfg is not None
        if isinstance(exc, ConnectError):
            raise exc
        if classify(exc) is Failure.TRANSIENT:
            querier.next_due = time.monotonic() + min(cfg.connection_backoff_ms, cfg.poll_interval_ms or 1000) / 1000
            log.warning("Querying %s failed, retrying: %s", querier.name, describe(exc))
            raise RetriableError(f"Querying {querier.name} failed: {describe(exc)}") from exc
        raise ConnectError(f"Querying {querier.name} failed: {describe(exc)}") from exc

    def _end_time(self, querier: Querier) -> _dt.datetime | None:
        """The timestamp modes' upper bound: the database's clock minus ``timestamp.delay.interval.ms``."""
        cfg = self._config
        assert cfg is not None
        if not cfg.mode.uses_timestamp:
            return None
        sql = self._dialect.current_time_sql()
        if sql is None:
            now = _dt.datetime.now(self._tz).replace(tzinfo=None)
        else:
            with self._engine.connect() as conn:
                now = self._db_now(conn)
        return now - _dt.timedelta(milliseconds=cfg.timestamp_delay_interval_ms)

    def _db_now(self, conn: Any) -> _dt.datetime:
        sql = self._dialect.current_time_sql()
        value = conn.exec_driver_sql(sql).scalar() if sql is not None else None
        if not isinstance(value, _dt.datetime):
            return _dt.datetime.now(self._tz).replace(tzinfo=None)
        if value.tzinfo is not None:
            return value.astimezone(self._tz).replace(tzinfo=None)
        return value

    def stop(self) -> None:
        """Make a waiting poll return; the task thread closes results. Thread: a control thread."""
        self._stopping.set()
        for q in self._queriers:
            q.next_due = 0.0
        engine = self._engine
        if engine is not None:
            threading.Thread(target=self._close_later, args=(engine,), daemon=True).start()

    def _close_later(self, engine: Any) -> None:
        # Closing a cursor the task thread may be reading from is unsafe; give poll() time to return.
        time.sleep(2 * _MAX_IDLE_WAIT_S)
        for q in self._queriers:
            q.close()
        try:
            engine.dispose()
        except Exception:
            log.debug("Disposing the engine failed", exc_info=True)


def _key(partition: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(partition.items()))
