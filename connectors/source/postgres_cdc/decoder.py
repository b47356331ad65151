"""pgoutput messages → Debezium change events (:class:`SourceRecord` lists).

:meth:`ChangeDecoder.handle` takes one XLogData payload and appends the records it yields. It is
the hot path: one (padded) ``bytes`` copy per message, fixed-offset ``struct`` reads, the table's
generated tuple decoder, dicts built in schema order (so the JSON converter passes them through),
the ``source`` block copied from a per-transaction template (two fields set per event), the
envelope's processing time taken per transaction and per poll, and records built without
NamedTuple's Python-level constructor.

When the task serializes natively (:mod:`sluice.connectors.source.postgres_cdc.native`), row changes of a
table the encoder covers skip all of that: the message goes to the table's ``CdcEncoder``, which
appends the record's key and value bytes to :attr:`ChangeDecoder.encoded`, handed out as a
serialized :class:`SourceRecordBatch`; what it declines (an
unusual value) takes the path above. The two kinds of records are never pending at once:
switching finishes the pending ones into :attr:`ChangeDecoder.outbox` with their own offset.

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
from typing import Any

from sluice.connectors.api import Serialization, SourceRecord, SourceRecordBatch
from sluice.connectors.source.postgres_cdc.metadata_schemas import (
    HEARTBEAT_KEY_SCHEMA,
    HEARTBEAT_VALUE_SCHEMA,
    TX_KEY_SCHEMA,
    TX_VALUE_SCHEMA,
)
from sluice.connectors.source.postgres_cdc.native import encoder_for
from sluice.connectors.source.postgres_cdc.replication import pg_timestamp_to_unix_us
from sluice.connectors.source.postgres_cdc.source_block import CONNECTOR, VERSION
from sluice.connectors.source.postgres_cdc.tables import Table, TupleShapeError

log = logging.getLogger(__name__)

_Q = struct.Struct(">Q").unpack_from
_I = struct.Struct(">I").unpack_from
_H = struct.Struct(">H").unpack_from
_i = struct.Struct(">i").unpack_from
#: (lsn, relid) of an Insert/Update/Delete XLogData message: the header's WAL start, then the relation id.
_LSN_RELID = struct.Struct(">xQ17xI").unpack_from
_record = tuple.__new__  # SourceRecord without NamedTuple's Python-level __new__ (a third of the cost)

Relation = tuple[str, str, str, list[tuple[str, int, int]]]
TableLoader = Callable[[int, Relation, bool], tuple[Table | None, bool]]
MessageHook = Callable[[str, bytes, int], None]
SignalHook = Callable[[dict[str, Any], int], None]
ChangeHook = Callable[[Table, dict[str, Any] | None, dict[str, Any] | None], None]


_MESSAGE_TYPES = {1: "INSERT", 2: "UPDATE", 3: "DELETE"}


def _cstring(buf: bytes, pos: int) -> tuple[str, int]:
    end = buf.index(0, pos)
    return buf[pos:end].decode(), end + 1


class ChangeDecoder:
    """Decodes one replication stream's messages into records.

    ``load_table`` describes a relation when its Relation message arrives (``None``: not captured);
    ``on_message`` receives logical messages (the snapshot's watermarks); ``on_change`` sees every
    row change of a captured table before it becomes a record (the snapshot's deduplication and the
    signal table).
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
        self.prefix = topic_prefix
        self.database = database
        self.partition = partition
        self.tombstones = tombstones
        self.skipped = skipped_operations
        self._skips_rows = not skipped_operations.isdisjoint(("c", "u", "d"))
        self.load_table = load_table
        self.on_message = on_message
        self.on_change = on_change
        self.on_signal = on_signal
        self.signal_table = signal_table
        self.signal: Table | None = None
        self.transaction_topic = transaction_topic  # provide.transaction.metadata
        self._tx_events = 0
        self._tx_collections: dict[str, int] = {}
        self.tables: dict[int, Table | None] = {}
        self.signal_relid: int | None = None
        self.records: list[SourceRecord] = []
        self._init_positions()
        # Finished batches to hand out before anything decoded later (a snapshot chunk, as a
        # columnar SourceRecordBatch, and the stream events that preceded its high watermark).
        self.outbox: list[list[SourceRecord] | SourceRecordBatch] = []
        # per transaction: source blocks by table, the head of "sequence", the envelope's time
        self._sources: dict[int, tuple[Table, dict[str, Any]]] = {}
        self._sequence_head = '["0","'
        self._now = (0, 0, 0)
        self._stamp()
        self._init_native()

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
        # The runtime stores the offset of the last record of a poll (it commits only between polls),
        # so the records of one poll share one offset dict, filled in by finish_batch().
        self.batch_offset: dict[str, Any] = {}
        self.message_type: str | None = None

    def _init_native(self) -> None:
        """Native encoding (see connectors.source.postgres_cdc.native): the wire formats the runtime
        offered, once the task chose to serialize for them; each table's encoder (None: the Python
        path); the serialized records not yet handed out, in stream order."""
        self.native: Serialization | None = None
        self._encoders: dict[int, tuple[Table, Any]] = {}
        self._by_relid: dict[int, tuple[Any, str]] = {}  # relations whose changes go straight to the encoder
        self.encoded_topics: list[str] = []
        self.encoded_keys: list[bytes | None] = []
        self.encoded: list[bytes | None] = []

    def finish_batch(self) -> list[SourceRecord] | SourceRecordBatch:
        """The records decoded since the last call; their shared offset is the current position.

        Serialized records (a batch with ``serialized=True``) and Python-built ones are never pending
        at once: switching from one to the other finishes what was pending into :attr:`outbox`."""
        if self.encoded:
            return self._take_encoded()
        records = self.records
        self.records = []
        if records:
            self.batch_offset.update(self.offset(self.message_type))
            self.batch_offset = {}
            self._stamp()
        return records

    def _take_encoded(self) -> SourceRecordBatch:
        offset = self.offset(self.message_type)
        n = len(self.encoded)
        batch = SourceRecordBatch(
            None,
            self.encoded,
            keys=self.encoded_keys,
            topics=self.encoded_topics,
            source_partition=self.partition,
            offsets_loader=lambda: [offset] * n,
            last_offset=offset,
            serialized=True,
        )
        self.encoded_topics, self.encoded_keys, self.encoded = [], [], []
        self._stamp()
        return batch

    def encoder(self, table: Table) -> Any:
        """The table's native encoder (``None``: its changes take the Python path); needs :attr:`native`."""
        cached = self._encoders.get(id(table))
        if cached is not None and cached[0] is table:
            return cached[1]
        assert self.native is not None
        encoder = encoder_for(
            table,
            prefix=self.prefix,
            database=self.database,
            tombstones=self.tombstones,
            serialization=self.native,
        )
        self._encoders[id(table)] = (table, encoder)
        return encoder

    def _encode(self, table: Table, buf: bytes, lsn: int, relid: int) -> bool:
        """Serialize the change natively when the table's encoder takes it; ``False``: the Python path."""
        if self.on_change is not None or self._skips_rows or self.transaction_topic is not None:
            return False
        encoder = self.encoder(table)
        if encoder is None:
            return False
        known = (encoder, table.topic)
        if relid != self.signal_relid:  # later changes of the relation take handle()'s shortcut
            self._by_relid[relid] = known
        return self._append_encoded(known, buf, lsn)

    def _append_encoded(self, known: tuple[Any, str], buf: bytes, lsn: int) -> bool:
        """Append the change's serialized records; ``False`` (nothing appended) when the encoder
        declines it. Pending Python-built records go out first, in their own batch."""
        encoder, topic = known
        values = self.encoded
        before = len(values)
        code = encoder.encode(
            buf, self.xid, self.commit_us, self.sequence_lsn, self._now[2], self.encoded_keys, values
        )
        if not code:
            return False
        if self.records:  # then nothing else was encoded: `values` holds only this change's records
            keys = self.encoded_keys
            self.encoded_keys, self.encoded = [], []
            self.outbox.append(self.finish_batch())
            self.encoded_keys, self.encoded = keys, values
        added = len(values) - before
        if added == 1:
            self.encoded_topics.append(topic)
        else:
            self.encoded_topics.extend([topic] * added)
        self.position = (self.final_lsn, lsn)
        self.message_type = _MESSAGE_TYPES[code]
        return True

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
        if (kind == 73 or kind == 85 or kind == 68) and self._by_relid and self.on_change is None:
            # The native path's shortcut: a relation whose changes went to the encoder before.
            lsn, relid = _LSN_RELID(buf)
            known = self._by_relid.get(relid)
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
        self._tx_events = 0
        self._tx_collections = {}
        self._sources = {}
        self._sequence_head = f'["{self.sequence_lsn}","'
        self._stamp()

    def _stamp(self) -> None:
        """The envelope's processing time (``ts_ms``/``ts_us``/``ts_ns``), taken once per transaction
        and per poll rather than per event."""
        now = time.time_ns()
        self._now = (now // 1_000_000, now // 1000, now)

    def _source_template(self, table: Table) -> dict[str, Any]:
        """The ``source`` block of this transaction's events of ``table``; each event copies it and
        sets its own ``sequence`` and ``lsn``."""
        commit_us = self.commit_us
        source = {
            "version": VERSION,
            "connector": CONNECTOR,
            "name": self.prefix,
            "ts_ms": commit_us // 1000,
            "snapshot": "false",
            "db": self.database,
            "sequence": None,
            "ts_us": commit_us,
            "ts_ns": commit_us * 1000,
            "schema": table.schema_name,
            "table": table.name,
            "txId": self.xid,
            "lsn": None,
            "xmin": None,
            "origin": None,
            "origin_lsn": None,
        }
        self._sources[id(table)] = (table, source)  # the table itself, so a reused id() cannot match
        return source

    def _commit(self, buf: bytes) -> None:
        commit_lsn, end_lsn = _Q(buf, 27)[0], _Q(buf, 35)[0]
        if self.transaction_topic is not None and self._tx_events:
            self._transaction_record("END")
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
        self._by_relid.pop(relid, None)
        table, captured = self.load_table(relid, (schema, name, replident, columns), is_signal)
        if is_signal:
            self.signal_relid, self.signal = relid, table
        self.tables[relid] = table if captured else None

    def _skip(self, lsn: int) -> bool:
        return self._skip_txn or lsn <= self._skip_upto

    def _insert(self, buf: bytes) -> None:
        lsn, relid = _LSN_RELID(buf)
        if relid == self.signal_relid:
            self._signal(buf)
        table = self.tables.get(relid)
        if table is None or self._skip_txn or lsn <= self._skip_upto:
            return
        if self.native is not None and self._encode(table, buf, lsn, relid):
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
        if self.signal is not None and self.on_signal is not None and not self._skip(lsn):
            self.on_signal(self.signal.decode(buf, 31)[0], lsn)

    def _update(self, buf: bytes) -> None:
        lsn, relid = _LSN_RELID(buf)
        table = self.tables.get(relid)
        if table is None or self._skip_txn or lsn <= self._skip_upto:
            return
        if self.native is not None and self._encode(table, buf, lsn, relid):
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
        if self.native is not None and self._encode(table, buf, lsn, relid):
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
        if "t" in self.skipped or self._skip(lsn):
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

    # -- records -----------------------------------------------------------------------------------

    def _emit(
        self,
        table: Table,
        op: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        key: dict[str, Any] | None,
        lsn: int,
        message_type: str,
    ) -> None:
        if self.encoded:  # serialized records first, in their own batch
            self.outbox.append(self._take_encoded())
        self.position = (self.final_lsn, lsn)
        cached = self._sources.get(id(table))
        template = cached[1] if cached is not None and cached[0] is table else self._source_template(table)
        source = template.copy()  # a copy keeps the key order
        source["sequence"] = f'{self._sequence_head}{lsn}"]'
        source["lsn"] = lsn
        ts_ms, ts_us, ts_ns = self._now
        value = {
            "before": before,
            "after": after,
            "source": source,
            "transaction": None if self.transaction_topic is None else self._transaction_block(table),
            "op": op,
            "ts_ms": ts_ms,
            "ts_us": ts_us,
            "ts_ns": ts_ns,
        }
        self.message_type = message_type
        self.records.append(
            _record(
                SourceRecord,
                (
                    table.topic,
                    value,
                    table.envelope_schema,
                    key,
                    table.key_schema if key is not None else None,  # a truncate event has no key
                    None,
                    None,
                    None,
                    self.partition,
                    self.batch_offset,
                ),
            )
        )

    def _transaction_block(self, table: Table) -> dict[str, Any]:
        if not self._tx_events:
            self._transaction_record("BEGIN")
        self._tx_events += 1
        collection = table.qualified
        count = self._tx_collections.get(collection, 0) + 1
        self._tx_collections[collection] = count
        return {"id": f"{self.xid}:{self.final_lsn}", "total_order": self._tx_events, "data_collection_order": count}

    def _transaction_record(self, status: str) -> None:
        """Debezium's BEGIN/END transaction metadata events (``<prefix>.transaction``)."""
        assert self.transaction_topic is not None
        if self.encoded:
            self.outbox.append(self._take_encoded())
        tx_id = f"{self.xid}:{self.final_lsn}"
        end = status == "END"
        value = {
            "status": status,
            "id": tx_id,
            "event_count": self._tx_events if end else None,
            "data_collections": [{"data_collection": c, "event_count": n} for c, n in self._tx_collections.items()]
            if end
            else None,
            "ts_ms": self.commit_us // 1000,
        }
        self.records.append(
            SourceRecord(
                self.transaction_topic,
                value,
                TX_VALUE_SCHEMA,
                {"id": tx_id},
                TX_KEY_SCHEMA,
                None,
                None,
                None,
                self.partition,
                self.batch_offset,
            )  # fmt: skip
        )

    def _tombstone(self, table: Table, key: dict[str, Any] | None, lsn: int) -> None:
        last = self.records[-1]
        self.records.append(
            SourceRecord(
                table.topic, None, None, key, table.key_schema, None, None, None, self.partition, last.source_offset
            )
        )

    def heartbeat(self, topic: str) -> SourceRecord:
        """A Debezium heartbeat record carrying the current position as its offset."""
        return SourceRecord(
            topic,
            {"ts_ms": int(time.time() * 1000)},
            HEARTBEAT_VALUE_SCHEMA,
            {"serverName": self.prefix},
            HEARTBEAT_KEY_SCHEMA,
            None,
            None,
            None,
            self.partition,
            self.offset(),
        )
