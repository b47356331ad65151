"""The PostgreSQL CDC task: slot → pgoutput → Debezium change events.

One task reads one replication slot. ``poll`` reads stream messages until it has
``max.batch.size`` events or ``poll.interval.ms`` passed, runs the snapshot's next chunk when one
is due, and adds a heartbeat record every ``heartbeat.interval.ms``.

Delivery contract: the runtime calls :meth:`commit` after everything returned by earlier polls
was acknowledged by Kafka *and* its offsets were stored. Only then does the slot's confirmed
position move (a standby status update with the LSN that was safe when the last poll ended), so a
crash at any point replays from a position whose changes are either in Kafka or still in the WAL.
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
from sluice.connectors.jdbc_common.connect_failures import postgres_unreachable
from sluice.connectors.source.postgres_cdc import catalog, messages, native, notifications, reselect, signals
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig, SnapshotMode
from sluice.connectors.source.postgres_cdc.decoder import ChangeDecoder, Relation
from sluice.connectors.source.postgres_cdc.metrics import CdcMetrics
from sluice.connectors.source.postgres_cdc.replication import ReplicationLost, ReplicationStream, SlotInUse
from sluice.connectors.source.postgres_cdc.slot_guard import SlotUsage, query_slot_usage
from sluice.connectors.source.postgres_cdc.snapshot import INITIAL, ChunkedSnapshot
from sluice.connectors.source.postgres_cdc.tables import Table
from sluice.connectors.source.postgres_cdc.values import format_lsn, parse_lsn

log = logging.getLogger(__name__)

_RECONNECT_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)
#: Polls with at least this many events of one table (and no tombstones) go out as a columnar batch.
_COLUMNAR_MIN = 32


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
        self._stream: ReplicationStream | None = None
        self._decoder: ChangeDecoder | None = None
        self._snapshot: ChunkedSnapshot | None = None
        self._tables: dict[str, Table] = {}
        self._polled_safe = 0
        self._outbox: list[list[SourceRecord] | SourceRecordBatch] = []
        self._outbox_safe = 0
        self._flushed = 0
        self._next_status = 0.0
        self._next_heartbeat = 0.0
        self._failures = 0
        self._slot_refusals = 0  # consecutive "slot is active for another PID" refusals
        self._closed = False
        self._streaming_enabled = True
        self._metrics: CdcMetrics | None = None  # metrics() and the slot guard
        self._signals: signals.SignalDispatcher | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        """Set up slot and publication, read the stored offset, plan the snapshot. Thread: the task thread."""
        self.context = context
        cfg = PostgresCdcConfig.from_task_config(config)
        self._config = cfg
        self._stopping.clear()
        self._filter = catalog.TableFilter(cfg)
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
        self._stream = ReplicationStream(cfg.conninfo(replication=True), cfg.slot_name, cfg.publication_name)
        now = time.monotonic()
        self._next_status = now + cfg.status_update_interval_ms / 1000
        self._next_heartbeat = now + cfg.heartbeat_interval_ms / 1000
        self._choose_serialization(cfg, decoder, context.serialization)
        self._reselector = reselect.Reselector(cfg, self._connect_sql, self._tables)  # post.processors

    def _build_decoder(self, cfg: PostgresCdcConfig) -> tuple[ChangeDecoder, ChunkedSnapshot]:
        """The stream's decoder and the snapshot that shares it, wired to this task's hooks."""
        decoder = ChangeDecoder(
            topic_prefix=cfg.topic_prefix,
            database=cfg.database_dbname,
            partition=source_partition(cfg),
            tombstones=cfg.tombstones_on_delete,
            skipped_operations=set(cfg.skipped_operations),
            load_table=self._load_relation,
            signal_table=cfg.signal_data_collection,
            transaction_topic=f"{cfg.topic_prefix}.transaction" if cfg.provide_transaction_metadata else None,
        )
        snapshot = ChunkedSnapshot(
            decoder,
            self._describe,
            chunk_size=cfg.snapshot_chunk_size,
            incremental_chunk_size=cfg.incremental_snapshot_chunk_size,
        )
        decoder.on_message = messages.message_hook(cfg, decoder, snapshot.on_message)  # watermarks, then message events
        snapshot.notify = notifications.SnapshotNotifier(cfg, decoder)
        self._signals = signals.SignalDispatcher(cfg, snapshot, self._captured_names)  # signal.enabled.channels
        decoder.on_signal = self._signals.on_table_signal
        self._decoder, self._snapshot = decoder, snapshot
        return decoder, snapshot

    def _prepare_database(self, conn: psycopg.Connection[Any], cfg: PostgresCdcConfig) -> tuple[list[Table], bool]:
        """The publication and the slot (created when missing); the captured tables, and whether
        the slot was created now."""
        captured = catalog.list_tables(conn, self._filter)
        names = [(s, t) for _, s, t in captured]
        if cfg.signal_data_collection:
            names.append(tuple(cfg.signal_data_collection.split(".", 1)))  # type: ignore[arg-type]
        catalog.ensure_publication(conn, cfg, names)
        slot_created = catalog.ensure_slot(conn, cfg)
        tables = [t for t in (self._describe(f"{s}.{n}") for _, s, n in captured) if t is not None]
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
            snapshot.add(
                [
                    t.qualified
                    for t in tables
                    if t.qualified != cfg.signal_data_collection or self._filter.captures(*t.qualified.split(".", 1))
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
        """Serialize row changes natively when the runtime offers to produce the task's own bytes in
        wire formats the encoder writes (:mod:`sluice.connectors.source.postgres_cdc.native`);
        ``native.encoding=false`` declines."""
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

    def _close_snapshot_sql(self) -> None:
        conn, self._snapshot_sql = self._snapshot_sql, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection may fail in many ways
                pass

    # -- tables ------------------------------------------------------------------------------------

    def _describe(self, qualified: str) -> Table | None:
        """The current description of a captured table (catalog), shared with the stream's."""
        cfg = self._config
        assert cfg is not None
        table = self._tables.get(qualified)
        if table is not None:
            return table
        schema, name = qualified.split(".", 1)
        conn = self._connect_sql()
        oid = catalog.table_oid(conn, schema, name)
        if oid is None:
            return None
        table = catalog.load_table(conn, oid, cfg, self._filter)
        if table is not None:
            self._tables[qualified] = table
        return table

    def _load_relation(self, relid: int, relation: Relation, is_signal: bool) -> tuple[Table | None, bool]:
        """A Relation message arrived: (re)describe the table; keep the old object (and its schemas)
        when nothing changed, so converters keep their caches."""
        cfg = self._config
        assert cfg is not None
        schema, name = relation[0], relation[1]
        captured = self._filter.captures(schema, name)
        if not captured and not is_signal:
            return None, False
        table = catalog.load_table(self._connect_sql(), relid, cfg, self._filter, relation)
        if table is None:
            return None, False
        known = self._tables.get(table.qualified)
        if known is not None and known.same_shape(table):
            return known, captured
        if known is not None:
            log.info("Table %s changed; its schemas follow (%d columns)", table.qualified, len(table.columns))
        self._tables[table.qualified] = table
        return table, captured

    def _captured_names(self) -> list[str]:
        """``schema.table`` of the captured tables: what a snapshot signal's data-collections match."""
        return [f"{s}.{t}" for _, s, t in catalog.list_tables(self._connect_sql(), self._filter)]

    # -- polling -----------------------------------------------------------------------------------

    def poll(self) -> list[SourceRecord] | SourceRecordBatch | None:
        """Change events (and snapshot rows, heartbeats) of up to ``max.batch.size``. Thread: the task thread."""
        cfg, decoder, stream, snapshot = self._config, self._decoder, self._stream, self._snapshot
        assert cfg is not None and decoder is not None and stream is not None and snapshot is not None
        if self._stopping.is_set():
            self._close()
            return None
        self._check_slot_guard()
        if self._outbox:
            return self._next_from_outbox()
        if self._initial_only and not snapshot.active:
            # initial_only: the snapshot is complete; nothing is streamed.
            stream.close()
            self._stopping.wait(cfg.poll_interval_ms / 1000 or 0.5)
            return None
        try:
            if not stream.is_open:
                self._reconnect()
                self._slot_refusals = 0
            self._advance(cfg, decoder, stream, snapshot)
            self._failures = 0
        except SlotInUse as exc:
            self._slot_in_use(exc)
            return None
        except (ReplicationLost, psycopg.OperationalError, psycopg.InterfaceError) as exc:
            return self._lost(exc)
        records = decoder.finish_batch()
        self._reselector.fill([records, *decoder.outbox])
        self._seen(len(records) + sum(len(item) for item in decoder.outbox))  # change events; heartbeats are not
        if decoder.outbox:
            self._outbox = decoder.outbox + ([records] if records else [])
            decoder.outbox = []
            self._outbox_safe = decoder.safe_lsn
            return self._next_from_outbox()
        self._polled_safe = decoder.safe_lsn
        now = time.monotonic()
        if cfg.heartbeat_interval_ms and now >= self._next_heartbeat:
            self._next_heartbeat = now + cfg.heartbeat_interval_ms / 1000
            heartbeat = decoder.heartbeat(cfg.heartbeat_topic)
            if isinstance(records, list):
                records.append(heartbeat)
            else:  # serialized records: the heartbeat follows with the next poll
                self._outbox, self._outbox_safe = [[heartbeat]], decoder.safe_lsn
            if cfg.heartbeat_action_query:
                self._heartbeat_query(cfg.heartbeat_action_query)
        if now >= self._next_status:
            self._send_status()
        if not isinstance(records, list):
            return records
        if len(records) >= _COLUMNAR_MIN:
            return as_batch(records)
        return records or None

    def _seen(self, events: int) -> None:
        decoder, metrics = self._decoder, self._metrics
        if events and decoder is not None and metrics is not None:
            metrics.seen(events, decoder.commit_us)

    def metrics(self) -> list[TaskMetricGroup]:
        """Debezium's streaming and snapshot metrics, the replication slot's lag and retained WAL
        (:mod:`sluice.connectors.source.postgres_cdc.metrics`); asking the server about the slot
        also applies the slot guard. Thread: the task thread (also while paused)."""
        cfg, snapshot, stream, metrics = self._config, self._snapshot, self._stream, self._metrics
        if cfg is None or snapshot is None or metrics is None:
            return []
        if metrics.slot_query_due():
            metrics.slot_measured(self._query_slot(cfg.slot_name))
        return metrics.groups(
            connected=stream is not None and stream.is_open,
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

    def _next_from_outbox(self) -> list[SourceRecord] | SourceRecordBatch:
        item = self._outbox.pop(0)
        if not self._outbox:
            self._polled_safe = self._outbox_safe  # everything decoded has been handed out
        return item

    def _advance(
        self, cfg: PostgresCdcConfig, decoder: ChangeDecoder, stream: ReplicationStream, snapshot: ChunkedSnapshot
    ) -> None:
        """Run the Kafka signals received, then the snapshot's next chunk and the stream; a blocking
        snapshot's chunk is read instead of the stream (streaming pauses where it is)."""
        if self._signals is not None:
            self._signals.drain()
        if snapshot.blocking:
            snapshot.blocking_chunk(self._connect_snapshot_sql())
            if time.monotonic() >= self._next_status:  # the stream is not read: keep the walsender's timeout away
                self._send_status()
            return
        if snapshot.can_start:
            snapshot.start_chunk(self._connect_snapshot_sql())
        self._read(cfg, decoder, stream)

    def _read(self, cfg: PostgresCdcConfig, decoder: ChangeDecoder, stream: ReplicationStream) -> None:
        """Read messages until a full batch, or the poll interval ends with nothing (more) to read."""
        limit = cfg.max_batch_size
        deadline = time.monotonic() + cfg.poll_interval_ms / 1000
        read, handle, fetch = stream.read, decoder.handle, stream.buffered_reader()
        stopping = self._stopping
        records, encoded = decoder.records, decoder.encoded
        outbox = decoder.outbox
        while len(records) + len(encoded) < limit and not outbox:
            nbytes, data = fetch(1)  # a message libpq already has, with no Python call in between
            if nbytes <= 0:
                data = read(0)
            if data is None:
                if (records or encoded) and not decoder.in_txn:
                    return  # return what we have rather than wait
                remaining = deadline - time.monotonic()
                if remaining <= 0 or stopping.is_set():
                    return
                data = read(min(remaining, 0.2))
                if data is None:
                    continue
            tag = data[0]
            if tag == 119:  # w: XLogData
                handle(data)
                records, encoded = decoder.records, decoder.encoded
            elif tag == 107:  # k: primary keepalive
                wal_end = int.from_bytes(data[1:9], "big")
                stream.received_lsn = max(stream.received_lsn, wal_end)
                decoder.keepalive(wal_end)
                if data[17]:
                    stream.send_status(max(stream.received_lsn, self._flushed), self._flushed)
                if not records:
                    # Nothing pending: report the keepalive's position as written so the server
                    # keeps telling us where WAL ends (the basis of an idle slot's progress).
                    stream.received_lsn = wal_end

    def _reconnect(self) -> None:
        cfg, decoder, stream, snapshot = self._config, self._decoder, self._stream, self._snapshot
        assert cfg is not None and decoder is not None and stream is not None and snapshot is not None
        # Replayed events up to what was already handed out are skipped.
        decoder.resume_from(*decoder.position)
        decoder.in_txn = False
        snapshot.reset_window()
        self._close_snapshot_sql()  # ends the query of a prefetched chunk
        stream.open(0)
        log.info("Streaming from slot %s (publication %s)", cfg.slot_name, cfg.publication_name)

    def _slot_in_use(self, exc: SlotInUse) -> None:
        """Another connection holds the slot: retry ``slot.max.retries`` times ``slot.retry.delay.ms``
        apart (Debezium's keys), then fail the task."""
        cfg = self._config
        assert cfg is not None
        self._slot_refusals += 1
        holder = f"PID {exc.pid}" if exc.pid is not None else "another process"
        if self._slot_refusals > cfg.slot_max_retries:
            raise ConnectError(
                f"Replication slot {exc.slot!r} is held by another connection ({holder}); gave up after "
                f"{self._slot_refusals} attempts {cfg.slot_retry_delay_ms} ms apart (slot.max.retries="
                f"{cfg.slot_max_retries}, slot.retry.delay.ms={cfg.slot_retry_delay_ms}). Stop the other reader "
                f"(SELECT pg_terminate_backend({exc.pid if exc.pid is not None else '<pid>'})) or give this "
                "connector a slot.name of its own."
            ) from exc
        log.warning(
            "Replication slot %s is active for %s; retry %d of %d in %d ms",
            exc.slot,
            holder,
            self._slot_refusals,
            cfg.slot_max_retries,
            cfg.slot_retry_delay_ms,
        )
        self._stopping.wait(cfg.slot_retry_delay_ms / 1000)

    def _lost(self, exc: Exception) -> list[SourceRecord] | SourceRecordBatch | None:
        """The connection failed: hand out what was decoded, then retry with backoff."""
        decoder, stream = self._decoder, self._stream
        assert decoder is not None and stream is not None
        stream.close()
        if self._sql is not None:
            try:
                self._sql.close()
            except Exception:  # noqa: BLE001
                pass
            self._sql = None
        self._close_snapshot_sql()
        self._failures += 1
        delay = _RECONNECT_BACKOFF_S[min(self._failures - 1, len(_RECONNECT_BACKOFF_S) - 1)]
        log.warning(
            "PostgreSQL connection lost (%s); reconnecting in %.1fs",
            str(exc).strip().splitlines()[0] if str(exc) else exc,
            delay,
        )
        records = decoder.finish_batch()
        if decoder.outbox:
            self._outbox = decoder.outbox + ([records] if records else [])
            decoder.outbox = []
            self._outbox_safe = decoder.safe_lsn if not decoder.in_txn else self._polled_safe
            return self._next_from_outbox()
        if records:
            if not decoder.in_txn:
                self._polled_safe = decoder.safe_lsn
            return records
        self._stopping.wait(delay)
        return None

    def _heartbeat_query(self, query: str) -> None:
        try:
            self._connect_sql().execute(query)
        except psycopg.Error as exc:
            log.warning("heartbeat.action.query failed: %s", exc)
            self._sql = None

    def _send_status(self) -> None:
        cfg, stream = self._config, self._stream
        assert cfg is not None and stream is not None
        self._next_status = time.monotonic() + cfg.status_update_interval_ms / 1000
        if stream.is_open:
            try:
                stream.send_status(max(stream.received_lsn, self._flushed), self._flushed)
            except ReplicationLost as exc:
                log.warning("Standby status update failed: %s", exc)

    def commit(self) -> None:
        """Everything polled so far is in Kafka and its offsets are stored: confirm the slot up to
        the position that was safe at the end of the last poll. Thread: the task thread."""
        if self._polled_safe > self._flushed:
            self._flushed = self._polled_safe
            self._send_status()

    def stop(self) -> None:
        """Make ``poll`` return promptly; it releases the connections. Thread: a control thread."""
        self._stopping.set()
        threading.Thread(target=self._close_later, daemon=True, name="postgres-cdc-close").start()

    def _close_later(self) -> None:
        # poll() notices the flag within poll.interval.ms and closes on the task thread; this is
        # for a runner that does not call poll() again after stop().
        cfg = self._config
        time.sleep((cfg.poll_interval_ms if cfg is not None else 500) / 1000 + 1.0)
        self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        cfg = self._config
        if self._stream is not None:
            self._stream.close()
        if self._signals is not None:
            self._signals.close()
        if cfg is not None and cfg.slot_drop_on_stop:
            try:
                catalog.drop_slot(self._connect_sql(), cfg.slot_name)
            except (psycopg.Error, ConnectError, RetriableError) as exc:
                log.warning("Dropping slot %s failed: %s", cfg.slot_name, exc)
        if self._sql is not None:
            try:
                self._sql.close()
            except Exception:  # noqa: BLE001
                pass
            self._sql = None
        self._close_snapshot_sql()


def as_batch(records: list[SourceRecord]) -> list[SourceRecord] | SourceRecordBatch:
    """The records as a :class:`SourceRecordBatch` when they share a topic and schemas and none is
    a tombstone: the runtime then converts each column in one call and produces in a tight loop.
    The records of one poll share their offset (see ``ChangeDecoder.finish_batch``)."""
    first = records[0]
    topic, schema, key_schema = first.topic, first.value_schema, first.key_schema
    if schema is None:
        return records
    for r in records:
        if r.topic is not topic or r.value_schema is not schema or r.value is None:
            return records
    offset = records[-1].source_offset
    n = len(records)
    return SourceRecordBatch(
        topic,
        [r.value for r in records],
        value_schema=schema,
        keys=[r.key for r in records] if key_schema is not None else None,
        key_schema=key_schema,
        source_partition=first.source_partition,
        offsets_loader=lambda: [offset] * n,
        last_offset=offset,
    )


def _as_lsn(value: Any) -> int:
    """An offset's LSN: an integer, or PostgreSQL's ``16/B374D848`` spelling (set through the REST API)."""
    if value is None:
        return 0
    return parse_lsn(value) if isinstance(value, str) else int(value)
