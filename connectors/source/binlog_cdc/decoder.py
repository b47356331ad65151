"""Binlog events → Debezium change events.

:meth:`BinlogDecoder.handle` takes each event the reader (:mod:`.reader`) decoded, in stream order:
it follows transactions and positions (:class:`~.positions.BinlogPosition`), learns the tables
from table map events (their shapes at that position from the schema history, or described from
``information_schema``, by :class:`~.schema.CapturedTables`), hands each DDL to the schema history
(:attr:`BinlogDecoder.on_ddl`, which returns its schema change events),
and turns each row of a captured table into a record in its
:class:`~sluice.connectors.cdc.emitter.ChangeBuffer` until a poll finishes the batch. Batches end
only between events, so a batch's offset never points into the middle of a row event. A rows
event's values come from the native row decoder (:mod:`.native_rows`) where it reads the table,
else from the library's decoding through :meth:`~.tables.Table.row`: the same values either way.

An update that changes the row's key is two events, as Debezium writes it: a delete of the old key
(and its tombstone), then a create of the new one.

The statement behind row events (MariaDB's annotate rows event, MySQL's rows query event, each
before the row events of one statement) is kept in :attr:`BinlogDecoder.query`;
:class:`QueryingBinlogDecoder` (``include.query``) puts it into each event's ``source.query`` until
the next one or the transaction's end, as Debezium does. MariaDB sends annotate rows events only
to a replica that asks for them (:mod:`.reader` does with ``include.query``), so they are not
counted in the offset's ``event``: a restart skips the same events whether they come or not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbAnnotateRowsEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    RowsQueryLogEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from sluice.connectors.api import Headers, Schema, SchemaAndValue, SourceRecord
from sluice.connectors.cdc.emitter import ChangeBuffer
from sluice.connectors.cdc.heartbeats import heartbeat_record
from sluice.connectors.source.binlog_cdc import native_rows
from sluice.connectors.source.binlog_cdc.positions import BinlogPosition
from sluice.connectors.source.binlog_cdc.source_block import VERSION
from sluice.connectors.source.binlog_cdc.tables import Table

#: ``table map columns → Table``: the captured table behind a table map event (``None``: not captured).
TableLookup = Callable[[str, str, list[str]], Table | None]
#: ``(statement, its default database, the event, where it starts, the position after it)`` → the
#: schema change events: ``(topic, key, key schema, value, value schema)`` each.
DdlHook = Callable[[str, str | None, Any, int, BinlogPosition], list[tuple[str, Any, Schema, Any, Schema]]]

_MARIADB_STANDALONE = 0x01  # a GTID event's flag: the statement is its own transaction (DDL)
_COMMIT = ("COMMIT", "XA COMMIT")


def _event_start(event: Any) -> int:
    """Where the event starts in its binlog file (its header holds where the next one starts)."""
    return int(event.packet.log_pos) - int(event.packet.event_size)


class BinlogDecoder(ChangeBuffer):
    """Decodes one binlog stream into records. ``lookup`` gives the captured table of a table map
    event. Thread: the task thread."""

    def __init__(
        self,
        *,
        connector: str,
        topic_prefix: str,
        partition: dict[str, Any],
        tombstones: bool,
        skipped_operations: set[str],
        lookup: TableLookup,
        position: BinlogPosition,
    ) -> None:
        super().__init__(partition)
        self.connector = connector
        self.prefix = topic_prefix
        self.tombstones = tombstones
        self.skipped = skipped_operations
        self.lookup = lookup
        self.position = position
        self.tables: dict[int, Table | None] = {}
        #: The native row decoders of the captured tables' table maps.
        self.native = native_rows.RowDecoders()
        #: The thread id of the current transaction's ``BEGIN`` (MySQL; MariaDB writes none).
        self.thread: int | None = None
        #: Commit time of the last transaction (microseconds), for MilliSecondsBehindSource.
        self.commit_us = 0
        #: Events handed over since the last :meth:`take_count` (for the poll's batch size).
        self.events = 0
        self._standalone = False
        self.now = (0, 0, 0)
        self._stamp_due = True
        # Snapshot hooks (:mod:`.snapshot`): the stream is at ``file``/``pos`` between transactions;
        # a row of a captured table changes; a row is inserted into the signal table (its values).
        self.on_position: Callable[[str, int], None] | None = None
        self.on_change: Callable[[Table, dict[str, Any] | None, dict[str, Any] | None], None] | None = None
        self.on_signal: Callable[[list[Any]], None] | None = None
        #: ``signal.data.collection`` as ``(database, table)``.
        self.signal_table: tuple[str, str] | None = None
        self._signal_ids: set[int] = set()
        #: The snapshot's offset keys, added to every offset (``None``: no snapshot pending).
        self.snapshot_progress: dict[str, Any] | None = None
        #: The schema history's hook for a DDL statement (:class:`~.schema_changes.SchemaChangeEvents`).
        self.on_ddl: DdlHook | None = None
        #: The statement behind the row events that follow (annotate rows / rows query event), if logged.
        self.query: str | None = None

    # -- the buffer's hooks ------------------------------------------------------------------------

    def current_offset(self) -> dict[str, Any]:
        offset = self.position.offset()
        if self.snapshot_progress is not None:
            offset.update(self.snapshot_progress)
        return offset

    def _reached(self, file: str, pos: int) -> None:
        """The stream is at ``file``/``pos``, between transactions (for the snapshot's watermarks)."""
        if self.on_position is not None and not self.position.in_transaction:
            self.on_position(file, pos)

    def batch_started(self) -> None:
        self._stamp_due = True

    # -- transaction boundaries --------------------------------------------------------------------

    def follow_transactions(self) -> None:
        """``transaction.boundary=connector``: mark each point of the pending events where the stream
        stands between transactions (after a commit and the schema change events of a DDL), so a
        poll can end there (:meth:`~sluice.connectors.cdc.emitter.ChangeBuffer.take_settled`). The
        bookkeeping wraps this instance's hook for such points only: a task without it pays nothing."""
        reached = self._reached

        def reached_followed(file: str, pos: int) -> None:
            reached(file, pos)
            if self.settled():
                self.transaction_settled()

        self._reached = reached_followed  # type: ignore[method-assign]

    def settled(self) -> bool:
        """Whether every event decoded belongs to a committed transaction: the stream is between
        transactions, and not replaying one that was partly delivered before a reconnect (whose
        first events are still to be skipped)."""
        position = self.position
        return not position.in_transaction and not position.skip_events

    def _stamp(self) -> None:
        """The envelope's processing time, taken when a transaction's first event is handled and
        at the first event of a batch, rather than per event."""
        now = time.time_ns()
        self.now = (now // 1_000_000, now // 1000, now)
        self._stamp_due = False

    def heartbeat(self, topic: str) -> SourceRecord:
        """A Debezium heartbeat record carrying the current position as its offset."""
        return heartbeat_record(topic, self.prefix, self.partition, self.current_offset())

    # -- events ------------------------------------------------------------------------------------

    def handle(self, event: Any) -> None:
        """One event of the stream, in order."""
        position = self.position
        if isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
            self._rows(event)
        elif isinstance(event, TableMapEvent):
            self._table_map(event)
        elif isinstance(event, (MariadbGtidEvent, GtidEvent)):
            position.ts_sec = event.timestamp
            position.server_id = event.packet.server_id
            self._reached(position.file, _event_start(event))
            position.begin(_event_start(event), event.gtid)
            self._stamp_due = True
            self.thread = None
            self._standalone = isinstance(event, GtidEvent) or bool(event.flags & _MARIADB_STANDALONE)
        elif isinstance(event, XidEvent):
            self._commit(event)
            return
        elif isinstance(event, QueryEvent):
            if self._query(event):
                return
        elif isinstance(event, RotateEvent):
            position.rotate(event.next_binlog, event.position)
            self._reached(event.next_binlog, event.position)
            return
        elif isinstance(event, HeartbeatLogEvent):
            self._reached(position.file, int(event.packet.log_pos))
            return
        elif isinstance(event, MariadbAnnotateRowsEvent):
            # Not counted: MariaDB sends these only when asked (include.query), and a restart's count
            # of events to skip must not depend on that.
            self.query = event.sql_statement.decode("utf-8", "replace")
            return
        elif isinstance(event, RowsQueryLogEvent):
            self.query = event.query  # MySQL logs these whatever the replica asks: counted as Debezium does
        position.event_done()

    def _query(self, event: Any) -> bool:
        """A query event: ``BEGIN``, ``COMMIT`` or a statement (DDL); ``True`` when it committed."""
        position = self.position
        query = event.query.strip()
        upper = query[:10].upper()
        if upper.startswith("BEGIN") or upper.startswith("XA START"):
            if not position.in_transaction:  # no GTIDs: the transaction starts here
                self._reached(position.file, _event_start(event))
                position.begin(_event_start(event), None)
            self._stamp_due = True
            self._standalone = False
            self.thread = event.slave_proxy_id
            return False
        if upper.startswith(_COMMIT):
            self._commit(event)
            return True
        if not position.in_transaction:  # a statement without GTID: its own transaction
            self._reached(position.file, _event_start(event))
            position.begin(_event_start(event), None)
            self._standalone = True
        if self._standalone:
            # DDL (or a statement logged as such): the schema history follows it once it counts as
            # done (the position after it), then its schema change events go out in stream order.
            start = _event_start(event)
            self._commit(event, reached=False)
            if self.on_ddl is not None:
                self._schema_changes(event, query, start)
            # Only now may a snapshot watermark at the statement's end release its chunk: the
            # chunk's rows have the shape after the statement, so they follow its change events.
            self._reached(self.position.file, self.position.restart_pos)
            return True
        return False

    def _schema_changes(self, event: Any, query: str, start: int) -> None:
        assert self.on_ddl is not None
        schema = event.schema.decode("utf-8", "replace") if isinstance(event.schema, bytes) else event.schema
        for topic, key, key_schema, value, value_schema in self.on_ddl(query, schema or None, event, start, self.position):
            self.records.append(
                SourceRecord(topic, value, value_schema, key, key_schema, None, None, None, self.partition, self.batch_offset)
            )

    def _commit(self, event: Any, *, reached: bool = True) -> None:
        self.position.ts_sec = event.timestamp
        self.commit_us = event.timestamp * 1_000_000
        self.position.commit(int(event.packet.log_pos))
        self.thread = None
        if reached:
            self._reached(self.position.file, self.position.restart_pos)

    def _table_map(self, event: Any) -> None:
        names = [c.name for c in event.columns]
        table = self.tables[event.table_id] = self.lookup(event.schema, event.table, names)
        self.native.table_map(event.table_id, table, event.columns)
        if (event.schema, event.table) == self.signal_table:
            self._signal_ids.add(event.table_id)

    def _rows(self, event: Any) -> None:
        position = self.position
        table = self.tables.get(event.table_id)
        if event.table_id in self._signal_ids and self.on_signal is not None and not position.skipping:
            if isinstance(event, WriteRowsEvent):
                for row in event.rows:  # Debezium's signal columns are id, type, data, in this order
                    self.on_signal(list(row["values"].values()))
        if table is None or position.skipping:
            position.event_done()
            return
        skip = position.rows_to_skip()
        start = _event_start(event)
        if isinstance(event, WriteRowsEvent):
            if "c" not in self.skipped:
                for i, after in enumerate(self._images(table, event, skip), skip):
                    self._emit(table, "c", None, after, table.key_of(after), event, start, i)
        elif isinstance(event, UpdateRowsEvent):
            if "u" not in self.skipped:
                for i, (before, after) in enumerate(self._images(table, event, skip), skip):
                    self._update(table, before, after, event, start, i)
        elif "d" not in self.skipped:
            for i, before in enumerate(self._images(table, event, skip), skip):
                key = table.key_of(before)
                self._emit(table, "d", before, None, key, event, start, i)
                if self.tombstones:  # a keyless table's too (a null key and value), as Debezium writes it
                    self._tombstone(table, key)
        position.event_done()

    def _images(self, table: Table, event: Any, skip: int) -> list[Any]:
        """The event's rows from the ``skip``-th on: ``after`` values (write), ``before`` values
        (delete) or both (update), natively decoded where :mod:`.native_rows` can."""
        images = self.native.rows(event)
        if images is not None:
            return images[skip:] if skip else images
        rows = event.rows[skip:] if skip else event.rows
        if isinstance(event, UpdateRowsEvent):
            return [
                (
                    table.row(row["before_values"], row.get("before_none_sources")),
                    table.row(row["after_values"], row.get("after_none_sources")),
                )
                for row in rows
            ]
        return [table.row(row["values"], row.get("none_sources")) for row in rows]

    def _update(self, table: Table, before: dict[str, Any], after: dict[str, Any], event: Any, start: int, row: int) -> None:
        old_key, new_key = table.key_of(before), table.key_of(after)
        if old_key == new_key:
            self._emit(table, "u", before, after, new_key, event, start, row)
            return
        # The key changed: Debezium's delete of the old key (with its tombstone), then a create; each
        # names the other key in a header, as Debezium's do.
        new = (("__debezium.newkey", SchemaAndValue(table.key_schema, new_key)),)
        self._emit(table, "d", before, None, old_key, event, start, row, new)
        if self.tombstones and old_key is not None:
            self._tombstone(table, old_key, new)
        old = (("__debezium.oldkey", SchemaAndValue(table.key_schema, old_key)),)
        self._emit(table, "c", None, after, new_key, event, start, row, old)

    def _emit(
        self,
        table: Table,
        op: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        key: dict[str, Any] | None,
        event: Any,
        start: int,
        row: int,
        headers: Headers | None = None,
    ) -> None:
        if self.on_change is not None:
            self.on_change(table, before, after)
        if self._stamp_due:
            self._stamp()
        ts_ms, ts_us, ts_ns = self.now
        value = {
            "before": before,
            "after": after,
            "source": self._source(table, event, start, row),
            "transaction": None,
            "op": op,
            "ts_ms": ts_ms,
            "ts_us": ts_us,
            "ts_ns": ts_ns,
        }
        self.events += 1
        self.records.append(
            SourceRecord(
                table.topic,
                value,
                table.envelope_schema,
                key,
                table.key_schema if key is not None else None,
                None,
                None,
                headers,
                self.partition,
                self.batch_offset,
            )
        )

    def _source(self, table: Table, event: Any, start: int, row: int) -> dict[str, Any]:
        """The event's ``source`` block: where in the binlog the row change is."""
        position = self.position
        ts = event.timestamp
        return {
            "version": VERSION,
            "connector": self.connector,
            "name": self.prefix,
            "ts_ms": ts * 1000,
            "snapshot": "false",
            "db": table.database,
            "sequence": None,
            "ts_us": ts * 1_000_000,
            "ts_ns": ts * 1_000_000_000,
            "table": table.name,
            "server_id": event.packet.server_id,
            "gtid": position.gtid,
            "file": position.file,
            "pos": start,
            "row": row,
            "thread": self.thread,
            "query": None,
        }

    def _tombstone(self, table: Table, key: dict[str, Any] | None, headers: Headers | None = None) -> None:
        key_schema = table.key_schema if key is not None else None
        self.records.append(
            SourceRecord(table.topic, None, None, key, key_schema, None, None, headers, self.partition, self.batch_offset)
        )

    def take_count(self) -> int:
        """The change events handed over since the last call (tombstones not counted)."""
        events, self.events = self.events, 0
        return events


class QueryingBinlogDecoder(BinlogDecoder):
    """``include.query=true``: each row change event's ``source.query`` is the statement that made it
    (null where the server logged none), until the next statement's or the transaction's end, as
    Debezium's. A class of its own so that without the option the per-row path stays as it is."""

    def _commit(self, event: Any, *, reached: bool = True) -> None:
        self.query = None  # a statement does not outlive its transaction
        super()._commit(event, reached=reached)

    def _source(self, table: Table, event: Any, start: int, row: int) -> dict[str, Any]:
        source = super()._source(table, event, start, row)
        source["query"] = self.query
        return source
