"""Resumable snapshots in primary-key chunks, deduplicated against the stream (DBLog watermarks).

Both the initial snapshot and on-demand (``execute-snapshot`` signal) snapshots work the same way,
while streaming continues:

1. write a low watermark into the database's change log, where it takes its place among
   transactions in commit order;
2. read the next chunk: the rows after the last key read, in key order, ``chunk size`` of them;
3. write a high watermark;
4. keep streaming; any change to a row of the chunk between the two watermarks drops that row from
   the chunk (the stream carries a state at least as new);
5. at the high watermark, emit the rest of the chunk as ``r`` events, in stream order.

The offset of every event carries the snapshot's progress (tables left, last key read), so after a
crash the snapshot continues from the last chunk that was delivered, not from the start.

Steps 1-2 of the next chunk are sent as soon as a chunk is read, on a connection of the snapshot's
own, so the database runs that query while this chunk is emitted, converted and produced.

Step 2 must see every transaction whose commit precedes the low watermark in the change log: the
window cannot drop a row for a change that precedes it. Where a commit is logged before it becomes
visible (PostgreSQL), the reader waits for such commits, and when they take too long it defers the
chunk (:class:`ChunkDeferred`): the chunk is opened again, with a new low watermark, a little later.

What is the database's: the queries (:class:`SnapshotReader`: watermarks, chunk reads, the
snapshot's point, the largest key), the stream the watermarks and changes arrive on
(:class:`ChangeStream`) and how a chunk's rows become events (:class:`ChunkEmitter`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from sluice.connectors.api import SourceRecordBatch
from sluice.connectors.cdc.chunks import CapturedTable, ChunkWindow, shown_key
from sluice.connectors.cdc.emitter import Batch

log = logging.getLogger(__name__)

WATERMARK_PREFIX = "sluice-cdc-watermark"

INITIAL = "initial"
INCREMENTAL = "incremental"
#: An ``execute-snapshot`` of type ``blocking``: streaming pauses while these tables are read.
BLOCKING = "blocking"

#: How long the snapshot waits before opening a deferred chunk again (the stream goes on meanwhile).
DEFERRED_RETRY_S = 1.0

_AGGREGATE = {INCREMENTAL: "Incremental Snapshot", INITIAL: "Initial Snapshot", BLOCKING: "Initial Snapshot"}

ChangeHook = Callable[[Any, dict[str, Any] | None, dict[str, Any] | None], None]


class ChunkDeferred(Exception):
    """The chunk cannot be read consistently yet: a transaction that committed before its low
    watermark is not visible to new reads yet. Raised by :meth:`SnapshotReader.read_chunk`, which
    leaves the connection usable; the chunk is opened again later."""


class SnapshotReader(Protocol):
    """The database's queries of a chunked snapshot. ``conn`` is the snapshot's own connection, which
    a chunk's query sent ahead keeps busy until it is read. Thread: the task thread."""

    def take_point(self, conn: Any) -> tuple[int, int]:
        """The initial snapshot's point (position, transaction id) all its rows carry."""
        ...

    def maximum_key(self, conn: Any, table: Any) -> str | None:
        """The table's largest primary key now, as notifications show it."""
        ...

    def send_chunk(self, conn: Any, window: ChunkWindow, size: int, after_key: list[str] | None) -> None:
        """Write the low watermark ``L:<window id>``, then send the query of the next ``size`` rows
        after ``after_key`` (the whole table when it has no key) without waiting for them."""
        ...

    def read_chunk(self, conn: Any, window: ChunkWindow, size: int) -> None:
        """Read the rows of the query sent for ``window`` into it, with its ``last_key`` and ``exhausted``.
        Raises :class:`ChunkDeferred` when the rows it read would miss a commit that precedes the
        window's low watermark."""
        ...

    def high_watermark(self, conn: Any, window: ChunkWindow) -> None:
        """Write the high watermark ``H:<window id>`` so that the stream sees it promptly."""
        ...

    def discard(self, conn: Any) -> None:
        """Read and drop the result of a query sent ahead, leaving the connection usable."""
        ...


class ChunkEmitter(Protocol):
    """How a database source turns a chunk's rows into its ``r`` events (see :mod:`.emitter`)."""

    def chunk_events(
        self,
        window: ChunkWindow,
        position: int,
        now: int,
        offset: dict[str, Any],
        markers: tuple[str | None, str | None],
        point: tuple[int, int] | None,
    ) -> SourceRecordBatch:
        """The chunk's events as one batch at the high watermark's ``position`` (``point``: the
        initial snapshot's), ``markers`` for ``source.snapshot`` of its first and last rows."""
        ...


class ChangeStream(Protocol):
    """What the snapshot needs of the database source's stream decoder."""

    outbox: list[Batch]
    #: The snapshot's offset keys, added to every offset the stream builds (``None``: no snapshot).
    snapshot_progress: dict[str, Any] | None

    @property
    def emitter(self) -> ChunkEmitter: ...

    def track_changes(self, hook: ChangeHook | None) -> None:
        """Have ``hook`` see every row change of a captured table from now on (``None``: stop)."""
        ...

    def keepalive(self, position: int) -> None:
        """The stream is at ``position``, between transactions."""
        ...

    def finish_batch(self) -> Batch: ...

    def offset_at(self, position: int) -> dict[str, Any]:
        """The offset of the stream at ``position``."""
        ...

    def current_position(self) -> int:
        """Where the stream is."""
        ...


def _no_notification(aggregate_type: str, kind: str, data: dict[str, Any] | None = None) -> None:
    pass


class ChunkedSnapshot:
    """Drives the snapshot of a queue of tables, one chunk window at a time.

    Thread: the task thread (called from ``poll`` and from the decoder's hooks).
    """

    def __init__(
        self,
        stream: ChangeStream,
        reader: SnapshotReader,
        describe: Callable[[str], Any],
        *,
        chunk_size: int,
        incremental_chunk_size: int,
    ) -> None:
        self.stream = stream
        self.reader = reader
        #: The captured table of a ``schema.table`` name (a :class:`CapturedTable`; ``None``: gone).
        self.describe = describe
        self.chunk_size = chunk_size
        self.incremental_chunk_size = incremental_chunk_size
        self.pending: list[list[str]] = []  # [qualified table, kind]
        self.last_key: list[str] | None = None
        self.window: ChunkWindow | None = None
        self.rows_emitted = 0
        #: Rows of each table (``schema.table``) its snapshot chunks emitted (Debezium's RowsScanned).
        self.rows_scanned: dict[str, int] = {}
        self._table_rows = 0  # rows of the table being read
        self.maximum_key: str | None = None  # of the table an incremental snapshot reads
        self._begun: dict[str, int] = {}  # tables of the initial (blocking) snapshot whose first chunk was emitted
        #: The initial snapshot's point, ``(position, txId)``, that all its rows carry (as Debezium's
        #: rows carry their snapshot transaction's); taken when its first chunk is opened.
        self.point: tuple[int, int] | None = None
        self._run_id = uuid.uuid4().hex[:12]
        self._count = 0
        self._tracking: ChunkWindow | None = None  # the window the stream is inside (L seen, H not yet)
        self._prefetched: tuple[ChunkWindow, int, Any] | None = None  # query sent, not read
        self._retry_at = 0.0  # (monotonic) no chunk is opened before it: the last one was deferred
        self._deferred = 0  # chunks deferred in a row
        #: Incremental chunking is paused (``pause-snapshot``); initial and blocking tables go on.
        self.paused = False
        #: A ``stop-snapshot`` dropped tables of the last snapshot (Debezium's ``SnapshotAborted``);
        #: cleared when a snapshot starts again.
        self.aborted = False
        #: Where snapshot notifications go: ``(aggregate_type, type, additional_data)``.
        self.notify: Callable[..., None] = _no_notification

    # -- state -------------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        return bool(self.pending)

    @property
    def blocking(self) -> bool:
        """The next table is a blocking snapshot's (read with streaming paused)."""
        return bool(self.pending) and self.pending[0][1] == BLOCKING and self.window is None

    @property
    def can_start(self) -> bool:
        """A chunk may be opened now (something pending, no window open, not paused)."""
        if not self.pending or self.window is not None or (self.paused and self.pending[0][1] == INCREMENTAL):
            return False
        return not self._deferred or time.monotonic() >= self._retry_at

    def progress(self) -> dict[str, Any] | None:
        """The offset keys that let a restart continue (``None`` once nothing is pending)."""
        if not self.pending:
            return None
        initial = any(kind == INITIAL for _, kind in self.pending)
        progress: dict[str, Any] = {
            "snapshot_tables": [list(p) for p in self.pending],
            "snapshot_key": self.last_key,
        }
        if initial:
            progress["snapshot"] = True
            progress["last_snapshot_record"] = False
        return progress

    def restore(self, offset: dict[str, Any]) -> None:
        tables = offset.get("snapshot_tables")
        if tables:
            self.pending = [list(t) for t in tables]
            key = offset.get("snapshot_key")
            self.last_key = list(key) if key else None
            log.info("Resuming snapshot of %s after key %s", [t for t, _ in self.pending], self.last_key)
        self.stream.snapshot_progress = self.progress()

    def add(self, tables: list[str], kind: str) -> None:
        queued = {t for t, _ in self.pending}
        added = [t for t in tables if t not in queued]
        self.pending.extend([t, kind] for t in added)
        self.stream.snapshot_progress = self.progress()
        if added:
            self.aborted = False
            self._begun.pop(kind, None)
            self.notify(_AGGREGATE[kind], "STARTED", {"data_collections": added} if kind == INCREMENTAL else None)

    def pause(self) -> None:
        """``pause-snapshot``: no new incremental chunk until :meth:`resume`."""
        if not self.paused and any(k == INCREMENTAL for _, k in self.pending):
            self.paused = True
            self.notify(_AGGREGATE[INCREMENTAL], "PAUSED")

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self.notify(_AGGREGATE[INCREMENTAL], "RESUMED")

    def stop(self, tables: list[str] | None = None) -> None:
        """``stop-snapshot``: drop the incremental snapshot of ``tables`` (every pending table when ``None``)."""
        current = self.pending[0][0] if self.pending else None
        if tables is None:
            aborted = [t for t, _ in self.pending]
        else:
            aborted = [t for t, k in self.pending if t in tables and k == INCREMENTAL]
        self.pending = [p for p in self.pending if p[0] not in aborted]
        if current is not None and current in aborted:
            self.window = None
            self._tracking = None
            self.stream.track_changes(None)
            self.last_key = None
            self._table_rows = 0
            self._drop_prefetch()
        if not any(k == INCREMENTAL for _, k in self.pending):
            self.paused = False
        self.stream.snapshot_progress = self.progress()
        if aborted:
            self.aborted = True
            self.notify(_AGGREGATE[INCREMENTAL], "ABORTED", {"data_collections": aborted})

    def reset_window(self) -> None:
        """The stream was lost: a chunk not emitted yet is read again. The task closes the snapshot
        connection, which ends a prefetched chunk's query."""
        self.window = None
        self._tracking = None
        self.stream.track_changes(None)
        self._prefetched = None

    def _drop_prefetch(self) -> None:
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None:
            self.reader.discard(prefetched[2])

    # -- chunks --------------------------------------------------------------------------------------

    def blocking_chunk(self, conn: Any) -> None:
        """One chunk of a blocking snapshot, read and emitted at once: streaming is paused, so no
        change can interleave with it and no watermark is awaited."""
        name = self.pending[0][0]
        table = self.describe(name)
        if table is None:
            log.warning("Blocking snapshot: table %s no longer exists; skipped", name)
            self._table_done()
            return
        window, size = self._open_chunk(conn, table, BLOCKING, self.last_key)
        try:
            self.reader.read_chunk(conn, window, size)
        except ChunkDeferred as exc:
            self._defer(window, exc)  # called again on the next poll (streaming stays paused)
            return
        self._deferred = 0
        self._emit(window, self.stream.current_position())

    def start_chunk(self, conn: Any) -> None:
        """Steps 1-3 for the next chunk (nothing if a window is open or nothing is pending).

        The query of the chunk after it is sent right away (its low watermark first) and read on
        the next call, so the database runs it while this chunk is emitted, converted and produced.
        ``conn`` serves the snapshot alone: a query sent ahead keeps it busy in between."""
        reader = self.reader
        while self.can_start and self.pending[0][1] != BLOCKING:
            prefetched, self._prefetched = self._prefetched, None
            if prefetched is not None and prefetched[2] is conn:
                window, size = prefetched[0], prefetched[1]
            else:
                name, kind = self.pending[0]
                if kind == INITIAL and self.point is None:
                    self.point = reader.take_point(conn)
                table = self.describe(name)
                if table is None:
                    log.warning("Snapshot: table %s no longer exists; skipped", name)
                    self._table_done()
                    continue
                if kind == INCREMENTAL and (self.last_key is None or self.maximum_key is None):
                    self.maximum_key = reader.maximum_key(conn, table)
                window, size = self._open_chunk(conn, table, kind, self.last_key)
            try:
                reader.read_chunk(conn, window, size)
            except ChunkDeferred as exc:
                self._defer(window, exc)
                return
            self._deferred = 0
            reader.high_watermark(conn, window)
            self.window = window
            if not window.exhausted and window.last_key is not None:
                next_window, next_size = self._open_chunk(conn, window.table, window.kind, window.last_key)
                self._prefetched = (next_window, next_size, conn)

    def _defer(self, window: ChunkWindow, reason: ChunkDeferred) -> None:
        """The chunk of ``window`` is dropped unread, to be opened again (with a new low watermark)
        after :data:`DEFERRED_RETRY_S`; its watermark is ignored when the stream reaches it."""
        if self._tracking is window:
            self._tracking = None
            self.stream.track_changes(None)
        self._deferred += 1
        self._retry_at = time.monotonic() + DEFERRED_RETRY_S
        level = logging.INFO if self._deferred == 1 else logging.DEBUG
        log.log(
            level, "Snapshot chunk of %s deferred (%d in a row): %s", window.table.qualified, self._deferred, reason
        )

    def _open_chunk(
        self, conn: Any, table: CapturedTable, kind: str, after_key: list[str] | None
    ) -> tuple[ChunkWindow, int]:
        """Step 1, then send the chunk's query (rows after ``after_key``) without reading it."""
        self._count += 1
        window = ChunkWindow(f"{self._run_id}:{self._count}", table, kind)
        window.first = after_key is None
        size = self.incremental_chunk_size if kind == INCREMENTAL else self.chunk_size
        self.reader.send_chunk(conn, window, size, after_key)
        return window, size

    # -- stream hooks --------------------------------------------------------------------------------

    def on_message(self, prefix: str, content: bytes, lsn: int) -> None:
        """A message in the stream at ``lsn``: a watermark opens or closes a window."""
        if prefix != WATERMARK_PREFIX:
            return
        text = content.decode()
        window = self.window
        prefetched = self._prefetched[0] if self._prefetched is not None else None
        for candidate in (window, prefetched):
            if candidate is not None and text == "L:" + candidate.id:
                candidate.open = True
                self._tracking = candidate
                self.stream.track_changes(self.on_change)  # only while a window is open: it runs per event
                return
        if window is not None and text == "H:" + window.id:
            self._emit(window, lsn)

    def on_change(self, table: Any, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        window = self._tracking
        if window is None or not window.open or table.oid != window.table.oid or not table.primary_key:
            return
        for row in (before, after):
            if row is not None:
                key = table.pk_of(row)
                if key is not None:
                    window.changed.add(tuple(key.values()))

    def _emit(self, window: ChunkWindow, lsn: int) -> None:
        """Step 5: the chunk's remaining rows become ``r`` events at the high watermark.

        The stream events decoded before the watermark are finished first (their offset does not
        yet include this chunk); the chunk follows as one columnar batch whose offset does."""
        stream = self.stream
        self.window = None
        self._tracking = None
        stream.track_changes(None)
        stream.keepalive(lsn)  # the watermark sits between transactions
        before = stream.finish_batch()
        if before:
            stream.outbox.append(before)
        if window.last_key is not None:
            self.last_key = window.last_key
        if window.exhausted:
            self._table_done()
        kind_done = not any(k == window.kind for _, k in self.pending)
        finished_initial = window.kind != INCREMENTAL and kind_done
        markers = self._markers(window, finished_initial)
        stream.snapshot_progress = self.progress()
        offset = stream.offset_at(lsn)
        point = self.point if window.kind == INITIAL else None
        batch = stream.emitter.chunk_events(window, lsn, time.time_ns(), offset, markers, point)
        rows = len(batch)
        self.rows_emitted += rows
        qualified = window.table.qualified
        self.rows_scanned[qualified] = self.rows_scanned.get(qualified, 0) + rows
        self._table_rows += rows
        if finished_initial:
            log.info("%s snapshot finished: %d rows", window.kind.capitalize(), self.rows_emitted)
        if rows:
            stream.outbox.append(batch)
        self._notify_chunk(window, kind_done)

    def _notify_chunk(self, window: ChunkWindow, kind_done: bool) -> None:
        """Debezium's notifications for an emitted chunk: IN_PROGRESS (each incremental chunk, each
        table's first initial chunk), TABLE_SCAN_COMPLETED at a table's end, COMPLETED at the last."""
        aggregate, name = _AGGREGATE[window.kind], window.table.qualified
        collections = [name] + [t for t, k in self.pending if k == window.kind and t != name]
        if window.kind == INCREMENTAL:
            key = shown_key(window.last_key)
            self.notify(
                aggregate,
                "IN_PROGRESS",
                {
                    "data_collections": collections,
                    "current_collection_in_progress": name,
                    "maximum_key": self.maximum_key,
                    "last_processed_key": key,
                },
            )
        elif window.first:
            self.notify(
                aggregate, "IN_PROGRESS", {"data_collections": collections, "current_collection_in_progress": name}
            )
        if window.exhausted:
            data = {"data_collections": name, "scanned_collection": name, "total_rows_scanned": self._table_rows}
            self._table_rows = 0
            self.notify(aggregate, "TABLE_SCAN_COMPLETED", {**data, "status": "SUCCEEDED"})
        if kind_done and window.exhausted:
            self.notify(aggregate, "COMPLETED")

    def _markers(self, window: ChunkWindow, finished_initial: bool) -> tuple[str | None, str | None]:
        """Debezium's ``source.snapshot`` of the chunk's first and last rows, where they differ from
        ``true``: the first row of a table's first chunk, the last row of its last chunk."""
        if window.kind == INCREMENTAL:
            return None, None
        first = None
        if window.first:
            first = "first" if self._begun.get(window.kind, 0) == 0 else "first_in_data_collection"
            self._begun[window.kind] = self._begun.get(window.kind, 0) + 1
        last = ("last" if finished_initial else "last_in_data_collection") if window.exhausted else None
        return first, last

    def _table_done(self) -> None:
        if self.pending:
            done = self.pending.pop(0)
            log.info("Snapshot of %s done", done[0])
        self.last_key = None
