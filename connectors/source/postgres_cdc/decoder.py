"""pgoutput messages → Debezium change events.

:meth:`ChangeDecoder.handle` takes one XLogData payload: it follows transactions and positions,
describes tables from Relation messages, skips what a restart replays, and hands each row change
of a captured table to the lane chosen when the task started (:mod:`.emitters`): the Python lane
builds :class:`SourceRecord` s, the native lane serializes the change with the table's
``CdcEncoder`` (falling back to the Python lane for what it declines). The events wait in the
decoder's :class:`~sluice.connectors.cdc.emitter.ChangeBuffer` until a poll finishes the batch.

It is the hot path: one (padded) ``bytes`` copy per message, fixed-offset ``struct`` reads, the
table's generated tuple decoder, the envelope's processing time taken per transaction and per
batch, and, for a relation the native encoder took before, a shortcut straight to it.

Positions: every event's offset carries ``lsn_commit`` (the commit LSN of its transaction) and
``lsn`` (the event's own LSN). A transaction committed before the stored ``lsn_commit`` was
delivered; in the transaction whose commit LSN equals it, events up to the stored ``lsn`` were.
The decoder applies that rule after a restart or reconnect, because the slot replays from its
confirmed position, which may lag the stored offsets.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from types import MethodType
from typing import Any

from sluice.connectors.api import Serialization, SourceRecord
from sluice.connectors.cdc.emitter import ChangeBuffer
from sluice.connectors.cdc.heartbeats import heartbeat_record
from sluice.connectors.cdc.transactions import TransactionMetadata
from sluice.connectors.source.postgres_cdc.emitters import PostgresNativeEmitter, PostgresRecordEmitter
from sluice.connectors.source.postgres_cdc.replication import pg_timestamp_to_unix_us
from sluice.connectors.source.postgres_cdc.tables import Table, TupleShapeError

log = logging.getLogger(__name__)

_Q = struct.Struct(">Q").unpack_from
_I = struct.Struct(">I").unpack_from
_H = struct.Struct(">H").unpack_from
_i = struct.Struct(">i").unpack_from
#: (lsn, relid) of an Insert/Update/Delete XLogData message: the header's WAL start, then the relation id.
_LSN_RELID = struct.Struct(">xQ17xI").unpack_from

Relation = tuple[str, str, str, list[tuple[str, int, int]]]
TableLoader = Callable[[int, Relation, bool], tuple[Table | None, bool]]
MessageHook = Callable[[str, bytes, int], None]
SignalHook = Callable[[dict[str, Any], int], None]
ChangeHook = Callable[[Table, dict[str, Any] | None, dict[str, Any] | None], None]


def _cstring(buf: bytes, pos: int) -> tuple[str, int]:
    end = buf.index(0, pos)
    return buf[pos:end].decode(), end + 1


def _declined(known: tuple[Any, str], buf: bytes, lsn: int) -> bool:
    return False


class ChangeDecoder(ChangeBuffer):
    """Decodes one replication stream's messages into records.

    ``load_table`` describes a relation when its Relation message arrives (``None``: not captured);
    ``on_message`` receives logical messages (the snapshot's watermarks); ``on_change`` sees every
    row change of a captured table before it becomes a record (the snapshot's deduplication and the
    signal table). Setting :attr:`native` chooses the native lane (see the module docstring).
    """

    def __init__(
        self,
        *,
        topic_prefix: str,
        database: str,
        partition: dict[str, Any],
        tombstones: bool,
        skipped_operations: set[str],
        load_table: TableLoader,
        on_message: MessageHook | None = None,
        on_change: ChangeHook | None = None,
        on_signal: SignalHook | None = None,
        signal_table: str = "",
        transaction_topic: str | None = None,
    ) -> None:
        super().__init__(partition)
        self.prefix = topic_prefix
        self.database = database
        self.tombstones = tombstones
        self.skipped = skipped_operations
        self.skips_rows = not skipped_operations.isdisjoint(("c", "u", "d"))
        self.load_table = load_table
        self.on_message = on_message
        self.on_change = on_change
        self.on_signal = on_signal
        self.signal_table = signal_table
        self.signal: Table | None = None
        self.signal_relid: int | None = None
        self.tables: dict[int, Table | None] = {}
        self.message_flags = 1  # of the last logical message; bit 0: transactional
        #: provide.transaction.metadata: the BEGIN/END events and each event's transaction block.
        self.transactions = TransactionMetadata(transaction_topic, self) if transaction_topic is not None else None
        self._init_positions()
        # per transaction: the head of "sequence", the envelope's processing time
        self.sequence_head = '["0","'
        self.now = (0, 0, 0)
        self._stamp()
        #: The Python lane, which builds every record the native lane does not serialize.
        self.python = PostgresRecordEmitter(self)
        self._emit = self.python.emit
        self._tombstone = self.python.tombstone
        #: The native lane, once the task chose it (:attr:`native`).
        self.native_lane: PostgresNativeEmitter | None = None
        #: What hands out the polls' records: the native lane when chosen, else the Python lane.
        self.emitter: PostgresRecordEmitter | PostgresNativeEmitter = self.python
        #: Relations whose changes went to the native encoder before: handle() takes a shortcut to
        #: the native lane's append_encoded (bound here once the lane is chosen).
        self.by_relid: dict[int, tuple[Any, str]] = {}
        self._append_encoded: Callable[[tuple[Any, str], bytes, int], bool] = _declined
        #: Between a Begin and its Commit, reconnects included (kept by follow_transactions only).
        self._in_open_txn = False

    def _init_positions(self) -> None:
        """The transaction being decoded and the positions offsets are built from."""
        self.in_txn = False
        self.xid = 0
        self.final_lsn = 0
        self.commit_us = 0
        self.last_commit_lsn = 0
        self.sequence_lsn = 0  #: ``sequence[0]``: the end of the last commit (Debezium's choice)
        self.last_xid: int | None = None
        self.last_commit_us = 0
        self.safe_lsn = 0  # everything before it is in self.records (or was filtered)
        self.position = (0, 0)  # (lsn_commit, lsn) of the last handled event
        self.resume = (0, 0)  # skip what the stored offsets say was delivered
        self._skip_txn = False
        self._skip_upto = -1
        self.snapshot_progress: dict[str, Any] | None = None
        self.message_type: str | None = None

    # -- the lanes ---------------------------------------------------------------------------------

    @property
    def native(self) -> Serialization | None:
        """The wire formats row changes are serialized in natively (``None``: the Python lane only)."""
        return self.native_lane.serialization if self.native_lane is not None else None

    @native.setter
    def native(self, serialization: Serialization | None) -> None:
        """Choose the lane, once, when the task starts (see :mod:`sluice.connectors.source.postgres_cdc.native`)."""
        self.by_relid = {}
        if serialization is None:
            self.native_lane = None
            self.emitter = self.python
            return
        self.native_lane = PostgresNativeEmitter(self, self.python, serialization)
        self.emitter = self.native_lane
        self._append_encoded = MethodType(PostgresNativeEmitter.append_encoded, self)

    def encoder(self, table: Table) -> Any:
        """The table's native encoder (``None``: its changes take the Python lane); needs :attr:`native`."""
        assert self.native_lane is not None
        return self.native_lane.encoder(table)

    # -- the buffer's hooks (ChangeBuffer) and the snapshot's (ChangeStream) ------------------------

    def current_offset(self) -> dict[str, Any]:
        return self.offset(self.message_type)

    def batch_started(self) -> None:
        self._stamp()

    def track_changes(self, hook: ChangeHook | None) -> None:
        self.on_change = hook

    def offset_at(self, position: int) -> dict[str, Any]:
        return self.offset(None, position)

    def current_position(self) -> int:
        return self.position[1]

    # -- transaction boundaries --------------------------------------------------------------------

    def follow_transactions(self) -> None:
        """``transaction.boundary=connector``: keep track of where transactions commit in the pending
        events, so a poll can end between two of them (:meth:`settled`,
        :meth:`~sluice.connectors.cdc.emitter.ChangeBuffer.take_settled`). The bookkeeping wraps the
        Begin and Commit handlers of this instance only, so a task without it pays nothing."""
        self._in_open_txn = self.in_txn
        begin, commit = self._begin, self._commit

        def begin_followed(buf: bytes) -> None:
            self._in_open_txn = True
            begin(buf)

        def commit_followed(buf: bytes) -> None:
            commit(buf)
            self._in_open_txn = False
            self.transaction_settled()

        self._begin, self._commit = begin_followed, commit_followed  # type: ignore[method-assign]

    def settled(self) -> bool:
        """Whether every event decoded belongs to a committed transaction. Unlike :attr:`in_txn`,
        which a reconnect clears, this stays false from a Begin until its transaction's Commit, also
        while the stream is reopened and the transaction replayed. Kept by :meth:`follow_transactions`."""
        return not self._in_open_txn

    # -- positions ---------------------------------------------------------------------------------

    def resume_from(self, lsn_commit: int, lsn: int) -> None:
        """Skip transactions (and events) up to this stored position when they are replayed."""
        self.resume = (lsn_commit, lsn)
        self.position = max(self.position, self.resume)
        self.last_commit_lsn = max(self.last_commit_lsn, lsn_commit)
        self.sequence_lsn = max(self.sequence_lsn, lsn_commit)

    def offset(self, message_type: str | None = None, lsn: int | None = None) -> dict[str, Any]:
        """The Debezium offset of the current position."""
        commit, at = self.position
        offset: dict[str, Any] = {
            "lsn_proc": at if lsn is None else lsn,
            "lsn_commit": commit,
            "lsn": at if lsn is None else lsn,
            "txId": self.xid if self.position[0] == self.final_lsn else self.last_xid,
            "ts_usec": self.commit_us if self.position[0] == self.final_lsn else self.last_commit_us,
        }
        if message_type is not None:
            offset["messageType"] = message_type
        if self.snapshot_progress is not None:
            offset.update(self.snapshot_progress)
        return offset

    def replayed(self, lsn: int) -> bool:
        """Whether the event at ``lsn`` of the current transaction was delivered before a restart."""
        return self._skip_txn or lsn <= self._skip_upto

    # -- messages ----------------------------------------------------------------------------------

    def keepalive(self, wal_end: int) -> None:
        """A keepalive: with no transaction open, everything up to ``wal_end`` is handled."""
        if not self.in_txn and wal_end > self.safe_lsn:
            self.safe_lsn = wal_end
            if wal_end > self.position[1]:
                self.position = (self.position[0], wal_end)

    def handle(self, data: Any) -> None:
        """One XLogData message (``w``, 25-byte header, then the pgoutput message).

        The copy carries four zero bytes of padding: the tuple decoders read a column's kind and
        length in one ``struct`` call, which for a trailing null column reaches past the message."""
        buf = b"%b\0\0\0\0" % data
        kind = buf[25]
        if (kind == 73 or kind == 85 or kind == 68) and self.by_relid and self.on_change is None:
            # The native lane's shortcut: a relation whose changes went to the encoder before.
            lsn, relid = _LSN_RELID(buf)
            known = self.by_relid.get(relid)
            if (
                known is not None
                and not self._skip_txn
                and lsn > self._skip_upto
                and self._append_encoded(known, buf, lsn)
            ):
                return
        if kind == 73:  # I
            self._insert(buf)
        elif kind == 85:  # U
            self._update(buf)
        elif kind == 68:  # D
            self._delete(buf)
        elif kind == 66:  # B
            self._begin(buf)
        elif kind == 67:  # C
            self._commit(buf)
        elif kind == 82:  # R
            self._relation(buf)
        elif kind == 84:  # T
            self._truncate(buf)
        elif kind == 77:  # M
            self._message(buf)
        # Y (type), O (origin): nothing to do; types are read from the catalog

    def _begin(self, buf: bytes) -> None:
        self.in_txn = True
        self.final_lsn = final = _Q(buf, 26)[0]
        self.commit_us = pg_timestamp_to_unix_us(_Q(buf, 34)[0])
        self.xid = _I(buf, 42)[0]
        commit, at = self.resume
        self._skip_txn = final < commit
        self._skip_upto = at if final == commit else -1
        if self.transactions is not None:
            self.transactions.begin(f"{self.xid}:{final}", self.commit_us // 1000)
        self.python.templates = {}
        self.sequence_head = f'["{self.sequence_lsn}","'
        self._stamp()

    def _stamp(self) -> None:
        """The envelope's processing time (``ts_ms``/``ts_us``/``ts_ns``), taken once per transaction
        and per batch rather than per event."""
        now = time.time_ns()
        self.now = (now // 1_000_000, now // 1000, now)

    def _commit(self, buf: bytes) -> None:
        commit_lsn, end_lsn = _Q(buf, 27)[0], _Q(buf, 35)[0]
        if self.transactions is not None:
            self.transactions.end()
        self.in_txn = False
        self.last_commit_lsn = commit_lsn
        self.sequence_lsn = end_lsn
        self.last_xid = self.xid
        self.last_commit_us = self.commit_us
        if not self._skip_txn:
            self.position = (commit_lsn, end_lsn)
        self._skip_txn = False
        self._skip_upto = -1
        if end_lsn > self.safe_lsn:
            self.safe_lsn = end_lsn

    def _relation(self, buf: bytes) -> None:
        relid = _I(buf, 26)[0]
        schema, pos = _cstring(buf, 30)
        name, pos = _cstring(buf, pos)
        replident = chr(buf[pos])
        ncols = _H(buf, pos + 1)[0]
        pos += 3
        columns = []
        for _ in range(ncols):
            column, pos = _cstring(buf, pos + 1)
            type_oid, typmod = _I(buf, pos)[0], _i(buf, pos + 4)[0]
            pos += 8
            columns.append((column, type_oid, typmod))
        is_signal = bool(self.signal_table) and f"{schema}.{name}" == self.signal_table
        self.by_relid.pop(relid, None)
        table, captured = self.load_table(relid, (schema, name, replident, columns), is_signal)
        if is_signal:
            self.signal_relid, self.signal = relid, table
        self.tables[relid] = table if captured else None

    def _insert(self, buf: bytes) -> None:
        lsn, relid = _LSN_RELID(buf)
        if relid == self.signal_relid:
            self._signal(buf)
        table = self.tables.get(relid)
        if table is None or self._skip_txn or lsn <= self._skip_upto:
            return
        if self.native_lane is not None and self.native_lane.encode(table, buf, lsn, relid):
            return
        try:
            after = table.decode(buf, 31)[0]
        except TupleShapeError:
            log.warning("Skipping an insert into %s whose column count does not match its relation", table.qualified)
            return
        if self.on_change is not None:
            self.on_change(table, None, after)
        if "c" not in self.skipped:
            self._emit(table, "c", None, after, table.key_of(after), lsn, "INSERT")

    def _signal(self, buf: bytes) -> None:
        lsn = _Q(buf, 1)[0]
        if self.signal is not None and self.on_signal is not None and not self.replayed(lsn):
            self.on_signal(self.signal.decode(buf, 31)[0], lsn)

    def _update(self, buf: bytes) -> None:
        lsn, relid = _LSN_RELID(buf)
        table = self.tables.get(relid)
        if table is None or self._skip_txn or lsn <= self._skip_upto:
            return
        if self.native_lane is not None and self.native_lane.encode(table, buf, lsn, relid):
            return
        marker = buf[30]
        before = None
        pos = 31
        if marker == 75 or marker == 79:  # K: old key; O: old row (REPLICA IDENTITY FULL)
            before, pos = table.decode(buf, 31)
            if marker == 75:
                before = table.fill_old_key(before)
            pos += 1  # the N marker
        if marker == 79:  # the old row has every value: unchanged TOASTed ones come from it
            after = table.fill_unchanged(table.decode_beside_old(buf, pos)[0], before)  # type: ignore[arg-type]
        else:
            after = table.decode(buf, pos)[0]
        if self.on_change is not None:
            self.on_change(table, before, after)
        key = table.key_of(after)
        if before is not None and key is not None:
            old_key = table.key_of(before)
            if old_key != key:  # a primary key change: delete + create, as Debezium emits it
                self._emit(table, "d", before, None, old_key, lsn, "DELETE")
                if self.tombstones:
                    self._tombstone(table, old_key, lsn)
                self._emit(table, "c", None, after, key, lsn, "INSERT")
                return
        if "u" not in self.skipped:
            self._emit(table, "u", before, after, key, lsn, "UPDATE")

    def _delete(self, buf: bytes) -> None:
        lsn, relid = _LSN_RELID(buf)
        table = self.tables.get(relid)
        if table is None or self._skip_txn or lsn <= self._skip_upto:
            return
        if self.native_lane is not None and self.native_lane.encode(table, buf, lsn, relid):
            return
        marker = buf[30]
        before = table.decode(buf, 31)[0]
        if marker == 75:
            before = table.fill_old_key(before)
        if self.on_change is not None:
            self.on_change(table, before, None)
        if "d" in self.skipped:
            return
        key = table.key_of(before)
        self._emit(table, "d", before, None, key, lsn, "DELETE")
        if self.tombstones and key is not None:
            self._tombstone(table, key, lsn)

    def _truncate(self, buf: bytes) -> None:
        lsn = _Q(buf, 1)[0]
        if "t" in self.skipped or self.replayed(lsn):
            return
        count = _I(buf, 26)[0]
        for i in range(count):
            table = self.tables.get(_I(buf, 31 + 4 * i)[0])
            if table is not None:
                self._emit(table, "t", None, None, None, lsn, "TRUNCATE")

    def _message(self, buf: bytes) -> None:
        if self.on_message is not None:  # the snapshot's watermarks, message events (messages.py)
            prefix, pos = _cstring(buf, 35)
            self.message_flags = buf[26]  # bit 0: transactional
            self.on_message(prefix, buf[pos + 4 : pos + 4 + _I(buf, pos)[0]], _Q(buf, 27)[0])

    def heartbeat(self, topic: str) -> SourceRecord:
        """A Debezium heartbeat record carrying the current position as its offset."""
        return heartbeat_record(topic, self.prefix, self.partition, self.offset())
