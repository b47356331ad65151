"""Snapshots of the binlog CDC source: initial, incremental and blocking, chunked and resumable.

The shared chunked snapshot (:mod:`sluice.connectors.cdc.snapshot`) drives them beside streaming;
this module gives it the binlog's side: the stream (:class:`BinlogChangeStream` over the
:class:`~.decoder.BinlogDecoder`), the queries (:mod:`.snapshot_reads`), the ``r`` events
(:class:`BinlogChunkEmitter`), and :class:`BinlogSnapshots`, which the task holds.

Watermarks are binlog positions the snapshot reads (never writes). The decoder reports where the
stream stands between transactions (a transaction's first event, a commit's end, a rotation, the
server's heartbeat on a quiet binlog); a watermark opens or closes its chunk's window once the
stream reaches it (:class:`Watermarks`), so the chunk's rows leave in stream order.

``snapshot.mode``: ``initial`` (no stored offset: snapshot the captured tables, streaming from the
position taken at the snapshot's start), ``initial_only`` (the same, then no streaming),
``when_needed`` (also when the stored binlog file is gone from the server), ``always`` (at every
start, from the current position), ``no_data`` (no snapshot). Snapshot progress lives in the
offsets (``snapshot_tables``, ``snapshot_key``), so a restarted task continues after the last
chunk it delivered, whatever the mode.

``snapshot.locking.mode``: the chunks need no lock to be consistent (each is read in a
consistent snapshot); ``minimal`` read-locks the captured tables (``LOCK TABLES … READ``) just
while their shapes and the start position are read, so the two match; ``extended`` holds that
lock until the initial snapshot is read (writes to those tables wait); ``none`` takes no lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pymysql

from sluice.connectors.api import ConfigError, SourceRecordBatch
from sluice.connectors.cdc.chunks import ChunkWindow, snapshot_batch
from sluice.connectors.cdc.emitter import Batch
from sluice.connectors.cdc.metrics import DebeziumMetrics
from sluice.connectors.cdc.notifications import SnapshotNotifier
from sluice.connectors.cdc.signals import SignalDispatcher
from sluice.connectors.cdc.snapshot import INCREMENTAL, INITIAL, WATERMARK_PREFIX, ChangeHook, ChunkedSnapshot
from sluice.connectors.source.binlog_cdc.config import BinlogCdcConfig
from sluice.connectors.source.binlog_cdc.connection import connect
from sluice.connectors.source.binlog_cdc.decoder import BinlogDecoder
from sluice.connectors.source.binlog_cdc.positions import BinlogPosition
from sluice.connectors.source.binlog_cdc.schema import CapturedTables
from sluice.connectors.source.binlog_cdc.snapshot_reads import (
    BinlogSnapshotReader,
    SnapshotTable,
    binlog_like_conversions,
    encode,
    list_tables,
    position_of,
    quoted,
)
from sluice.connectors.source.binlog_cdc.source_block import VERSION
from sluice.connectors.source.binlog_cdc.tables import Table

log = logging.getLogger(__name__)

#: The modes that snapshot a connector without offsets.
SNAPSHOT_MODES = ("initial", "initial_only", "when_needed", "always")

_ACCESS_DENIED = (1044, 1142, 1227)  # database, table, privilege


def needs_fresh_start(cfg: BinlogCdcConfig, conn: Any, stored: dict[str, Any]) -> bool:
    """Whether the stored offset is set aside for a new snapshot: ``always``, or ``when_needed``
    with the stored binlog file no longer on the server."""
    if cfg.snapshot_mode == "always":
        log.info("snapshot.mode=always: a new snapshot, streaming from the current position")
        return True
    if cfg.snapshot_mode != "when_needed":
        return False
    with conn.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        files = {str(row[0]) for row in cur.fetchall()}
    if stored.get("file") in files:
        return False
    log.warning("The stored binlog file %s is gone from the server: snapshot.mode=when_needed takes a new snapshot",
                stored.get("file"))  # fmt: skip
    return True


class Watermarks:
    """Watermarks taken and not yet reached by the stream, in the order they were taken (their
    positions never decrease). Thread: the task thread."""

    def __init__(self, fire: Callable[[str, int], None]) -> None:
        self.fire = fire
        self._pending: list[tuple[int, str]] = []

    def __bool__(self) -> bool:
        return bool(self._pending)

    def add(self, position: int, text: str) -> None:
        self._pending.append((position, text))

    def reached(self, position: int) -> None:
        """The stream is at ``position``: every watermark at or before it takes effect."""
        pending = self._pending
        while pending and pending[0][0] <= position:
            at, text = pending.pop(0)
            self.fire(text, at)

    def clear(self) -> None:
        self._pending = []


class BinlogChunkEmitter:
    """A chunk's ``r`` events (:class:`~sluice.connectors.cdc.snapshot.ChunkEmitter`): the ``source``
    block names the snapshot's binlog position (the initial snapshot's start; an incremental
    chunk's watermark), ``server_id`` 0, no GTID, as Debezium's snapshot events. Thread: the task thread."""

    def __init__(self, decoder: BinlogDecoder) -> None:
        self.decoder = decoder

    def chunk_events(
        self,
        window: ChunkWindow,
        position: int,
        now: int,
        offset: dict[str, Any],
        markers: tuple[str | None, str | None],
        point: tuple[int, int] | None,
    ) -> SourceRecordBatch:
        decoder = self.decoder
        snapshot_table = window.table
        assert isinstance(snapshot_table, SnapshotTable)
        table = snapshot_table.table
        file, pos = position_of(point[0] if point is not None else position, decoder.position.file)
        ts_ms, ts_us = now // 1_000_000, now // 1000
        source = {
            "version": VERSION,
            "connector": decoder.connector,
            "name": decoder.prefix,
            "ts_ms": ts_ms,
            "snapshot": "incremental" if window.kind == INCREMENTAL else "true",
            "db": table.database,
            "sequence": None,
            "ts_us": ts_us,
            "ts_ns": now,
            "table": table.name,
            "server_id": 0,
            "gtid": None,
            "file": file,
            "pos": pos,
            "row": 0,
            "thread": None,
            "query": None,
        }
        return snapshot_batch(
            window, table.topic, table.envelope_schema, source, now, markers, decoder.partition, offset
        )


class BinlogChangeStream:
    """The decoder as the shared snapshot sees it (:class:`~sluice.connectors.cdc.snapshot.ChangeStream`).
    Thread: the task thread."""

    def __init__(self, decoder: BinlogDecoder, adapt: Callable[[Table], SnapshotTable]) -> None:
        self.decoder = decoder
        self.adapt = adapt
        self.emitter = BinlogChunkEmitter(decoder)
        #: The last position the decoder reported between transactions (``file``, ``pos``).
        self.last_reported: tuple[str, int] | None = None

    @property
    def outbox(self) -> list[Batch]:
        return self.decoder.outbox

    @outbox.setter
    def outbox(self, batches: list[Batch]) -> None:
        self.decoder.outbox = batches

    @property
    def snapshot_progress(self) -> dict[str, Any] | None:
        return self.decoder.snapshot_progress

    @snapshot_progress.setter
    def snapshot_progress(self, progress: dict[str, Any] | None) -> None:
        self.decoder.snapshot_progress = progress

    def track_changes(self, hook: ChangeHook | None) -> None:
        adapt = self.adapt
        self.decoder.on_change = (
            None if hook is None else (lambda table, before, after: hook(adapt(table), before, after))
        )

    def keepalive(self, position: int) -> None:
        """Nothing to do: the decoder's position is already between transactions there."""

    def finish_batch(self) -> Batch:
        return self.decoder.finish_batch()

    def offset_at(self, position: int) -> dict[str, Any]:
        return self.decoder.current_offset()

    def current_position(self) -> int:
        position = self.decoder.position
        return encode(position.file, position.restart_pos)

    def reached_position(self) -> int:
        """Where the stream stands between transactions: the decoder's position, or further on
        where the server said so (a heartbeat after events outside transactions, as after a rotation)."""
        at = self.current_position()
        return max(at, encode(*self.last_reported)) if self.last_reported is not None else at

    def floor(self) -> int:
        """The least position a new watermark may have: after everything the stream handed out."""
        position = self.decoder.position
        inside = position.in_transaction or position.skip_events or position.skip_rows
        return encode(position.file, position.restart_pos) + (1 if inside else 0)

    def between_transactions(self) -> bool:
        position = self.decoder.position
        return not (position.in_transaction or position.skip_events or position.skip_rows)


class BinlogSnapshots:
    """The task's snapshots: the shared chunked snapshot over this stream, its signals and
    notifications, its connection and locks. Thread: the task thread (:meth:`close` from any)."""

    def __init__(
        self, cfg: BinlogCdcConfig, decoder: BinlogDecoder, tables: CapturedTables, metrics: DebeziumMetrics
    ) -> None:
        self.cfg = cfg
        self.decoder = decoder
        self.tables = tables
        self.metrics = metrics
        self._adapted: dict[str, SnapshotTable] = {}
        self._oids: dict[str, int] = {}
        self.stream = BinlogChangeStream(decoder, self._adapt)
        self.watermarks = Watermarks(self._fire)
        self.reader = BinlogSnapshotReader(self.watermarks.add, self.stream.floor, cfg.snapshot_overrides)
        self.snapshot = ChunkedSnapshot(
            self.stream,
            self.reader,
            self.describe,
            chunk_size=cfg.snapshot_fetch_size,
            incremental_chunk_size=cfg.incremental_snapshot_chunk_size,
        )
        self.snapshot.notify = SnapshotNotifier(cfg, decoder)
        self.signals = SignalDispatcher(cfg, self.snapshot, self.captured_names, thread_prefix="binlog-cdc")
        decoder.on_position = self._reached
        if cfg.signal_data_collection:
            database, _, name = cfg.signal_data_collection.partition(".")
            decoder.signal_table = (database, name)
            decoder.on_signal = self._signal
        self._conn: Any = None
        self._locked: list[str] = []  # extended: the tables the snapshot connection holds read-locked
        self.initial_only = cfg.snapshot_mode == "initial_only"

    # -- tables --------------------------------------------------------------------------------------

    def describe(self, qualified: str) -> SnapshotTable | None:
        """The captured table ``database.table`` now (``None``: gone, or not captured)."""
        database, _, name = qualified.partition(".")
        table = self.tables.lookup(database, name, (None,))
        return None if table is None else self._adapt(table)

    def _adapt(self, table: Table) -> SnapshotTable:
        qualified = table.qualified
        known = self._adapted.get(qualified)
        if known is None or known.table is not table:
            oid = self._oids.setdefault(qualified, len(self._oids) + 1)
            known = self._adapted[qualified] = SnapshotTable(table, oid)
        return known

    def captured_names(self) -> list[str]:
        with self._sql_cursor() as cur:
            return list_tables(cur, self.tables.filter)

    def _sql_cursor(self) -> Any:
        return self.tables.cursor()

    # -- planning ------------------------------------------------------------------------------------

    def start(
        self,
        conn: Any,
        resumed: dict[str, Any] | None,
        take_position: Callable[[], BinlogPosition],
        while_locked: Callable[[BinlogPosition], None] | None = None,
    ) -> bool:
        """Continue the snapshot the stored offset names (``resumed``), or, without one, plan the
        initial snapshot ``snapshot.mode`` asks for: the tables' shapes and the position streaming
        starts from are read together (under ``snapshot.locking.mode``'s lock; ``conn``: the task's
        connection, where ``minimal`` takes it), and ``while_locked`` runs with that position
        before the lock is released (the task records the schema history's first shapes there).
        Returns whether it ran ``while_locked``."""
        cfg, snapshot = self.cfg, self.snapshot
        if resumed is not None:
            snapshot.restore(resumed)
        elif cfg.snapshot_mode in SNAPSHOT_MODES:
            with self._sql_cursor() as cur:
                captured = list_tables(cur, self.tables.filter)
                names = list_tables(cur, self.tables.filter, cfg.snapshot_include_collection_list)
            if cfg.snapshot_locking_mode == "extended":
                conn = self.connection()
            # minimal: every captured table, as the history's first shapes are read under the lock on
            # this session too (a session holding LOCK TABLES reads no other table); extended holds
            # its lock on a connection of its own, on the tables the snapshot reads.
            minimal = cfg.snapshot_locking_mode == "minimal" and while_locked is not None
            self._lock(conn, captured if minimal else names)
            try:
                position = take_position()
                for name in names:
                    self.describe(name)
                if while_locked is not None:
                    while_locked(position)
            finally:
                if cfg.snapshot_locking_mode == "minimal":
                    self._unlock(conn)
            self.decoder.position = position
            self.reader.start_point = encode(position.file, position.restart_pos)
            snapshot.add(names, INITIAL)
            log.info(
                "Initial snapshot of %d tables in chunks of %d rows from %s:%d",
                len(names), cfg.snapshot_fetch_size, position.file, position.restart_pos,
            )  # fmt: skip
            self.metrics.snapshot_tables = len(snapshot.pending)
            return while_locked is not None
        self.metrics.snapshot_tables = len(snapshot.pending)
        return False

    def _lock(self, conn: Any, names: list[str]) -> None:
        if self.cfg.snapshot_locking_mode == "none" or not names:
            return
        targets = ", ".join(f"{quoted(d)}.{quoted(t)} READ" for d, _, t in (n.partition(".") for n in names))
        try:
            with conn.cursor() as cur:
                cur.execute(f"LOCK TABLES {targets}")
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] in _ACCESS_DENIED:
                raise ConfigError(
                    f"snapshot.locking.mode={self.cfg.snapshot_locking_mode} read-locks the captured tables, which "
                    f"needs the LOCK TABLES privilege: {exc.args[1] if len(exc.args) > 1 else exc}. Grant LOCK TABLES "
                    "on them, or set snapshot.locking.mode=none (the chunks are consistent without a lock).",
                    key="snapshot.locking.mode",
                ) from None
            raise
        if conn is self._conn:
            self._locked = names
            self.reader.locked = True
        log.info("Read-locked %d tables (snapshot.locking.mode=%s)", len(names), self.cfg.snapshot_locking_mode)

    def _unlock(self, conn: Any) -> None:
        if self.cfg.snapshot_locking_mode == "none":
            return
        with conn.cursor() as cur:
            cur.execute("UNLOCK TABLES")
        if conn is self._conn:
            self._locked = []
            self.reader.locked = False
            log.info("Tables unlocked: the initial snapshot is read")

    def _hold_extended_lock(self) -> None:
        """``extended``: the lock lasts while initial tables are read (taken again after a
        reconnection), and ends once the last of their chunks is read."""
        if self.cfg.snapshot_locking_mode != "extended":
            return
        snapshot = self.snapshot
        pending, window = snapshot.pending, snapshot.window
        unread = [name for name, kind in pending if kind == INITIAL]
        if window is not None and window.exhausted and unread and unread[0] == window.table.qualified:
            unread.pop(0)  # its last chunk is read, waiting for its place in the stream
        needed = bool(unread) and pending[0][1] == INITIAL
        if self._locked and not needed:
            self._unlock(self.connection())
        elif needed and not self._locked:
            self._lock(self.connection(), unread)

    # -- polling -------------------------------------------------------------------------------------

    @property
    def finished_initial_only(self) -> bool:
        """``initial_only`` and the snapshot is read: the task streams no more."""
        return self.initial_only and not self.snapshot.active

    def advance(self) -> bool:
        """Run the Kafka signals received, then open the snapshot's next chunk; ``False`` when a
        blocking snapshot's chunk was read instead of the stream (streaming pauses where it is)."""
        self.signals.drain()
        snapshot = self.snapshot
        if not snapshot.pending and not self._locked:
            return True
        self._hold_extended_lock()
        if snapshot.blocking:
            snapshot.blocking_chunk(self.connection())
            return False
        if snapshot.can_start:
            snapshot.start_chunk(self.connection())
        if self.stream.between_transactions():
            # A watermark where the stream already stands (a quiet binlog) is reached now.
            self.watermarks.reached(self.stream.reached_position())
        self._hold_extended_lock()
        return True

    def _reached(self, file: str, pos: int) -> None:
        self.stream.last_reported = (file, pos)
        if self.watermarks:  # the decoder calls this twice per transaction: nothing more to do most of the time
            self.watermarks.reached(encode(file, pos))

    def _fire(self, text: str, position: int) -> None:
        self.snapshot.on_message(WATERMARK_PREFIX, text.encode(), position)

    def _signal(self, values: list[Any]) -> None:
        """A row inserted into ``signal.data.collection``: Debezium's columns ``id``, ``type``, ``data``."""
        values = [*values, None, None, None]
        self.signals.on_table_signal({"id": values[0], "type": values[1], "data": values[2]}, 0)

    def metric_state(self) -> dict[str, Any]:
        """The snapshot arguments of :meth:`DebeziumMetrics.groups`."""
        snapshot = self.snapshot
        return {
            "snapshot_running": snapshot.active,
            "snapshot_paused": snapshot.paused,
            "snapshot_aborted": snapshot.aborted,
            "remaining_tables": len(snapshot.pending),
            "rows_scanned": snapshot.rows_scanned,
        }

    # -- the connection ------------------------------------------------------------------------------

    def connection(self) -> Any:
        """The snapshot's own connection (chunk reads, the extended lock); values as the binlog's."""
        if self._conn is None or not self._conn.open:
            self._conn = connect(self.cfg, conv=binlog_like_conversions())
            self._locked = []
            self.reader.locked = False
        return self._conn

    def reset(self) -> None:
        """The stream was lost: a chunk not emitted yet is read again, its watermarks taken anew."""
        self.snapshot.reset_window()
        self.watermarks.clear()
        self.stream.last_reported = None
        self.reader.discard(None)
        self.close_connection()

    def close_connection(self) -> None:
        conn, self._conn = self._conn, None
        self._locked = []
        self.reader.locked = False
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection may fail in many ways
                pass

    def close(self) -> None:
        self.signals.close()
        self.close_connection()
