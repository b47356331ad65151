"""The PostgreSQL CDC task: slot → pgoutput → Debezium change events.

One task reads one replication slot. ``poll`` runs the signals received, the snapshot's next chunk
when one is due, then the streaming loop (:mod:`.streaming`) until it has ``max.batch.size`` events
or ``poll.interval.ms`` passed, and adds a heartbeat record every ``heartbeat.interval.ms``. The
decoded events leave through the emitter chosen at start (:mod:`.emitters`); batches beyond one per
poll wait in the outbox (:mod:`sluice.connectors.cdc.outbox`).

Delivery contract: the runtime calls :meth:`commit` after everything returned by earlier polls
was acknowledged by Kafka *and* its offsets were stored. Only then does the slot's confirmed
position move (a standby status update with the LSN that was safe when the last poll ended), so a
crash at any point replays from a position whose changes are either in Kafka or still in the WAL.

Exactly once with ``transaction.boundary=connector`` (the context's ``transaction_context``): a
poll asks for a commit only when everything handed out so far belongs to committed database
transactions, so a Kafka transaction holds whole ones; a poll that read into the next transaction
hands out the events up to the last commit and keeps the rest (:class:`~sluice.connectors.cdc.boundaries.WholeTransactions`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import psycopg

from sluice.connectors.api import (
    ConnectError,
    RetriableError,
    Serialization,
    SourceRecord,
    SourceRecordBatch,
    SourceTask,
    SourceTaskContext,
)
from sluice.connectors.api.metrics import TaskMetricGroup
from sluice.connectors.cdc.boundaries import WholeTransactions
from sluice.connectors.cdc.heartbeats import HeartbeatSchedule
from sluice.connectors.cdc.lifecycle import close_unless_polled
from sluice.connectors.cdc.notifications import SnapshotNotifier
from sluice.connectors.cdc.outbox import Outbox
from sluice.connectors.cdc.signals import SignalDispatcher
from sluice.connectors.cdc.snapshot import INITIAL, ChunkedSnapshot
from sluice.connectors.jdbc_common.connect_failures import postgres_unreachable
from sluice.connectors.source.postgres_cdc import catalog, messages, native, reselect
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig, SnapshotMode
from sluice.connectors.source.postgres_cdc.decoder import ChangeDecoder
from sluice.connectors.source.postgres_cdc.metrics import CdcMetrics
from sluice.connectors.source.postgres_cdc.replication import ReplicationLost, SlotInUse
from sluice.connectors.source.postgres_cdc.schema import CapturedTables
from sluice.connectors.source.postgres_cdc.slot_guard import SlotUsage, query_slot_usage
from sluice.connectors.source.postgres_cdc.snapshot import postgres_snapshot
from sluice.connectors.source.postgres_cdc.streaming import PostgresStreamingSource
from sluice.connectors.source.postgres_cdc.tables import Table
from sluice.connectors.source.postgres_cdc.values import format_lsn, parse_lsn

log = logging.getLogger(__name__)


def source_partition(config: PostgresCdcConfig) -> dict[str, Any]:
    """Debezium's partition: ``{"server": <topic.prefix>}``."""
    return {"server": config.topic_prefix}


class PostgresCdcTask(SourceTask):
    """Streams one slot. :meth:`start`, :meth:`poll` and :meth:`commit` run on the task thread;
    :meth:`stop` comes from a control thread and only sets a flag (``poll`` returns within
    ``poll.interval.ms`` and closes the connections on the task thread)."""

    version = "0.1.0"

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._config: PostgresCdcConfig | None = None
        self._sql: psycopg.Connection[Any] | None = None
        self._snapshot_sql: psycopg.Connection[Any] | None = None  # chunk reads only (see ChunkedSnapshot)
        self._streaming: PostgresStreamingSource | None = None
        self._decoder: ChangeDecoder | None = None
        self._snapshot: ChunkedSnapshot | None = None
        self._outbox: Outbox[int] = Outbox(0)
        self._heartbeats = HeartbeatSchedule(0)
        self._closed = False
        self._metrics: CdcMetrics | None = None  # metrics() and the slot guard
        self._signals: SignalDispatcher | None = None
        #: transaction.boundary=connector (exactly once): where the task asks to commit.
        self._boundaries: WholeTransactions | None = None  # transaction.boundary=connector (exactly once)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        """Set up slot and publication, read the stored offset, plan the snapshot. Thread: the task thread."""
        self.context = context
        cfg = PostgresCdcConfig.from_task_config(config)
        self._config = cfg
        self._stopping.clear()
        self._schema = CapturedTables(cfg, self._connect_sql)
        self._metrics = CdcMetrics(cfg)
        decoder, snapshot = self._build_decoder(cfg)
        conn = self._connect_sql()
        tables, slot_created = self._prepare_database(conn, cfg)
        stored = context.offset_reader.offset(source_partition(cfg))
        offset = dict(stored) if stored else None
        if offset is not None:
            self._resume(offset, decoder, snapshot)
        elif cfg.streaming_start_lsn:
            self._start_at_lsn(conn, cfg, decoder, slot_created)
        self._plan_initial_snapshot(cfg, snapshot, tables, offset is None, slot_created)
        self._streaming = PostgresStreamingSource(cfg, decoder, self._stopping)
        self._heartbeats = HeartbeatSchedule(cfg.heartbeat_interval_ms)
        self._choose_serialization(cfg, decoder, context.serialization)
        self._reselector = reselect.Reselector(cfg, self._connect_sql, self._schema.tables)  # post.processors
        if context.transaction_context is not None:
            self._boundaries = WholeTransactions(context.transaction_context)
            decoder.follow_transactions()

    def _build_decoder(self, cfg: PostgresCdcConfig) -> tuple[ChangeDecoder, ChunkedSnapshot]:
        """The stream's decoder and the snapshot that shares it, wired to this task's hooks."""
        decoder = ChangeDecoder(
            topic_prefix=cfg.topic_prefix,
            database=cfg.database_dbname,
            partition=source_partition(cfg),
            tombstones=cfg.tombstones_on_delete,
            skipped_operations=set(cfg.skipped_operations),
            load_table=self._schema.load_relation,
            signal_table=cfg.signal_data_collection,
            transaction_topic=f"{cfg.topic_prefix}.transaction" if cfg.provide_transaction_metadata else None,
        )
        snapshot = postgres_snapshot(
            decoder,
            self._schema.describe,
            chunk_size=cfg.snapshot_chunk_size,
            incremental_chunk_size=cfg.incremental_snapshot_chunk_size,
        )
        decoder.on_message = messages.message_hook(cfg, decoder, snapshot.on_message)  # watermarks, then message events
        snapshot.notify = SnapshotNotifier(cfg, decoder)
        # signal.enabled.channels
        self._signals = SignalDispatcher(cfg, snapshot, self._schema.captured_names, thread_prefix="postgres-cdc")
        decoder.on_signal = self._signals.on_table_signal
        self._decoder, self._snapshot = decoder, snapshot
        return decoder, snapshot

    def _prepare_database(self, conn: psycopg.Connection[Any], cfg: PostgresCdcConfig) -> tuple[list[Table], bool]:
        """The publication and the slot (created when missing); the captured tables, and whether
        the slot was created now."""
        captured = catalog.list_tables(conn, self._schema.filter)
        names = [(s, t) for _, s, t in captured]
        if cfg.signal_data_collection:
            names.append(tuple(cfg.signal_data_collection.split(".", 1)))  # type: ignore[arg-type]
        catalog.ensure_publication(conn, cfg, names)
        slot_created = catalog.ensure_slot(conn, cfg)
        tables = [t for t in (self._schema.describe(f"{s}.{n}") for _, s, n in captured) if t is not None]
        catalog.warn_about_identity(tables)
        return tables, slot_created

    @staticmethod
    def _resume(offset: dict[str, Any], decoder: ChangeDecoder, snapshot: ChunkedSnapshot) -> None:
        """Continue from the stored offset: stream after it, and the snapshot where it was."""
        lsn = _as_lsn(offset.get("lsn"))
        commit = _as_lsn(offset.get("lsn_commit")) if offset.get("lsn_commit") is not None else lsn
        decoder.resume_from(commit, lsn)
        decoder.last_xid = offset.get("txId")
        snapshot.restore(offset)
        log.info(
            "Resuming streaming after LSN %s (commit %s)", format_lsn(decoder.resume[1]), format_lsn(decoder.resume[0])
        )

    @staticmethod
    def _start_at_lsn(
        conn: psycopg.Connection[Any], cfg: PostgresCdcConfig, decoder: ChangeDecoder, slot_created: bool
    ) -> None:
        """No stored offset, ``streaming.start.lsn`` set: stream what was committed after it."""
        lsn = parse_lsn(cfg.streaming_start_lsn)
        decoder.resume_from(lsn, lsn)
        state = catalog.slot_state(conn, cfg.slot_name)
        # A slot confirmed at C loses nothing for a start at C - 1 (what a backfill records: no
        # WAL record starts there, and commits strictly after the start are streamed).
        if slot_created or (state and state[2] and state[2] > lsn + 1):
            log.warning(
                "streaming.start.lsn %s is before the slot's confirmed position %s: changes in between are not "
                "available any more",
                cfg.streaming_start_lsn,
                format_lsn(state[2] or 0) if state else "?",
            )
        log.info("No stored offset: streaming changes committed after %s", cfg.streaming_start_lsn)

    def _plan_initial_snapshot(
        self, cfg: PostgresCdcConfig, snapshot: ChunkedSnapshot, tables: list[Table], fresh: bool, slot_created: bool
    ) -> None:
        """Queue the initial snapshot when ``snapshot.mode`` asks for one (``fresh``: no stored offset)."""
        mode = cfg.snapshot_mode
        wants_snapshot = (fresh and mode is not SnapshotMode.NO_DATA and not cfg.streaming_start_lsn) or (
            mode is SnapshotMode.WHEN_NEEDED and slot_created and not fresh
        )
        if wants_snapshot and not snapshot.active:
            captures = self._schema.filter.captures
            snapshot.add(
                [
                    t.qualified
                    for t in tables
                    if t.qualified != cfg.signal_data_collection or captures(*t.qualified.split(".", 1))
                ],
                INITIAL,
            )
            log.info(
                "Initial snapshot of %d tables in chunks of %d rows", len(snapshot.pending), cfg.snapshot_chunk_size
            )
        self._initial_only = mode is SnapshotMode.INITIAL_ONLY
        assert self._metrics is not None
        self._metrics.snapshot_tables = len(snapshot.pending)  # TotalTableCount

    @staticmethod
    def _choose_serialization(cfg: PostgresCdcConfig, decoder: ChangeDecoder, offered: Serialization | None) -> None:
        """The emitter, chosen once: serialize row changes natively when the runtime offers to
        produce the task's own bytes in wire formats the encoder writes
        (:mod:`sluice.connectors.source.postgres_cdc.native`); ``native.encoding=false`` declines."""
        if cfg.native_encoding and native.serializes_for(offered):
            decoder.native = offered
            log.info("Slot %s: row changes are serialized natively", cfg.slot_name)

    def _connect_sql(self) -> psycopg.Connection[Any]:
        cfg = self._config
        assert cfg is not None
        if self._sql is None or self._sql.closed:
            try:
                self._sql = psycopg.connect(**cfg.conninfo(), autocommit=True)
            except psycopg.OperationalError as exc:
                raise postgres_unreachable(exc, cfg.database_hostname, cfg.database_port) from exc
        return self._sql

    def _connect_snapshot_sql(self) -> psycopg.Connection[Any]:
        cfg = self._config
        assert cfg is not None
        if self._snapshot_sql is None or self._snapshot_sql.closed:
            self._snapshot_sql = psycopg.connect(**cfg.conninfo(), autocommit=True)
        return self._snapshot_sql

    def _close_sql(self) -> None:
        conn, self._sql = self._sql, None
        _close_quietly(conn)

    def _close_snapshot_sql(self) -> None:
        conn, self._snapshot_sql = self._snapshot_sql, None
        _close_quietly(conn)

    # -- polling -----------------------------------------------------------------------------------

    def poll(self) -> list[SourceRecord] | SourceRecordBatch | None:
        """Change events (and snapshot rows, heartbeats) of up to ``max.batch.size``; with
        ``transaction.boundary=connector``, a commit request when the poll ends between two
        database transactions (:class:`~sluice.connectors.cdc.boundaries.WholeTransactions`). Thread: the task thread."""
        polled = self._poll()
        if self._boundaries is not None:
            self._boundaries.after_poll(lambda: not self._outbox and self._decoder is not None and self._decoder.settled())
        return polled

    def _poll(self) -> list[SourceRecord] | SourceRecordBatch | None:
        cfg, decoder, streaming, snapshot = self._config, self._decoder, self._streaming, self._snapshot
        assert cfg is not None and decoder is not None and streaming is not None and snapshot is not None
        if self._stopping.is_set():
            self._close()
            return None
        self._check_slot_guard()
        if self._outbox:
            return self._outbox.take()
        if self._initial_only and not snapshot.active:
            # initial_only: the snapshot is complete; nothing is streamed.
            streaming.close()
            self._stopping.wait(cfg.poll_interval_ms / 1000 or 0.5)
            return None
        try:
            if not streaming.is_open:
                snapshot.reset_window()
                self._close_snapshot_sql()  # ends the query of a prefetched chunk
                streaming.open()
            self._advance(streaming, snapshot)
            streaming.failures = 0
        except SlotInUse as exc:
            streaming.slot_in_use(exc)
            return None
        except (ReplicationLost, psycopg.OperationalError, psycopg.InterfaceError) as exc:
            return self._lost(exc)
        records = decoder.finish_batch() if self._boundaries is None else self._boundaries.take(decoder, decoder.finish_batch)
        self._reselector.fill([records, *decoder.outbox])
        self._seen(len(records) + sum(len(item) for item in decoder.outbox))  # change events; heartbeats are not
        if decoder.outbox:
            self._outbox.fill(decoder.outbox + ([records] if records else []), decoder.safe_lsn)
            decoder.outbox = []
            return self._outbox.take()
        self._outbox.polled_safe = decoder.safe_lsn
        now = time.monotonic()
        heartbeat = None
        if not (self._boundaries and self._boundaries.split) and self._heartbeats.due(now):  # split: its offset would be the tail's
            heartbeat = decoder.heartbeat(cfg.heartbeat_topic)
            if cfg.heartbeat_action_query:
                self._heartbeat_query(cfg.heartbeat_action_query)
        handed_out, later = decoder.emitter.hand_out(records, heartbeat)
        if later is not None:  # serialized records: the heartbeat follows with the next poll
            self._outbox.fill([[later]], decoder.safe_lsn)
        if now >= streaming.next_status:
            streaming.send_status()
        return handed_out

    def _seen(self, events: int) -> None:
        decoder, metrics = self._decoder, self._metrics
        if events and decoder is not None and metrics is not None:
            metrics.seen(events, decoder.commit_us)

    def metrics(self) -> list[TaskMetricGroup]:
        """Debezium's streaming and snapshot metrics, the replication slot's lag and retained WAL
        (:mod:`sluice.connectors.source.postgres_cdc.metrics`); asking the server about the slot
        also applies the slot guard. Thread: the task thread (also while paused)."""
        cfg, snapshot, streaming, metrics = self._config, self._snapshot, self._streaming, self._metrics
        if cfg is None or snapshot is None or metrics is None:
            return []
        if metrics.slot_query_due():
            metrics.slot_measured(self._query_slot(cfg.slot_name))
        return metrics.groups(
            connected=streaming is not None and streaming.is_open,
            snapshot_running=snapshot.active,
            snapshot_paused=snapshot.paused,
            snapshot_aborted=snapshot.aborted,
            remaining_tables=len(snapshot.pending),
            rows_scanned=snapshot.rows_scanned,
        )

    def degraded_notice(self) -> str | None:
        """The slot guard's notice while the slot retains WAL past ``slot.max.retained.wal.bytes``
        (:class:`~sluice.connectors.api.metrics.ReportsDegraded`). Thread: the task thread."""
        return self._metrics.guard.notice if self._metrics is not None else None

    def failure(self) -> Exception | None:
        """``slot.retained.wal.action=fail`` and the slot reached its bound: what fails the task
        (:class:`~sluice.connectors.api.metrics.ReportsFailure`; while it runs, from :meth:`poll`).
        Thread: the task thread."""
        return self._metrics.guard.failure if self._metrics is not None else None

    def _check_slot_guard(self) -> None:
        failure = self.failure()
        if failure is not None:
            raise failure

    def _query_slot(self, slot: str) -> SlotUsage | None:
        """What the server keeps for the slot; ``None`` when it cannot tell now."""
        try:
            return query_slot_usage(self._connect_sql(), slot)
        except (psycopg.Error, RetriableError) as exc:
            log.debug("Cannot read the lag of slot %s: %s", slot, exc)
            self._sql = None
            return None

    def _advance(self, streaming: PostgresStreamingSource, snapshot: ChunkedSnapshot) -> None:
        """Run the Kafka signals received, then the snapshot's next chunk and the stream; a blocking
        snapshot's chunk is read instead of the stream (streaming pauses where it is)."""
        if self._signals is not None:
            self._signals.drain()
        if snapshot.blocking:
            snapshot.blocking_chunk(self._connect_snapshot_sql())
            if streaming.status_due():  # the stream is not read: keep the walsender's timeout away
                streaming.send_status()
            return
        if snapshot.can_start:
            snapshot.start_chunk(self._connect_snapshot_sql())
        streaming.read()

    def _lost(self, exc: Exception) -> list[SourceRecord] | SourceRecordBatch | None:
        """The connection failed: hand out what was decoded, then retry with backoff."""
        decoder, streaming = self._decoder, self._streaming
        assert decoder is not None and streaming is not None
        self._close_sql()
        self._close_snapshot_sql()
        delay = streaming.lost(exc)
        records = decoder.finish_batch()
        if decoder.outbox:
            safe = decoder.safe_lsn if not decoder.in_txn else self._outbox.polled_safe
            self._outbox.fill(decoder.outbox + ([records] if records else []), safe)
            decoder.outbox = []
            return self._outbox.take()
        if records:
            if not decoder.in_txn:
                self._outbox.polled_safe = decoder.safe_lsn
            return records
        self._stopping.wait(delay)
        return None

    def _heartbeat_query(self, query: str) -> None:
        try:
            self._connect_sql().execute(query)
        except psycopg.Error as exc:
            log.warning("heartbeat.action.query failed: %s", exc)
            self._sql = None

    def commit(self) -> None:
        """Everything polled so far is in Kafka and its offsets are stored: confirm the slot up to
        the position that was safe at the end of the last poll. Thread: the task thread."""
        if self._streaming is not None:
            self._streaming.confirm(self._outbox.polled_safe)

    def stop(self) -> None:
        """Make ``poll`` return promptly; it releases the connections. Thread: a control thread."""
        self._stopping.set()
        cfg = self._config
        close_unless_polled(cfg.poll_interval_ms if cfg is not None else None, self._close, "postgres-cdc-close")

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        cfg = self._config
        if self._streaming is not None:
            self._streaming.close()
        if self._signals is not None:
            self._signals.close()
        if cfg is not None and cfg.slot_drop_on_stop:
            try:
                catalog.drop_slot(self._connect_sql(), cfg.slot_name)
            except (psycopg.Error, ConnectError, RetriableError) as exc:
                log.warning("Dropping slot %s failed: %s", cfg.slot_name, exc)
        self._close_sql()
        self._close_snapshot_sql()


def _as_lsn(value: Any) -> int:
    """An offset's LSN: an integer, or PostgreSQL's ``16/B374D848`` spelling (set through the REST API)."""
    if value is None:
        return 0
    return parse_lsn(value) if isinstance(value, str) else int(value)


def _close_quietly(conn: psycopg.Connection[Any] | None) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - closing a broken connection may fail in many ways
            pass
