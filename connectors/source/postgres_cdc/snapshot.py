"""The PostgreSQL side of the chunked snapshot (:mod:`sluice.connectors.cdc.snapshot`): its queries.

* the watermarks are non-transactional logical decoding messages (``pg_logical_emit_message``),
  which pgoutput sends among the transactions in commit order, with no table writes;
* a chunk is ``COPY (SELECT … WHERE (pk) > (last) ORDER BY pk LIMIT n) TO STDOUT``, sent in one
  simple-protocol message behind its low watermark and the wait for commits that precede it
  (:data:`_AWAIT_COMMITS_SQL`; one round trip), and read as text: decoded into rows, or kept as
  text when the native encoder may serialize it as it is;
* the initial snapshot's point is the current WAL position and a transaction id.

Throughput: the high watermark is flushed with the statement that writes it (else the stream sees
it only at the WAL writer's next flush, up to 200 ms per chunk); the shared snapshot sends the
next chunk's query as soon as a chunk is read, on a connection of the snapshot's own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, cast

import psycopg
from psycopg import Connection, pq, sql

from sluice.connectors.cdc.chunks import ChunkWindow, shown_key
from sluice.connectors.cdc.snapshot import WATERMARK_PREFIX, ChunkDeferred, ChunkedSnapshot
from sluice.connectors.source.postgres_cdc.copy_text import copy_out, copy_result, lines
from sluice.connectors.source.postgres_cdc.decoder import ChangeDecoder
from sluice.connectors.source.postgres_cdc.tables import Table, unescape_copy

log = logging.getLogger(__name__)

# copy_out: the backfill's tests read a table's COPY text as the snapshot does.
__all__ = ["PostgresSnapshotReader", "copy_out", "copy_result", "postgres_snapshot"]

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


#: How long the server waits for commits that precede a low watermark before the chunk is deferred.
_COMMIT_WAIT = "100 milliseconds"

#: SQLSTATE of the deferral raised by :data:`_AWAIT_COMMITS_SQL`.
_DEFERRED_STATE = "SLW01"

#: Run between the low watermark and the chunk's COPY. PostgreSQL writes a commit record (which the
#: stream decodes) before the transaction leaves the proc array, and only then do new snapshots see
#: it; in between (a WAL flush, a synchronous standby's answer) a commit that precedes the watermark
#: in the stream is invisible to the chunk, which would read the row as it was before and emit that
#: after the streamed change. So the block waits until every transaction that holds an ID just after
#: the watermark has left the proc array (a snapshot's in-progress list would not do: a transaction
#: committing with the newest ID lies beyond the snapshot's ``xmax``, not in the list). A transaction
#: seen idle in its session is skipped: it was not committing, so its commit (if any) follows the
#: watermark and falls inside the window. Past :data:`_COMMIT_WAIT` only a commit waiting for a
#: synchronous standby defers the chunk; a long statement (not committing) is no longer waited for,
#: so a long batch job does not stall snapshots. With no transaction running it is one look at the
#: proc array. (A role that may not see other sessions' states — without ``pg_read_all_stats`` —
#: waits for idle transactions too, and cannot see a standby wait.)
#: (``pg_stat_get_activity``, not the view: planning the view's joins would double the block's cost.)
#: READ COMMITTED gives the COPY a snapshot taken after the block. Not covered: a prepared
#: transaction's ``COMMIT PREPARED`` (its ID belongs to no session).
_AWAIT_COMMITS_SQL = f"""DO $sluice$
DECLARE
  running text[] := ARRAY(SELECT backend_xid::text FROM pg_stat_get_activity(NULL)
    WHERE backend_xid IS NOT NULL AND NOT coalesce(state LIKE 'idle in transaction%', false));
  deadline timestamptz := clock_timestamp() + interval '{_COMMIT_WAIT}';
BEGIN
  WHILE cardinality(running) > 0 LOOP
    IF clock_timestamp() > deadline THEN
      -- Past the wait only a commit held up (by a synchronous standby) can still hide from the chunk:
      -- defer the chunk for those; a long statement that is not committing holds nothing back.
      IF EXISTS (SELECT 1 FROM pg_stat_get_activity(NULL)
                 WHERE backend_xid::text = ANY(running) AND wait_event = 'SyncRep') THEN
        RAISE EXCEPTION 'commits % are still in progress', running USING ERRCODE = '{_DEFERRED_STATE}';
      END IF;
      EXIT;
    END IF;
    PERFORM pg_sleep(0.001);
    PERFORM pg_stat_clear_snapshot();  -- else the session keeps its first look at the backends
    running := ARRAY(SELECT x FROM unnest(running) AS x WHERE x IN (
      SELECT backend_xid::text FROM pg_stat_get_activity(NULL)
      WHERE backend_xid IS NOT NULL AND NOT coalesce(state LIKE 'idle in transaction%', false)));
  END LOOP;
END $sluice$"""


def postgres_snapshot(
    decoder: ChangeDecoder, describe: Callable[[str], Table | None], *, chunk_size: int, incremental_chunk_size: int
) -> ChunkedSnapshot:
    """The chunked snapshot of the tables ``describe`` names, deduplicated against ``decoder``'s stream."""
    return ChunkedSnapshot(
        decoder,
        PostgresSnapshotReader(decoder),
        describe,
        chunk_size=chunk_size,
        incremental_chunk_size=incremental_chunk_size,
    )


class PostgresSnapshotReader:
    """The snapshot's queries on its own connection (:class:`~sluice.connectors.cdc.snapshot.SnapshotReader`).
    Thread: the task thread."""

    def __init__(self, decoder: ChangeDecoder) -> None:
        self.decoder = decoder
        self._type_names: dict[int, str] = {}

    def take_point(self, conn: Connection[Any]) -> tuple[int, int]:
        row = conn.execute("SELECT (pg_current_wal_lsn() - '0/0')::bigint, txid_current()").fetchone()
        assert row is not None
        point = (int(row[0]), int(row[1]))
        # The first transaction streamed after the snapshot names this point as its last commit.
        self.decoder.sequence_lsn = max(self.decoder.sequence_lsn, point[0])
        return point

    @staticmethod
    def maximum_key(conn: Connection[Any], table: Table) -> str | None:
        """The table's largest primary key now, as Debezium's notifications show it (``[9, 'b']``)."""
        if not table.primary_key:
            return None
        keys = sql.SQL(", ").join(sql.Identifier(k) for k in table.primary_key)
        order = sql.SQL(", ").join(sql.SQL("{} DESC").format(sql.Identifier(k)) for k in table.primary_key)
        target = sql.Identifier(table.schema_name, table.name)
        row = conn.execute(sql.SQL("SELECT {} FROM {} ORDER BY {} LIMIT 1").format(keys, target, order)).fetchone()
        return shown_key([str(v) for v in row]) if row else None

    def send_chunk(self, conn: Connection[Any], window: ChunkWindow, size: int, after_key: list[str] | None) -> None:
        """The low watermark and the chunk's query (rows after ``after_key``), sent without reading."""
        table = cast(Table, window.table)
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
        # The low watermark, the wait for the commits before it and the query go out as one
        # simple-protocol message (one round trip); the watermark is non-transactional, so it is in
        # the WAL before the COPY takes its snapshot.
        low = sql.SQL("SELECT pg_logical_emit_message(false, {}, {})").format(
            sql.Literal(WATERMARK_PREFIX), sql.Literal("L:" + window.id)
        )
        message = sql.SQL("{}; {}; COPY ({}) TO STDOUT").format(low, sql.SQL(_AWAIT_COMMITS_SQL), query)
        conn.pgconn.send_query(message.as_bytes(conn))

    def _type_name(self, conn: Connection[Any], oid: int) -> str:
        """A key column's type name, for casting the resume bound (looked up once per type)."""
        name = self._type_names.get(oid)
        if name is None:
            row = conn.execute("SELECT format_type(%s, NULL)", (oid,)).fetchone()
            name = self._type_names[oid] = str(row[0]) if row else "text"
        return name

    def read_chunk(self, conn: Connection[Any], window: ChunkWindow, size: int) -> None:
        """The chunk's rows with the key to continue after: decoded, or kept as COPY text when the
        native encoder may take the chunk (:meth:`ChunkWindow.decode` decodes it if not)."""
        table = cast(Table, window.table)
        pk = table.primary_key
        _await_commits_result(conn)
        text = copy_result(conn)
        window.keep_raw(text, lambda raw: list(map(table.from_copy, lines(raw))))
        if not self.decoder.emitter.defers_decoding(table):
            window.decode()  # else only if the encoder cannot take the chunk
        if pk:
            if text:
                names = [c.name for c in table.included_columns]
                fields = text[:-1].rsplit(b"\n", 1)[-1].split(b"\t")  # the last row (each ends with \n)
                window.last_key = [unescape_copy(fields[names.index(k)]).decode() for k in pk]
            window.exhausted = text.count(b"\n") < size
        else:  # no key: nothing to deduplicate by
            window.exhausted = True

    @staticmethod
    def high_watermark(conn: Connection[Any], window: ChunkWindow) -> None:
        conn.execute(_HIGH_WATERMARK_SQL, (WATERMARK_PREFIX, "H:" + window.id))

    @staticmethod
    def discard(conn: Connection[Any]) -> None:
        try:
            _await_commits_result(conn)
            copy_result(conn)  # read and discard: the connection is usable again
        except (psycopg.Error, ChunkDeferred) as exc:
            log.debug("Discarding a prefetched snapshot chunk failed: %s", exc)


def _await_commits_result(conn: Connection[Any]) -> None:
    """Read the results of a chunk's low watermark and of :data:`_AWAIT_COMMITS_SQL`, leaving its
    COPY's to :func:`copy_result`. A deferral (or a failure) ends the message: its results are
    drained, so the connection is usable again."""
    pgconn = conn.pgconn
    for _ in range(2):
        result = pgconn.get_result()
        if result is not None and result.status in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
            continue
        message = (result.error_message if result is not None else pgconn.error_message).decode(errors="replace")
        state = result.error_field(pq.DiagnosticField.SQLSTATE) if result is not None else None
        while pgconn.get_result() is not None:
            pass
        if state == _DEFERRED_STATE.encode():
            raise ChunkDeferred(message.strip())
        raise psycopg.DatabaseError(f"snapshot query failed: {message.strip()}")
