"""Resumable snapshots in primary-key chunks, deduplicated against the stream (DBLog watermarks).

Both the initial snapshot and on-demand (``execute-snapshot`` signal) snapshots work the same way,
while streaming continues:

1. write a low watermark into the WAL (a non-transactional logical message, so it takes its place
   among transactions in commit order, with no table writes);
2. read the next chunk: ``COPY (SELECT … WHERE pk > last ORDER BY pk LIMIT n) TO STDOUT``;
3. write a high watermark;
4. keep streaming; any change to a row of the chunk between the two watermarks drops that row from
   the chunk (the stream carries a state at least as new);
5. at the high watermark, emit the rest of the chunk as ``r`` events, in stream order.

The offset of every event carries the snapshot's progress (tables left, last key read), so after a
crash the snapshot continues from the last chunk that was delivered, not from the start.

Throughput: the high watermark is flushed with the statement that writes it (else the stream sees
it only at the WAL writer's next flush, up to 200 ms per chunk), and steps 1-2 of the next chunk
are sent as soon as a chunk is read, on a connection of the snapshot's own, so PostgreSQL runs that
query while this chunk is emitted, converted and produced. Rows are kept as lists; the stream's
changes inside a window are noted by key and dropped only when the chunk is emitted.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import Connection, sql

from sluice.connectors.api import SourceRecordBatch
from sluice.connectors.source.postgres_cdc.copy_text import copy_out, copy_result, lines
from sluice.connectors.source.postgres_cdc.decoder import ChangeDecoder
from sluice.connectors.source.postgres_cdc.source_block import CONNECTOR, VERSION
from sluice.connectors.source.postgres_cdc.tables import Table, unescape_copy

log = logging.getLogger(__name__)

__all__ = ["BLOCKING", "INCREMENTAL", "INITIAL", "ChunkedSnapshot", "ChunkWindow", "copy_out", "copy_result"]

WATERMARK_PREFIX = "sluice-cdc-watermark"

INITIAL = "initial"
INCREMENTAL = "incremental"
#: An ``execute-snapshot`` of type ``blocking``: streaming pauses while these tables are read.
BLOCKING = "blocking"

_AGGREGATE = {INCREMENTAL: "Incremental Snapshot", INITIAL: "Initial Snapshot", BLOCKING: "Initial Snapshot"}


def _no_notification(aggregate_type: str, kind: str, data: dict[str, Any] | None = None) -> None:
    pass


#: The high watermark, flushed. A non-transactional message is WAL-logged but not flushed, and the
#: walsender only sends flushed WAL: without a flush the stream reaches the watermark only when
#: the WAL writer next flushes (``wal_writer_delay``, 200 ms) or another transaction commits, and
#: every chunk of an idle database's snapshot waited that long. ``txid_current()`` gives the
#: statement's transaction an ID, so its commit writes (and, with ``synchronous_commit`` set
#: locally for it, flushes) a commit record behind the message. The transaction changes no table:
#: pgoutput leaves it out of the stream (PostgreSQL 15+; older servers send an empty BEGIN/COMMIT).
_HIGH_WATERMARK_SQL = (
    "SELECT set_config('synchronous_commit', 'local', true), pg_logical_emit_message(false, %s, %s), txid_current()"
)


class ChunkWindow:
    """One chunk between its watermarks.

    The chunk's rows stay in read order as two parallel lists (keys, values); a row the stream
    changes while the window is open is only noted by its key (``changed``), and dropped when the
    chunk is emitted. So reading a chunk costs no per-row lookup structure, and emitting one with
    no concurrent changes no per-row test."""

    def __init__(self, window_id: str, table: Table, kind: str) -> None:
        self.id = window_id
        self.table = table
        self.kind = kind
        self.keys: list[dict[str, Any] | None] = []
        self.values: list[dict[str, Any]] = []
        self.changed: set[tuple[Any, ...]] = set()
        #: The chunk's COPY text while its rows are not decoded yet (the native encoder may take it).
        self.text: bytes | None = None
        self.last_key: list[str] | None = None
        self.exhausted = False
        self.open = False
        #: The first chunk of its table (read from the start, not after a key).
        self.first = False

    def add(self, key: dict[str, Any] | None, value: dict[str, Any]) -> None:
        self.keys.append(key)
        self.values.append(value)

    def decode(self) -> None:
        """Decode the rows kept as COPY text (see :attr:`text`)."""
        if self.text is None:
            return
        table = self.table
        self.values = list(map(table.from_copy, lines(self.text)))
        self.keys = list(map(table.key_of, self.values)) if table.key_schema is not None else [None] * len(self.values)
        self.text = None

    def rows(self) -> tuple[list[dict[str, Any] | None], list[dict[str, Any]]]:
        """The (keys, values) left after dropping the rows the stream changed."""
        self.decode()
        if not self.changed:
            return self.keys, self.values
        changed = self.changed
        pk_of = self.table.pk_of
        if pk_of is self.table.key_of:
            kept = [(k, v) for k, v in zip(self.keys, self.values) if k is None or tuple(k.values()) not in changed]
        else:  # message.key.columns: rows are told apart by their primary key, not the event key
            kept = [(k, v) for k, v in zip(self.keys, self.values) if tuple((pk_of(v) or {}).values()) not in changed]
        return [k for k, _ in kept], [v for _, v in kept]


class ChunkedSnapshot:
    """Drives the snapshot of a queue of tables, one chunk window at a time.

    Thread: the task thread (called from ``poll`` and from the decoder's hooks).
    """

    def __init__(
        self,
        decoder: ChangeDecoder,
        describe: Callable[[str], Table | None],
        *,
        chunk_size: int,
        incremental_chunk_size: int,
    ) -> None:
        self.decoder = decoder
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
        #: The initial snapshot's point, ``(lsn, txId)``, that all its rows carry (as Debezium's
        #: rows carry their snapshot transaction's); taken when its first chunk is opened.
        self.point: tuple[int, int] | None = None
        self._run_id = uuid.uuid4().hex[:12]
        self._count = 0
        self._tracking: ChunkWindow | None = None  # the window the stream is inside (L seen, H not yet)
        self._prefetched: tuple[ChunkWindow, int, Connection[Any]] | None = None  # query sent, not read
        self._type_names: dict[int, str] = {}
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
        return bool(self.pending) and self.window is None and not (self.paused and self.pending[0][1] == INCREMENTAL)

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
        self.decoder.snapshot_progress = self.progress()

    def add(self, tables: list[str], kind: str) -> None:
        queued = {t for t, _ in self.pending}
        added = [t for t in tables if t not in queued]
        self.pending.extend([t, kind] for t in added)
        self.decoder.snapshot_progress = self.progress()
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
            self.decoder.on_change = None
            self.last_key = None
            self._table_rows = 0
            self._drop_prefetch()
        if not any(k == INCREMENTAL for _, k in self.pending):
            self.paused = False
        self.decoder.snapshot_progress = self.progress()
        if aborted:
            self.aborted = True
            self.notify(_AGGREGATE[INCREMENTAL], "ABORTED", {"data_collections": aborted})

    def blocking_chunk(self, conn: Connection[Any]) -> None:
        """One chunk of a blocking snapshot, read and emitted at once: streaming is paused, so no
        change can interleave with it and no watermark is awaited."""
        name = self.pending[0][0]
        table = self.describe(name)
        if table is None:
            log.warning("Blocking snapshot: table %s no longer exists; skipped", name)
            self._table_done()
            return
        window, size = self._open_chunk(conn, table, BLOCKING, self.last_key)
        self._read_chunk(conn, window, size)
        self._emit(window, self.decoder.position[1])

    def reset_window(self) -> None:
        """The stream was lost: a chunk not emitted yet is read again. The task closes the snapshot
        connection, which ends a prefetched chunk's query."""
        self.window = None
        self._tracking = None
        self.decoder.on_change = None
        self._prefetched = None

    def _type_name(self, conn: Connection[Any], oid: int) -> str:
        """A key column's type name, for casting the resume bound (looked up once per type)."""
        name = self._type_names.get(oid)
        if name is None:
            row = conn.execute("SELECT format_type(%s, NULL)", (oid,)).fetchone()
            name = self._type_names[oid] = str(row[0]) if row else "text"
        return name

    def _drop_prefetch(self) -> None:
        prefetched, self._prefetched = self._prefetched, None
        if prefetched is not None:
            try:
                copy_result(prefetched[2])  # read and discard: the connection is usable again
            except psycopg.Error as exc:
                log.debug("Discarding a prefetched snapshot chunk failed: %s", exc)

    # -- chunks --------------------------------------------------------------------------------------

    def start_chunk(self, conn: Connection[Any]) -> None:
        """Steps 1-3 for the next chunk (nothing if a window is open or nothing is pending).

        The query of the chunk after it is sent right away (its low watermark first) and read on
        the next call, so PostgreSQL runs it while this chunk is emitted, converted and produced.
        ``conn`` serves the snapshot alone: a prefetched ``COPY`` keeps it busy in between."""
        while self.can_start and self.pending[0][1] != BLOCKING:
            prefetched, self._prefetched = self._prefetched, None
            if prefetched is not None and prefetched[2] is conn:
                window, size = prefetched[0], prefetched[1]
            else:
                name, kind = self.pending[0]
                if kind == INITIAL and self.point is None:
                    self._take_point(conn)
                table = self.describe(name)
                if table is None:
                    log.warning("Snapshot: table %s no longer exists; skipped", name)
                    self._table_done()
                    continue
                if kind == INCREMENTAL and (self.last_key is None or self.maximum_key is None):
                    self.maximum_key = self._maximum_key(conn, table)
                window, size = self._open_chunk(conn, table, kind, self.last_key)
            self._read_chunk(conn, window, size)
            conn.execute(_HIGH_WATERMARK_SQL, (WATERMARK_PREFIX, "H:" + window.id))
            self.window = window
            if not window.exhausted and window.last_key is not None:
                next_window, next_size = self._open_chunk(conn, window.table, window.kind, window.last_key)
                self._prefetched = (next_window, next_size, conn)

    @staticmethod
    def _maximum_key(conn: Connection[Any], table: Table) -> str | None:
        """The table's largest primary key now, as Debezium's notifications show it (``[9, 'b']``)."""
        if not table.primary_key:
            return None
        keys = sql.SQL(", ").join(sql.Identifier(k) for k in table.primary_key)
        order = sql.SQL(", ").join(sql.SQL("{} DESC").format(sql.Identifier(k)) for k in table.primary_key)
        target = sql.Identifier(table.schema_name, table.name)
        row = conn.execute(sql.SQL("SELECT {} FROM {} ORDER BY {} LIMIT 1").format(keys, target, order)).fetchone()
        return _shown_key([str(v) for v in row]) if row else None

    def _take_point(self, conn: Connection[Any]) -> None:
        row = conn.execute("SELECT (pg_current_wal_lsn() - '0/0')::bigint, txid_current()").fetchone()
        assert row is not None
        self.point = (int(row[0]), int(row[1]))
        # The first transaction streamed after the snapshot names this point as its last commit.
        self.decoder.sequence_lsn = max(self.decoder.sequence_lsn, self.point[0])

    def _open_chunk(
        self, conn: Connection[Any], table: Table, kind: str, after_key: list[str] | None
    ) -> tuple[ChunkWindow, int]:
        """Step 1, then send the chunk's query (rows after ``after_key``) without reading it."""
        self._count += 1
        window = ChunkWindow(f"{self._run_id}:{self._count}", table, kind)
        window.first = after_key is None
        size = self.incremental_chunk_size if kind == INCREMENTAL else self.chunk_size
        columns = table.included_columns
        select = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns)
        target = sql.Identifier(table.schema_name, table.name)
        pk = table.primary_key
        if pk:
            keys = sql.SQL(", ").join(sql.Identifier(k) for k in pk)
            query = sql.SQL("SELECT {} FROM {}").format(select, target)
            if after_key is not None:
                types = {c.name: c.type_oid for c in columns}
                bound = sql.SQL(", ").join(
                    sql.SQL("{}::{}").format(sql.Literal(v), sql.SQL(self._type_name(conn, types[k])))
                    for k, v in zip(pk, after_key)
                )
                query = sql.SQL("{} WHERE ({}) > ({})").format(query, keys, bound)
            query = sql.SQL("{} ORDER BY {} LIMIT {}").format(query, keys, sql.Literal(size))
        else:  # no key to chunk or deduplicate by: one read of the whole table
            query = sql.SQL("SELECT {} FROM {}").format(select, target)
        # The low watermark and the query go out as one simple-protocol message (one round trip);
        # the watermark is non-transactional, so it is in the WAL before the COPY takes its snapshot.
        low = sql.SQL("SELECT pg_logical_emit_message(false, {}, {})").format(
            sql.Literal(WATERMARK_PREFIX), sql.Literal("L:" + window.id)
        )
        conn.pgconn.send_query(sql.SQL("{}; COPY ({}) TO STDOUT").format(low, query).as_bytes(conn))
        return window, size

    def _read_chunk(self, conn: Connection[Any], window: ChunkWindow, size: int) -> None:
        """Step 2: the chunk's rows with the key to continue after: decoded, or kept as COPY text
        when the native encoder may take the chunk (:meth:`ChunkWindow.decode` decodes it if not)."""
        table = window.table
        pk = table.primary_key
        window.text = text = copy_result(conn)
        decoder = self.decoder
        if decoder.native is None or decoder.encoder(table) is None:
            window.decode()  # else only if the encoder cannot take the chunk
        if pk:
            if text:
                names = [c.name for c in table.included_columns]
                fields = text[:-1].rsplit(b"\n", 1)[-1].split(b"\t")  # the last row (each ends with \n)
                window.last_key = [unescape_copy(fields[names.index(k)]).decode() for k in pk]
            window.exhausted = text.count(b"\n") < size
        else:  # no key: nothing to deduplicate by
            window.exhausted = True

    # -- stream hooks --------------------------------------------------------------------------------

    def on_message(self, prefix: str, content: bytes, lsn: int) -> None:
        if prefix != WATERMARK_PREFIX:
            return
        text = content.decode()
        window = self.window
        prefetched = self._prefetched[0] if self._prefetched is not None else None
        for candidate in (window, prefetched):
            if candidate is not None and text == "L:" + candidate.id:
                candidate.open = True
                self._tracking = candidate
                self.decoder.on_change = self.on_change  # only while a window is open: it runs per event
                return
        if window is not None and text == "H:" + window.id:
            self._emit(window, lsn)

    def on_change(self, table: Table, before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
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
        decoder = self.decoder
        self.window = None
        self._tracking = None
        decoder.on_change = None
        decoder.keepalive(lsn)  # the watermark sits between transactions
        before = decoder.finish_batch()
        if before:
            decoder.outbox.append(before)
        if window.last_key is not None:
            self.last_key = window.last_key
        if window.exhausted:
            self._table_done()
        kind_done = not any(k == window.kind for _, k in self.pending)
        finished_initial = window.kind != INCREMENTAL and kind_done
        markers = self._markers(window, finished_initial)
        decoder.snapshot_progress = self.progress()
        offset = decoder.offset(None, lsn)
        now = time.time_ns()
        batch = None
        if window.text is not None and not window.changed:
            batch = self._encode_chunk(window, lsn, now, offset, markers)
        if batch is None:
            batch = self._chunk_events(window, lsn, now, offset, markers)
        rows = len(batch)
        self.rows_emitted += rows
        qualified = window.table.qualified
        self.rows_scanned[qualified] = self.rows_scanned.get(qualified, 0) + rows
        self._table_rows += rows
        if finished_initial:
            log.info("%s snapshot finished: %d rows", window.kind.capitalize(), self.rows_emitted)
        if rows:
            decoder.outbox.append(batch)
        self._notify_chunk(window, kind_done)

    def _notify_chunk(self, window: ChunkWindow, kind_done: bool) -> None:
        """Debezium's notifications for an emitted chunk: IN_PROGRESS (each incremental chunk, each
        table's first initial chunk), TABLE_SCAN_COMPLETED at a table's end, COMPLETED at the last."""
        aggregate, name = _AGGREGATE[window.kind], window.table.qualified
        collections = [name] + [t for t, k in self.pending if k == window.kind and t != name]
        if window.kind == INCREMENTAL:
            key = _shown_key(window.last_key)
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

    def _chunk_events(
        self, window: ChunkWindow, lsn: int, now: int, offset: dict[str, Any], markers: tuple[str | None, str | None]
    ) -> SourceRecordBatch:
        """The chunk's ``r`` events built in Python, as one columnar batch."""
        decoder, table = self.decoder, window.table
        point = self.point if window.kind == INITIAL else None
        source = {
            "version": VERSION,
            "connector": CONNECTOR,
            "name": decoder.prefix,
            "ts_ms": now // 1_000_000,
            "snapshot": "incremental" if window.kind == INCREMENTAL else "true",
            "db": decoder.database,
            "sequence": None if point is None else f'[null,"{point[0]}"]',
            "ts_us": now // 1000,
            "ts_ns": now,
            "schema": table.schema_name,
            "table": table.name,
            "txId": None if point is None else point[1],
            "lsn": lsn if point is None else point[0],
            "xmin": None,
            "origin": None,
            "origin_lsn": None,
        }
        ts_ms, ts_us = now // 1_000_000, now // 1000
        keys, rows = window.rows()
        values = [
            {
                "before": None,
                "after": after,
                "source": source,
                "transaction": None,
                "op": "r",
                "ts_ms": ts_ms,
                "ts_us": ts_us,
                "ts_ns": now,
            }
            for after in rows
        ]
        for index, marker in _marked_rows(len(values), *markers):
            values[index] = {**values[index], "source": {**source, "snapshot": marker}}
        n = len(values)
        return SourceRecordBatch(
            table.topic,
            values,
            value_schema=table.envelope_schema,
            keys=keys if table.key_schema is not None else None,
            key_schema=table.key_schema,
            source_partition=decoder.partition,
            offsets_loader=lambda: [offset] * n,
            last_offset=offset,
        )

    def _encode_chunk(
        self, window: ChunkWindow, lsn: int, now: int, offset: dict[str, Any], markers: tuple[str | None, str | None]
    ) -> SourceRecordBatch | None:
        """The chunk's ``r`` events serialized natively, or ``None`` when a row needs the Python path."""
        decoder, table = self.decoder, window.table
        encoder = decoder.encoder(table)
        if encoder is None or window.text is None:
            return None
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        kind = "incremental" if window.kind == INCREMENTAL else "true"
        point = self.point if window.kind == INITIAL else None
        at, txid = (lsn, None) if point is None else point
        if not encoder.encode_copy(window.text, kind, markers[0], markers[1], at, txid, now, keys, values):
            return None
        window.text = None
        n = len(values)
        return SourceRecordBatch(
            table.topic,
            values,
            keys=keys,
            source_partition=decoder.partition,
            offsets_loader=lambda: [offset] * n,
            last_offset=offset,
            serialized=True,
        )

    def _table_done(self) -> None:
        if self.pending:
            done = self.pending.pop(0)
            log.info("Snapshot of %s done", done[0])
        self.last_key = None


#: Which marker a row that is both its chunk's first and last keeps, as Debezium decides.
_PRECEDENCE = ("last", "first", "last_in_data_collection", "first_in_data_collection")


def _marked_rows(rows: int, first: str | None, last: str | None) -> list[tuple[int, str]]:
    """``(row index, marker)`` of the rows whose ``source.snapshot`` is not the chunk's own."""
    if rows == 0:
        return []
    if rows == 1 and first is not None and last is not None:
        return [(0, min(first, last, key=_PRECEDENCE.index))]
    marked = [(0, first)] if first is not None else []
    return marked + ([(rows - 1, last)] if last is not None else [])


def _shown_key(key: Any) -> str | None:
    """A primary key as Debezium 3.6's notifications show it: the value of a one-column key
    (``2``), ``[9, b]`` for several columns."""
    if key is None:
        return None
    return str(key[0]) if len(key) == 1 else f"[{', '.join(key)}]"
