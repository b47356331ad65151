"""The PostgreSQL source's two emitters: how a row change or a snapshot chunk becomes its events.

The task chooses one when it starts (:meth:`ChangeDecoder.native`), as Debezium's
``PostgresChangeRecordEmitter`` is what its streaming source dispatches every change through:

* :class:`PostgresRecordEmitter`, the Python lane, builds Debezium records: the envelope's dict in
  schema order (so the JSON converter passes it through), the ``source`` block copied from a
  per-transaction template (two fields set per event), the record built without NamedTuple's
  Python-level constructor;
* :class:`PostgresNativeEmitter`, the native lane, hands the pgoutput message (or a chunk's
  ``COPY`` text) to the table's ``CdcEncoder`` (:mod:`sluice.connectors.source.postgres_cdc.native`),
  which appends the records' key and value bytes to the decoder's buffer; what it declines (a
  table with a column it does not cover, an unusual value) takes the Python lane.

Both write into the decoder's :class:`~sluice.connectors.cdc.emitter.ChangeBuffer`; how a poll
then hands its batch out is the shared part (:mod:`sluice.connectors.cdc.emitter`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

from sluice.connectors.api import Serialization, SourceRecord, SourceRecordBatch
from sluice.connectors.cdc.chunks import ChunkWindow, snapshot_batch
from sluice.connectors.cdc.emitter import Batch, RecordEmitter, SerializingEmitter
from sluice.connectors.cdc.snapshot import INCREMENTAL
from sluice.connectors.cdc.transactions import TransactionMetadata
from sluice.connectors.source.postgres_cdc.native import encoder_for
from sluice.connectors.source.postgres_cdc.source_block import CONNECTOR, VERSION
from sluice.connectors.source.postgres_cdc.tables import Table

_record = tuple.__new__  # SourceRecord without NamedTuple's Python-level __new__ (a third of the cost)

_MESSAGE_TYPES = {1: "INSERT", 2: "UPDATE", 3: "DELETE"}


class Decoded(Protocol):
    """What the lanes read and write of the stream decoder (:class:`~.decoder.ChangeDecoder`): its
    buffer, the transaction being decoded and the position of the last event."""

    prefix: str
    database: str
    partition: dict[str, Any]
    tombstones: bool
    skips_rows: bool
    transactions: TransactionMetadata | None
    on_change: Callable[..., None] | None
    signal_relid: int | None
    by_relid: dict[int, tuple[Any, str]]
    # the buffer (ChangeBuffer)
    records: list[SourceRecord]
    batch_offset: dict[str, Any]
    outbox: list[Batch]
    encoded_topics: list[str]
    encoded_keys: list[bytes | None]
    encoded: list[bytes | None]
    # the transaction and the position
    xid: int
    commit_us: int
    final_lsn: int
    sequence_lsn: int
    sequence_head: str
    now: tuple[int, int, int]
    position: tuple[int, int]
    message_type: str | None

    def take_records(self) -> list[SourceRecord]: ...

    def take_encoded(self) -> SourceRecordBatch: ...


class PostgresRecordEmitter(RecordEmitter):
    """The Python lane (see the module docstring). Thread: the task thread."""

    def __init__(self, decoder: Decoded) -> None:
        self.decoder = decoder
        #: This transaction's ``source`` blocks by table (reset when a transaction begins).
        self.templates: dict[int, tuple[Table, dict[str, Any]]] = {}

    def defers_decoding(self, table: Table) -> bool:
        """Whether a snapshot chunk of ``table`` may stay undecoded until it is emitted: never here."""
        return False

    def emit(
        self,
        table: Table,
        op: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
        key: dict[str, Any] | None,
        lsn: int,
        message_type: str,
    ) -> None:
        """One change event of ``table`` at ``lsn`` in the current transaction."""
        d = self.decoder
        if d.encoded:  # serialized records first, in their own batch
            d.outbox.append(d.take_encoded())
        d.position = (d.final_lsn, lsn)
        cached = self.templates.get(id(table))
        template = cached[1] if cached is not None and cached[0] is table else self._source_template(table)
        source = template.copy()  # a copy keeps the key order
        source["sequence"] = f'{d.sequence_head}{lsn}"]'
        source["lsn"] = lsn
        ts_ms, ts_us, ts_ns = d.now
        transactions = d.transactions
        value = {
            "before": before,
            "after": after,
            "source": source,
            "transaction": None if transactions is None else transactions.block(table.qualified),
            "op": op,
            "ts_ms": ts_ms,
            "ts_us": ts_us,
            "ts_ns": ts_ns,
        }
        d.message_type = message_type
        d.records.append(
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
                    d.partition,
                    d.batch_offset,
                ),
            )
        )

    def _source_template(self, table: Table) -> dict[str, Any]:
        """The ``source`` block of this transaction's events of ``table``; each event copies it and
        sets its own ``sequence`` and ``lsn``."""
        d = self.decoder
        commit_us = d.commit_us
        source = {
            "version": VERSION,
            "connector": CONNECTOR,
            "name": d.prefix,
            "ts_ms": commit_us // 1000,
            "snapshot": "false",
            "db": d.database,
            "sequence": None,
            "ts_us": commit_us,
            "ts_ns": commit_us * 1000,
            "schema": table.schema_name,
            "table": table.name,
            "txId": d.xid,
            "lsn": None,
            "xmin": None,
            "origin": None,
            "origin_lsn": None,
        }
        self.templates[id(table)] = (table, source)  # the table itself, so a reused id() cannot match
        return source

    def tombstone(self, table: Table, key: dict[str, Any] | None, lsn: int) -> None:
        """The tombstone after a delete event, sharing its offset."""
        d = self.decoder
        last = d.records[-1]
        d.records.append(
            SourceRecord(
                table.topic, None, None, key, table.key_schema, None, None, None, d.partition, last.source_offset
            )
        )

    def chunk_events(
        self,
        window: ChunkWindow,
        lsn: int,
        now: int,
        offset: dict[str, Any],
        markers: tuple[str | None, str | None],
        point: tuple[int, int] | None,
    ) -> SourceRecordBatch:
        """A snapshot chunk's ``r`` events built in Python, as one columnar batch."""
        d, table = self.decoder, cast(Table, window.table)
        source = {
            "version": VERSION,
            "connector": CONNECTOR,
            "name": d.prefix,
            "ts_ms": now // 1_000_000,
            "snapshot": "incremental" if window.kind == INCREMENTAL else "true",
            "db": d.database,
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
        return snapshot_batch(window, table.topic, table.envelope_schema, source, now, markers, d.partition, offset)


class PostgresNativeEmitter(SerializingEmitter):
    """The native lane (see the module docstring), serializing in ``serialization``'s wire formats
    (which :func:`~sluice.connectors.source.postgres_cdc.native.serializes_for` accepted).
    Thread: the task thread."""

    def __init__(self, decoder: Decoded, python: PostgresRecordEmitter, serialization: Serialization) -> None:
        self.decoder = decoder
        self.serialization = serialization
        self.python = python
        self._encoders: dict[int, tuple[Table, Any]] = {}

    def encoder(self, table: Table) -> Any:
        """The table's native encoder (``None``: its changes take the Python lane)."""
        cached = self._encoders.get(id(table))
        if cached is not None and cached[0] is table:
            return cached[1]
        d = self.decoder
        encoder = encoder_for(
            table, prefix=d.prefix, database=d.database, tombstones=d.tombstones, serialization=self.serialization
        )
        self._encoders[id(table)] = (table, encoder)
        return encoder

    def defers_decoding(self, table: Table) -> bool:
        """Whether a snapshot chunk of ``table`` may stay undecoded until it is emitted (the encoder takes its text)."""
        return self.encoder(table) is not None

    def encode(self, table: Table, buf: bytes, lsn: int, relid: int) -> bool:
        """Serialize the change when the table's encoder takes it; ``False``: the Python lane."""
        d = self.decoder
        if d.on_change is not None or d.skips_rows or d.transactions is not None:
            return False
        encoder = self.encoder(table)
        if encoder is None:
            return False
        known = (encoder, table.topic)
        if relid != d.signal_relid:  # later changes of the relation take handle()'s shortcut
            d.by_relid[relid] = known
        return self.append_encoded(d, known, buf, lsn)

    @staticmethod
    def append_encoded(d: Decoded, known: tuple[Any, str], buf: bytes, lsn: int) -> bool:
        """Append the change's serialized records to ``d``'s buffer; ``False`` (nothing appended)
        when the encoder declines it. Pending Python-built records go out first, in their own batch.

        Written against the decoder, which binds it as its own method (``handle()``'s shortcut, run
        for every change of a relation the encoder took): it costs what a method of the decoder
        costs, with no lookup of the decoder per change."""
        encoder, topic = known
        values = d.encoded
        before = len(values)
        code = encoder.encode(buf, d.xid, d.commit_us, d.sequence_lsn, d.now[2], d.encoded_keys, values)
        if not code:
            return False
        if d.records:  # then nothing else was encoded: `values` holds only this change's records
            d.outbox.append(d.take_records())
        added = len(values) - before
        if added == 1:
            d.encoded_topics.append(topic)
        else:
            d.encoded_topics.extend([topic] * added)
        d.position = (d.final_lsn, lsn)
        d.message_type = _MESSAGE_TYPES[code]
        return True

    def chunk_events(
        self,
        window: ChunkWindow,
        lsn: int,
        now: int,
        offset: dict[str, Any],
        markers: tuple[str | None, str | None],
        point: tuple[int, int] | None,
    ) -> SourceRecordBatch:
        """A snapshot chunk's ``r`` events serialized from its ``COPY`` text; the Python lane's when
        the stream changed some of its rows (dropped by key, which needs them decoded) or a row
        needs the Python lane."""
        if window.raw is not None and not window.changed:
            batch = self._encode_chunk(window, lsn, now, offset, markers, point)
            if batch is not None:
                return batch
        return self.python.chunk_events(window, lsn, now, offset, markers, point)

    def _encode_chunk(
        self,
        window: ChunkWindow,
        lsn: int,
        now: int,
        offset: dict[str, Any],
        markers: tuple[str | None, str | None],
        point: tuple[int, int] | None,
    ) -> SourceRecordBatch | None:
        table = cast(Table, window.table)
        encoder = self.encoder(table)
        if encoder is None:
            return None
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        kind = "incremental" if window.kind == INCREMENTAL else "true"
        at, txid = (lsn, None) if point is None else point
        if not encoder.encode_copy(window.raw, kind, markers[0], markers[1], at, txid, now, keys, values):
            return None
        window.raw = None
        n = len(values)
        return SourceRecordBatch(
            table.topic,
            values,
            keys=keys,
            source_partition=self.decoder.partition,
            offsets_loader=lambda: [offset] * n,
            last_offset=offset,
            serialized=True,
        )
