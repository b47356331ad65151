"""The binlog CDC task: MySQL/MariaDB binlog → Debezium change events.

One task reads the server's binlog as a replica. ``start`` checks the server (binlog on, ROW
format, FULL row images, the replication grants), then takes the stored offset, or, with none,
the server's current binlog position, and plans the snapshot ``snapshot.mode`` asks for
(:mod:`.snapshot`: chunks read beside streaming, placed in the stream by binlog-position
watermarks; snapshot chunks and notifications leave one batch per poll). ``poll`` reads events until it has
``max.batch.size`` change events or ``poll.interval.ms`` passed (the server sends a heartbeat
event when its binlog is quiet, so a read never blocks longer), and adds a heartbeat record every
``heartbeat.interval.ms``. DDL in the stream goes through the schema history (:mod:`.history`):
rows are decoded with their table's shape at their position, also after a restart, and each DDL
becomes a schema change event (:mod:`.schema_changes`).

Delivery contract: every record of a poll carries the offset of where the poll stopped, always
between two binlog events (:mod:`.positions`). The runtime stores it once the records are in Kafka;
a restarted task reconnects at the offset's transaction start and skips the events it says were
delivered, so nothing is lost and nothing is repeated beyond what the runtime had not yet stored
(at least once). There is nothing to confirm to the server: a binlog has no slot, and the server
purges it by age (``binlog_expire_logs_seconds``) whatever replicas read.

Exactly once with ``transaction.boundary=connector`` (the context's ``transaction_context``): a
poll asks for a commit only when everything handed out so far belongs to committed transactions,
so a Kafka transaction holds whole ones; a poll that read into the next transaction hands out the
events up to the last commit and keeps the rest (:class:`~sluice.connectors.cdc.boundaries.WholeTransactions`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import pymysql

from sluice.connectors.api import (
    ConfigError,
    SourceRecord,
    SourceRecordBatch,
    SourceTask,
    SourceTaskContext,
    TransactionContext,
)
from sluice.connectors.api.connectivity import RetriableConnectivityError, host_port
from sluice.connectors.api.metrics import TaskMetricGroup
from sluice.connectors.cdc.boundaries import WholeTransactions
from sluice.connectors.cdc.emitter import RecordEmitter
from sluice.connectors.cdc.heartbeats import HeartbeatSchedule
from sluice.connectors.cdc.lifecycle import close_unless_polled
from sluice.connectors.cdc.metrics import DebeziumMetrics
from sluice.connectors.cdc.outbox import Outbox
from sluice.connectors.jdbc_common.connect_failures import classify_database_error
from sluice.connectors.source.binlog_cdc.config import FLAVOR_KEY, FLAVORS, BinlogCdcConfig
from sluice.connectors.source.binlog_cdc.connection import connect
from sluice.connectors.source.binlog_cdc.decoder import BinlogDecoder, QueryingBinlogDecoder
from sluice.connectors.source.binlog_cdc.history import SchemaHistory
from sluice.connectors.source.binlog_cdc.positions import BinlogPosition
from sluice.connectors.source.binlog_cdc.preflight import (
    preflight_problems,
    server_id_holder,
    server_id_taken,
    statement_logging_off,
)
from sluice.connectors.source.binlog_cdc.reader import BinlogReader, StreamLost, lost_to_same_server_id
from sluice.connectors.source.binlog_cdc.schema import CapturedTables
from sluice.connectors.source.binlog_cdc.schema_changes import SchemaChangeEvents
from sluice.connectors.source.binlog_cdc.snapshot import BinlogSnapshots, needs_fresh_start
from sluice.connectors.source.binlog_cdc.source_block import source_schema
from sluice.connectors.source.binlog_cdc.tables import captured_tables

log = logging.getLogger(__name__)

#: Longest wait between reconnection attempts after the binlog connection broke.
MAX_RECONNECT_DELAY_S = 10.0


def source_partition(config: BinlogCdcConfig) -> dict[str, Any]:
    """Debezium's partition: ``{"server": <topic.prefix>}``."""
    return {"server": config.topic_prefix}


class BinlogCdcTask(SourceTask):
    """Streams one server's binlog. :meth:`start`, :meth:`poll` and :meth:`commit` run on the task
    thread; :meth:`stop` comes from a control thread and only sets a flag (``poll`` returns within
    ``poll.interval.ms`` and closes the connections on the task thread)."""

    version = "0.1.0"

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._config: BinlogCdcConfig | None = None
        self._sql: Any = None
        self._reader: BinlogReader | None = None
        self._decoder: BinlogDecoder | None = None
        self._emitter = RecordEmitter()
        self._heartbeats = HeartbeatSchedule(0)
        self._metrics: DebeziumMetrics | None = None
        self._snapshots: BinlogSnapshots | None = None
        self._history: SchemaHistory | None = None
        self._outbox: Outbox[int] = Outbox(0)  # batches beyond one per poll (snapshot chunks, notifications)
        self._failures = 0
        self._closed = False
        #: transaction.boundary=connector (exactly once): where the task asks to commit.
        self._boundaries: WholeTransactions | None = None  # transaction.boundary=connector (exactly once)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        """Check the server, find where to read from, prepare the decoder. Thread: the task thread."""
        self.context = context
        flavor = str(config.get(FLAVOR_KEY, "mysql"))
        if flavor not in FLAVORS:
            raise ConfigError(f"{FLAVOR_KEY} must be one of {', '.join(FLAVORS)}", key=FLAVOR_KEY)
        cfg = BinlogCdcConfig.from_task_config(config)
        self._config = cfg
        self._stopping.clear()
        self._metrics = DebeziumMetrics(flavor, cfg.topic_prefix)
        conn = self._connect_sql()
        problems = preflight_problems(conn, cfg)
        if problems:
            key, problem = next(iter(problems.items()))
            raise ConfigError(f"{key}: {problem}", key=key, problems=problems)
        if cfg.include_query:
            self._warn_unless_statements_logged(conn)
        stored = context.offset_reader.offset(source_partition(cfg))
        resumed = bool(stored and stored.get("file")) and not needs_fresh_start(cfg, conn, dict(stored or {}))
        if resumed:
            position = BinlogPosition.resume(dict(stored or {}))
            log.info(
                "Resuming the binlog at %s:%d (skipping %d events, %d rows)",
                position.file, position.restart_pos, position.skip_events, position.skip_rows,
            )  # fmt: skip
        else:
            position = self._current_position(conn)
            log.info("No stored offset: streaming changes committed after %s:%d", position.file, position.restart_pos)
        tables = CapturedTables(cfg, source_schema(flavor), lambda: self._connect_sql().cursor())
        self._decoder = (QueryingBinlogDecoder if cfg.include_query else BinlogDecoder)(
            connector=flavor,
            topic_prefix=cfg.topic_prefix,
            partition=source_partition(cfg),
            tombstones=cfg.tombstones_on_delete,
            skipped_operations=set(cfg.skipped_operations),
            lookup=tables.lookup,
            position=position,
        )
        # Snapshots (snapshot.mode, signals): the initial one may take the start position anew.
        self._snapshots = BinlogSnapshots(cfg, self._decoder, tables, self._metrics)
        history = self._open_history(cfg, tables, dict(stored or {}) if resumed else None)
        recorded = self._snapshots.start(
            conn,
            dict(stored or {}) if resumed else None,
            lambda: self._current_position(conn),
            None if resumed else lambda position: self._record_shapes(history, conn, tables, position.offset()),
        )
        if not resumed and not recorded:
            self._record_shapes(history, conn, tables, self._decoder.position.offset())
        elif resumed and cfg.snapshot_mode == "recovery":
            self._record_shapes(history, conn, tables, dict(stored or {}))
        self._decoder.on_ddl = SchemaChangeEvents(
            history,
            connector=flavor,
            topic_prefix=cfg.topic_prefix,
            source=source_schema(flavor),
            emit=cfg.include_schema_changes,
        )
        self._prepare_polling(cfg, self._decoder, context.transaction_context)

    def _prepare_polling(
        self, cfg: BinlogCdcConfig, decoder: BinlogDecoder, transactions: TransactionContext | None
    ) -> None:
        """The reader and the heartbeats; with ``transaction.boundary=connector`` (``transactions``
        given), the decoder marks where transactions commit so that polls can end there."""
        self._reader = BinlogReader(cfg)
        self._heartbeats = HeartbeatSchedule(cfg.heartbeat_interval_ms)
        if transactions is not None:
            self._boundaries = WholeTransactions(transactions)
            decoder.follow_transactions()

    def _open_history(self, cfg: BinlogCdcConfig, tables: CapturedTables, stored: dict[str, Any] | None) -> SchemaHistory:
        """The schema history (the tables' shapes at the stream's position), rebuilt up to the stored
        offset; ``snapshot.mode=recovery`` instead rebuilds a lost history from today's shapes at the
        stored offset (:meth:`_record_shapes`), as a first start records them where streaming starts."""
        if cfg.snapshot_mode == "recovery" and stored is None:
            raise ConfigError(
                "snapshot.mode: recovery rebuilds the schema history of a connector with stored offsets, and this one "
                "has none; use another snapshot.mode",
                key="snapshot.mode",
            )
        history = self._history = SchemaHistory(cfg, tables.filter, lambda: self._connect_sql().cursor())
        tables.shapes = history.shape
        if stored is not None and cfg.snapshot_mode != "recovery":
            history.recover(stored)
        elif stored is not None:
            log.warning(
                "snapshot.mode=recovery: rebuilding the schema history %s from the tables' current shapes; set "
                "snapshot.mode back once the connector runs",
                cfg.schema_history_internal_kafka_topic,
            )
        return history

    @staticmethod
    def _warn_unless_statements_logged(conn: Any) -> None:
        """``include.query``: say once when the server logs no statements (the queries stay null)."""
        with conn.cursor() as cur:
            variable = statement_logging_off(cur)
        if variable is not None:
            log.warning(
                "include.query=true, but the server has %s=OFF: it logs no statement beside row events, so "
                "source.query stays null (SET GLOBAL %s = ON, and in the server's configuration)",
                variable, variable,
            )  # fmt: skip

    @staticmethod
    def _record_shapes(history: SchemaHistory, conn: Any, tables: CapturedTables, offset: dict[str, Any]) -> None:
        """Record the captured tables' current shapes at ``offset`` (a first start's, or recovery's)."""
        with conn.cursor() as cur:
            captured = captured_tables(cur, tables.filter)
        history.record_current(offset, captured)

    @staticmethod
    def _current_position(conn: Any) -> BinlogPosition:
        """The server's binlog end and GTID state: where a connector without offsets starts."""
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
            if row is None:
                raise ConfigError("database.hostname: the server writes no binary log", key="database.hostname")
            file, pos = str(row[0]), int(row[1])
            cur.execute("SELECT VERSION()")
            mariadb = "mariadb" in str(cur.fetchone()[0]).lower()
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos" if mariadb else "SELECT @@GLOBAL.gtid_executed")
            gtids = str(cur.fetchone()[0] or "").replace("\n", "") or None
        return BinlogPosition(file=file, restart_pos=pos, restart_gtids=gtids, gtids=gtids)

    def _connect_sql(self) -> Any:
        cfg = self._config
        assert cfg is not None
        if self._sql is None or not self._sql.open:
            try:
                self._sql = connect(cfg)
            except pymysql.Error as exc:
                raise self._unreachable(exc) from exc
        return self._sql

    def _unreachable(self, exc: BaseException) -> RetriableConnectivityError:
        cfg = self._config
        assert cfg is not None
        target = host_port(cfg.database_hostname, cfg.database_port)
        log.warning("Cannot connect to %s: %s", target, exc)
        return RetriableConnectivityError("database.hostname", target, classify_database_error(exc, "mysql").failure)

    # -- polling -----------------------------------------------------------------------------------

    def poll(self) -> list[SourceRecord] | SourceRecordBatch | None:
        """Change events (and heartbeats) of up to about ``max.batch.size``; with
        ``transaction.boundary=connector``, a commit request when the poll ends between two
        transactions (:class:`~sluice.connectors.cdc.boundaries.WholeTransactions`). Thread: the task thread."""
        polled = self._poll()
        if self._boundaries is not None:
            self._boundaries.after_poll(lambda: not self._outbox and self._decoder is not None and self._decoder.settled())
        return polled

    def _poll(self) -> list[SourceRecord] | SourceRecordBatch | None:
        cfg, reader, decoder, snapshots = self._config, self._reader, self._decoder, self._snapshots
        assert cfg is not None and reader is not None and decoder is not None and snapshots is not None
        if self._stopping.is_set():
            self._close()
            return None
        if self._outbox:
            return self._outbox.take()
        if snapshots.finished_initial_only:  # snapshot.mode=initial_only: the snapshot is read, nothing streams
            reader.close()
            self._stopping.wait(cfg.poll_interval_ms / 1000)
            return None
        try:
            if not reader.is_open:
                position = decoder.position
                reader.open(position.file, position.restart_pos)
            limit = cfg.max_batch_size
            # The snapshot's next chunk; a chunk due where the stream stands goes out before reading on.
            if snapshots.advance() and not decoder.outbox:
                deadline = time.monotonic() + cfg.poll_interval_ms / 1000
                reader.read(decoder.handle, lambda: decoder.events >= limit or bool(decoder.outbox), deadline)
            self._failures = 0
        except (StreamLost, pymysql.Error, OSError) as exc:
            if lost_to_same_server_id(exc):
                raise self._server_id_taken() from exc
            return self._lost(exc)
        return self._hand_out()

    def _server_id_taken(self) -> ConfigError:
        """Another connection registered with our server id and the server dropped our stream:
        reconnecting would drop that one in turn, back and forth, so the task fails instead."""
        cfg, reader = self._config, self._reader
        assert cfg is not None and reader is not None
        reader.close()
        try:
            with self._connect_sql().cursor() as cur:
                holder = server_id_holder(cur, cfg.server_id)
        except (pymysql.Error, RetriableConnectivityError):
            holder = None
        return ConfigError(server_id_taken(cfg, holder), key="database.server.id")

    def _hand_out(self) -> list[SourceRecord] | SourceRecordBatch | None:
        cfg, decoder, metrics = self._config, self._decoder, self._metrics
        assert cfg is not None and decoder is not None and metrics is not None
        records = decoder.take_records() if self._boundaries is None else self._boundaries.take(decoder, decoder.take_records)
        metrics.seen(decoder.take_count(), decoder.commit_us)
        if decoder.outbox:  # snapshot chunks (after the changes before them), notifications: one batch per poll
            self._outbox.fill([*decoder.outbox, *([records] if records else [])], 0)
            decoder.outbox = []
            return self._outbox.take()
        heartbeat = None
        if not (self._boundaries and self._boundaries.split) and self._heartbeats.due(time.monotonic()):  # split: its offset would be the tail's
            heartbeat = decoder.heartbeat(cfg.heartbeat_topic)
            if cfg.heartbeat_action_query:
                self._heartbeat_query(cfg.heartbeat_action_query)
        handed_out, _ = self._emitter.hand_out(records, heartbeat)
        return handed_out

    def _lost(self, exc: BaseException) -> list[SourceRecord] | SourceRecordBatch | None:
        """The binlog connection broke: hand out what was decoded, then reconnect from the decoder's
        position (skipping the events of the open transaction it handled) with backoff."""
        reader, decoder = self._reader, self._decoder
        assert reader is not None and decoder is not None
        reader.close()
        self._close_sql()
        if self._snapshots is not None:
            self._snapshots.reset()
        self._failures += 1
        delay = min(MAX_RECONNECT_DELAY_S, 0.5 * 2 ** (self._failures - 1))
        log.warning("The binlog connection broke (%s); reconnecting in %.1fs", exc, delay)
        # Reconnect where the last complete event left off, as a restart would.
        decoder.position = BinlogPosition.resume(decoder.position.offset())
        records = self._hand_out()
        if records:
            return records
        self._stopping.wait(delay)
        return None

    def _heartbeat_query(self, query: str) -> None:
        try:
            with self._connect_sql().cursor() as cur:
                cur.execute(query)
        except (pymysql.Error, RetriableConnectivityError) as exc:
            log.warning("heartbeat.action.query failed: %s", exc)
            self._close_sql()

    def metrics(self) -> list[TaskMetricGroup]:
        """Debezium's streaming and snapshot metrics. Thread: the task thread."""
        metrics, reader, snapshots = self._metrics, self._reader, self._snapshots
        if metrics is None or snapshots is None:
            return []
        return metrics.groups(
            connected=reader is not None and reader.is_open and not self._failures, **snapshots.metric_state()
        )

    def commit(self) -> None:
        """Nothing to confirm: the offsets the runtime stored are the position. Thread: the task thread."""

    def stop(self) -> None:
        """Make ``poll`` return promptly; it releases the connections. Thread: a control thread."""
        self._stopping.set()
        cfg = self._config
        close_unless_polled(cfg.poll_interval_ms if cfg is not None else None, self._close, "binlog-cdc-close")

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._reader is not None:
            self._reader.close()
        if self._snapshots is not None:
            self._snapshots.close()
        if self._history is not None:
            self._history.close()
        self._close_sql()

    def _close_sql(self) -> None:
        conn, self._sql = self._sql, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection may fail in many ways
                pass
