"""The CDC core's buffer, emitters, outbox and transaction metadata, with no database behind them."""

from __future__ import annotations

from typing import Any

from sluice.connectors.api import Schema, SourceRecord, SourceRecordBatch, Type
from sluice.connectors.cdc.emitter import COLUMNAR_MIN, ChangeBuffer, RecordEmitter, SerializingEmitter
from sluice.connectors.cdc.heartbeats import HeartbeatSchedule, heartbeat_record
from sluice.connectors.cdc.outbox import Outbox
from sluice.connectors.cdc.transactions import TransactionMetadata

VALUE = Schema.struct([("id", Schema(Type.INT64))], name="toy.items.Value")


class Stream(ChangeBuffer):
    """A database source's decoder at its simplest: its position is a counter."""

    def __init__(self) -> None:
        super().__init__({"server": "toy"})
        self.position = 0
        self.batches = 0

    def current_offset(self) -> dict[str, Any]:
        return {"pos": self.position}

    def batch_started(self) -> None:
        self.batches += 1

    def change(self, row_id: int, topic: str = "toy.items") -> None:
        if self.encoded:  # what was pending leaves at the position it ends at
            self.outbox.append(self.take_encoded())
        self.position += 1
        value = {"id": row_id}
        self.records.append(
            SourceRecord(topic, value, VALUE, source_partition=self.partition, source_offset=self.batch_offset)
        )

    def serialized(self, row_id: int) -> None:
        if self.records:
            self.outbox.append(self.take_records())
        self.position += 1
        self.encoded_topics.append("toy.items")
        self.encoded_keys.append(b'{"id":%d}' % row_id)
        self.encoded.append(b'{"after":{"id":%d}}' % row_id)


def test_a_finished_batch_shares_the_offset_of_the_position_it_ends_at() -> None:
    s = Stream()
    s.change(1)
    s.change(2)
    batch = s.finish_batch()
    assert isinstance(batch, list) and [r.source_offset for r in batch] == [{"pos": 2}, {"pos": 2}]
    s.change(3)
    assert s.finish_batch()[0].source_offset == {"pos": 3}  # a new batch, a new offset
    assert s.finish_batch() == [] and s.batches == 2  # nothing pending: no batch started


def test_serialized_and_python_built_records_leave_in_stream_order_with_their_own_offsets() -> None:
    s = Stream()
    s.serialized(1)
    s.serialized(2)
    s.change(3)  # the serialized ones go to the outbox first
    s.serialized(4)  # and the Python-built one after them
    out = [*s.outbox, s.finish_batch()]
    assert [type(b).__name__ for b in out] == ["SourceRecordBatch", "list", "SourceRecordBatch"]
    first, second, third = out
    assert (
        isinstance(first, SourceRecordBatch)
        and first.serialized
        and first.values == [b'{"after":{"id":1}}', b'{"after":{"id":2}}']
    )
    assert first.last_offset == {"pos": 2} and first.topics == ["toy.items", "toy.items"]
    assert isinstance(second, list) and second[0].source_offset == {"pos": 3}
    assert isinstance(third, SourceRecordBatch) and third.last_offset == {"pos": 4}


def test_the_python_lane_hands_out_a_list_with_the_heartbeat_or_a_columnar_batch() -> None:
    s, emitter = Stream(), RecordEmitter()
    heartbeat = heartbeat_record("__debezium-heartbeat.toy", "toy", s.partition, {"pos": 0})
    s.change(1)
    out, later = emitter.hand_out(s.finish_batch(), heartbeat)
    assert (
        later is None and isinstance(out, list) and [r.topic for r in out] == ["toy.items", "__debezium-heartbeat.toy"]
    )
    for i in range(COLUMNAR_MIN):
        s.change(i)
    out, _ = emitter.hand_out(s.finish_batch(), None)
    assert isinstance(out, SourceRecordBatch) and not out.serialized and len(out) == COLUMNAR_MIN
    assert out.last_offset == {"pos": 1 + COLUMNAR_MIN}
    assert emitter.hand_out(s.finish_batch(), None) == (None, None)


def test_the_native_lane_leaves_a_heartbeat_for_the_next_poll_after_a_serialized_batch() -> None:
    s, emitter = Stream(), SerializingEmitter()
    heartbeat = heartbeat_record("hb", "toy", s.partition, {"pos": 0})
    s.serialized(1)
    out, later = emitter.hand_out(s.finish_batch(), heartbeat)
    assert isinstance(out, SourceRecordBatch) and out.serialized and later is heartbeat
    s.change(2)  # declined by the encoder: the Python lane's list, with the heartbeat
    out, later = emitter.hand_out(s.finish_batch(), heartbeat)
    assert isinstance(out, list) and out[-1] is heartbeat and later is None


def test_the_outbox_confirms_a_position_only_once_its_last_batch_was_handed_out() -> None:
    outbox: Outbox[int] = Outbox(0)
    assert not outbox and outbox.polled_safe == 0
    outbox.fill([["a"], ["b"]], 40)  # type: ignore[list-item]
    assert outbox.take() == ["a"] and outbox.polled_safe == 0  # a commit now must not confirm 40
    assert outbox.take() == ["b"] and outbox.polled_safe == 40 and not outbox


def test_transaction_metadata_frames_the_events_of_a_transaction() -> None:
    s = Stream()
    tx = TransactionMetadata("toy.transaction", s)
    tx.begin("7:100", 1_700_000_000_000)
    tx.end()
    assert s.records == []  # no captured event: no BEGIN, no END
    tx.begin("8:200", 1_700_000_000_001)
    blocks = [tx.block("db.a"), tx.block("db.b"), tx.block("db.a")]
    tx.end()
    assert [b["data_collection_order"] for b in blocks] == [1, 1, 2] and blocks[2]["total_order"] == 3
    begin, end = (r.value for r in s.records)
    assert (begin["status"], begin["id"], begin["event_count"]) == ("BEGIN", "8:200", None)
    assert end["event_count"] == 3 and end["ts_ms"] == 1_700_000_000_001
    assert end["data_collections"] == [
        {"data_collection": "db.a", "event_count": 2},
        {"data_collection": "db.b", "event_count": 1},
    ]


def test_heartbeats_are_due_once_per_interval_and_never_when_off() -> None:
    off = HeartbeatSchedule(0)
    assert not off.due(off.next_at + 10**6)
    on = HeartbeatSchedule(1000)
    start = on.next_at
    assert not on.due(start - 0.5) and on.due(start) and not on.due(start + 0.5) and on.due(start + 1.0)
