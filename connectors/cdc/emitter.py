"""Where a database source's change events wait, and the two ways they leave a poll.

A source's decoder appends each event to a :class:`ChangeBuffer` as it decodes it: built in
Python as a :class:`SourceRecord` (:attr:`ChangeBuffer.records`), or, when the runtime lets the
task write the converters' bytes itself, serialized by a native encoder into the key, value and
topic columns (:attr:`ChangeBuffer.encoded`, …). The two kinds are never pending at once:
appending one kind first moves the pending ones of the other into the :attr:`ChangeBuffer.outbox`,
as a batch with its own offset, so records leave in stream order. Everything that must leave before
what is decoded later (a snapshot chunk, notifications) goes to the outbox too.

How a poll's records are handed out is a :class:`ChangeEmitter`, chosen once when the task starts:
:class:`RecordEmitter` (every record built in Python: a plain list, or a columnar batch when it is
long and uniform) or :class:`SerializingEmitter` (serialized batches as they are, and the Python
lane's records for what the native encoder declines). A database source extends them with how it
builds its events (its ``source`` block, its native encoder's call, its snapshot rows).
"""

from __future__ import annotations

import abc
from typing import Any, cast

from sluice.connectors.api import SourceRecord, SourceRecordBatch

#: Polls with at least this many events of one table (and no tombstones) go out as a columnar batch.
COLUMNAR_MIN = 32

Batch = list[SourceRecord] | SourceRecordBatch


class ChangeBuffer(abc.ABC):
    """The events decoded and not handed out yet, in stream order. Thread: the task thread.

    The runtime stores the offset of the last record of a poll (it commits only between polls), so
    the Python-built records of one batch share one offset dict, :attr:`batch_offset`, filled in
    from :meth:`current_offset` when the batch is finished; a serialized batch carries its offset.
    A decoder extends this class with :meth:`current_offset` and, optionally, :meth:`batch_started`.
    """

    def __init__(self, partition: dict[str, Any]) -> None:
        self.partition = partition
        self.records: list[SourceRecord] = []
        self.batch_offset: dict[str, Any] = {}
        #: Finished batches to hand out before anything decoded later.
        self.outbox: list[Batch] = []
        # The serialized records (native encoding): one topic, key and value per record.
        self.encoded_topics: list[str] = []
        self.encoded_keys: list[bytes | None] = []
        self.encoded: list[bytes | None] = []
        # transaction.boundary=connector only (follow_transactions): where the last transaction
        # committed in the pending events, (records, encoded) counts then, and that point's offset.
        self.settled_at: tuple[int, int] | None = None
        self.settled_offset: dict[str, Any] = {}

    @abc.abstractmethod
    def current_offset(self) -> dict[str, Any]:
        """The source offset of the position decoded so far (what a batch finished now carries)."""

    def batch_started(self) -> None:  # noqa: B027 - an optional hook: most decoders need nothing here
        """A batch was finished; the next one starts (a decoder may take a new processing time)."""

    def settled(self) -> bool:
        """Whether every event decoded so far belongs to a committed database transaction. A decoder
        that offers connector-defined transaction boundaries overrides it; the default, for a
        source without transactions, says yes."""
        return True

    def transaction_settled(self) -> None:
        """A decoder's hook, called (only with connector-defined transaction boundaries) when every
        event decoded so far belongs to a committed transaction: the pending events up to here may
        leave alone (:meth:`take_settled`). The records up to here keep the offset of this point;
        those decoded later share a new one."""
        mark = (len(self.records), len(self.encoded))
        if mark == self.settled_at:  # nothing new: the same events, a later position
            self.settled_offset.update(self.current_offset())
            return
        self.batch_offset.update(self.current_offset())
        self.settled_offset = self.batch_offset
        self.batch_offset = {}
        self.settled_at = mark

    def take_settled(self) -> Batch | None:
        """The pending events up to the last :meth:`transaction_settled` point (an empty list: none
        before it; ``None``: no such point since the last batch); the events after it stay pending.
        For a batch that must not end inside a transaction, when the decoder stands inside one and
        :attr:`outbox` is empty."""
        mark, self.settled_at = self.settled_at, None
        if mark is None:
            return None
        records, encoded = mark
        if encoded:
            offset = self.settled_offset
            values, keys, topics = self.encoded[:encoded], self.encoded_keys[:encoded], self.encoded_topics[:encoded]
            del self.encoded[:encoded], self.encoded_keys[:encoded], self.encoded_topics[:encoded]
            return SourceRecordBatch(
                None,
                values,
                keys=keys,
                topics=topics,
                source_partition=self.partition,
                offsets_loader=lambda: [offset] * encoded,
                last_offset=offset,
                serialized=True,
            )
        head = self.records[:records]
        del self.records[:records]
        return head

    def finish_batch(self) -> Batch:
        """The events decoded since the last call, sharing the current position as their offset."""
        if self.encoded:
            return self.take_encoded()
        return self.take_records()

    def take_records(self) -> list[SourceRecord]:
        """The pending Python-built records (their shared offset filled in)."""
        records = self.records
        self.records = []
        self.settled_at = None
        if records:
            self.batch_offset.update(self.current_offset())
            self.batch_offset = {}
            self.batch_started()
        return records

    def take_encoded(self) -> SourceRecordBatch:
        """The pending serialized records, as one batch."""
        offset = self.current_offset()
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
        self.settled_at = None
        self.batch_started()
        return batch


class RecordEmitter:
    """The Python lane: every event is a :class:`SourceRecord` the runtime converts.

    A database source extends it with how it builds its events. Thread: the task thread."""

    def hand_out(self, batch: Batch, heartbeat: SourceRecord | None) -> tuple[Batch | None, SourceRecord | None]:
        """What a poll returns for its finished ``batch`` (``None``: nothing) with the ``heartbeat``
        due now, and the heartbeat left for the next poll (``None`` here: it goes with this one)."""
        records = cast(list[SourceRecord], batch)  # this lane only builds lists
        if heartbeat is not None:
            records.append(heartbeat)
        if len(records) >= COLUMNAR_MIN:
            return as_batch(records), None
        return records or None, None


class SerializingEmitter(RecordEmitter):
    """The native lane: events serialized by a native encoder leave as a batch with
    ``serialized=True``; what the encoder declines is built in Python and leaves as the Python
    lane's does. Thread: the task thread."""

    def hand_out(self, batch: Batch, heartbeat: SourceRecord | None) -> tuple[Batch | None, SourceRecord | None]:
        if isinstance(batch, SourceRecordBatch):  # serialized: the heartbeat follows with the next poll
            return batch, heartbeat
        return super().hand_out(batch, heartbeat)


def as_batch(records: list[SourceRecord]) -> Batch:
    """The records as a :class:`SourceRecordBatch` when they share a topic and schemas and none is
    a tombstone: the runtime then converts each column in one call and produces in a tight loop.
    The records of one poll share their offset (see :meth:`ChangeBuffer.take_records`)."""
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
