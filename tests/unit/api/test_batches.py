from __future__ import annotations

from typing import Any

import pytest

from sluice.connectors.api import (
    STRING_SCHEMA,
    DataError,
    SinkRecord,
    SinkRecordBatch,
    SourceRecord,
    SourceRecordBatch,
    TopicPartition,
    Transformation,
    UnusableRawValues,
    WireFormat,
)


def test_source_batch_is_a_sequence_of_ordinary_records() -> None:
    calls = []

    def offsets() -> list[dict]:
        calls.append(1)
        return [{"position": p} for p in (3, 7)]

    batch = SourceRecordBatch(
        "t", ["ab", "cde"], value_schema=STRING_SCHEMA, source_partition={"filename": "f"},
        offsets_loader=offsets, last_offset={"position": 7},
    )
    assert batch.last_offset == {"position": 7} and calls == []  # the runtime's fast path builds nothing
    assert len(batch) == 2
    assert list(batch) == [
        SourceRecord("t", "ab", STRING_SCHEMA, source_partition={"filename": "f"}, source_offset={"position": 3}),
        SourceRecord("t", "cde", STRING_SCHEMA, source_partition={"filename": "f"}, source_offset={"position": 7}),
    ]
    assert batch[1].value == "cde" and batch[-1].source_offset == {"position": 7}
    assert calls == [1]


def test_source_batch_checks_column_lengths() -> None:
    with pytest.raises(ValueError, match="keys"):
        SourceRecordBatch("t", ["a"], keys=["k1", "k2"])
    with pytest.raises(ValueError, match="source_offsets"):
        SourceRecordBatch("t", ["a"], source_offsets=[])
    assert SourceRecordBatch("t", ["a"], source_offsets=[{"n": 1}]).last_offset == {"n": 1}
    with pytest.raises(ValueError, match="topics"):
        SourceRecordBatch(None, ["a"], topics=["x", "y"])
    with pytest.raises(ValueError, match="partitions"):
        SourceRecordBatch("t", ["a"], partitions=[])
    with pytest.raises(ValueError, match="topic"):
        SourceRecordBatch("t", ["a"], topics=["x"])  # one topic, or a column of them
    with pytest.raises(ValueError, match="topic"):
        SourceRecordBatch(None, ["a"])
    with pytest.raises(ValueError, match="schemas"):
        SourceRecordBatch("t", [b"a"], value_schema=STRING_SCHEMA, serialized=True)


def test_source_batch_with_topic_and_partition_columns_yields_records_that_say_so() -> None:
    sp = {"server": "db"}
    batch = SourceRecordBatch(
        None, [b"1", None], keys=[b"k1", b"k2"], topics=["db.a", "db.b"], partitions=[None, 3],
        source_partition=sp, last_offset={"lsn": 9}, offsets_loader=lambda: [{"lsn": 9}] * 2, serialized=True,
    )  # fmt: skip
    assert batch.topic is None and batch.serialized and batch.last_offset == {"lsn": 9}
    assert list(batch) == [
        SourceRecord("db.a", b"1", None, b"k1", None, None, source_partition=sp, source_offset={"lsn": 9}),
        SourceRecord("db.b", None, None, b"k2", None, 3, source_partition=sp, source_offset={"lsn": 9}),
    ]
    assert "serialized" in repr(batch) and "db.b" in repr(batch)


def test_sink_batch_loads_other_columns_only_when_asked() -> None:
    asked = []

    def load(column: str) -> list:
        asked.append(column)
        return {"partition": [0, 0], "kafka_offset": [5, 6], "timestamp": [10, None], "timestamp_type": [1, 0], "headers": [None, (("h", "v"),)]}[column]

    batch = SinkRecordBatch("t", ["a", "b"], [STRING_SCHEMA] * 2, [None, "k"], [None, STRING_SCHEMA], load)
    assert batch.values == ["a", "b"] and asked == []
    assert batch.offsets == [5, 6] and asked == ["kafka_offset"]
    assert batch[1] == SinkRecord("t", 0, 6, "b", STRING_SCHEMA, "k", STRING_SCHEMA, None, 0, (("h", "v"),))
    assert [r.kafka_offset for r in batch] == [5, 6]


def _columns(offsets: list[int]) -> Any:
    n = len(offsets)
    return {"partition": [0] * n, "kafka_offset": offsets, "timestamp": [None] * n, "timestamp_type": [0] * n,
            "headers": [None] * n}.__getitem__  # fmt: skip


def test_sink_batch_decodes_raw_keys_on_first_read_only() -> None:
    calls = []

    def decode_keys() -> tuple[list[Any], list[Any]]:
        calls.append(1)
        return [STRING_SCHEMA, None], ["k1", None]

    batch = SinkRecordBatch(
        "t", ["a", "b"], [STRING_SCHEMA] * 2, None, None, _columns([3, 4]),
        raw_keys=[b"k1", None], decode_keys=decode_keys, raw_key_format=WireFormat("json", schemas=True),
    )  # fmt: skip
    assert len(batch) == 2 and batch.raw_keys == [b"k1", None] and calls == []
    assert batch.raw_key_format == WireFormat("json", schemas=True) and batch.key_writer_schema is None
    assert batch.keys == ["k1", None] and batch.key_schemas == [STRING_SCHEMA, None]
    assert batch[0] == SinkRecord("t", 0, 3, "a", STRING_SCHEMA, "k1", STRING_SCHEMA, None, 0, None)
    assert calls == [1]  # once, for both columns


def test_sink_batch_raw_keys_that_do_not_convert_are_given_back_from_the_first_record() -> None:
    def decode_keys() -> tuple[list[Any], list[Any]]:
        raise DataError("not an envelope")

    batch = SinkRecordBatch(
        "t", None, None, None, None, _columns([8, 9]), original_topic="in", raw_values=[b"1", b"2"],
        decode=lambda: ([None, None], [1, 2]), raw_keys=[b"x", b"y"], decode_keys=decode_keys,
    )  # fmt: skip
    assert batch.values == [1, 2]  # values decode on their own
    for read in (lambda: batch.keys, lambda: batch.key_schemas, lambda: list(batch)):
        with pytest.raises(UnusableRawValues, match="keys of topic 'in' do not convert") as info:
            read()
        assert info.value.offsets == {TopicPartition("in", 0): 8}


def test_sink_batch_without_keys_needs_raw_keys_and_their_decoder() -> None:
    with pytest.raises(ValueError, match="raw_keys and decode_keys"):
        SinkRecordBatch("t", [1], [None], None, None, _columns([0]), raw_keys=[b"k"])
    with pytest.raises(ValueError, match="raw_keys and decode_keys"):
        SinkRecordBatch("t", [1], [None], None, None, _columns([0]), decode_keys=lambda: ([None], ["k"]))


def test_a_batch_of_records_has_its_keys_decoded_already() -> None:
    batch = SinkRecordBatch.of([SinkRecord("t", 0, 1, "v", None, "k", STRING_SCHEMA)])
    assert batch.raw_keys is None and batch.raw_key_format is None
    assert batch.keys == ["k"] and batch.key_schemas == [STRING_SCHEMA] and len(batch) == 1


def test_values_given_back_by_the_batch_a_transform_rewrote_keep_its_offsets() -> None:
    """A batch whose values come from another batch (a transform rewrote its raw values) gives back
    what that one names: the consumed offsets, not its own first (``Transformation.keeps_raw_values``)."""
    consumed = {TopicPartition("in", 0): 7}

    def decode() -> tuple[list[Any], list[Any]]:
        raise UnusableRawValues("values of topic 'in' do not convert", consumed)

    batch = SinkRecordBatch("t", None, None, [None], [None], _columns([9]), raw_values=[b"1"], decode=decode)
    with pytest.raises(UnusableRawValues) as info:
        batch.values  # noqa: B018 - reading decodes
    assert info.value.offsets == consumed


def test_a_transform_keeps_no_raw_values_unless_it_says_so() -> None:
    class Same(Transformation):
        def apply(self, record: Any) -> Any:
            return record

    assert not Same().keeps_raw_values(WireFormat("json", schemas=True))
    assert Same().apply_columns(SinkRecordBatch.of([SinkRecord("t", 0, 1, "v", None)])) is None


def _raw_batch(offsets: list[int], values: list[Any], fail: bool = False, topic: str = "t") -> SinkRecordBatch:
    """A batch of raw values and raw keys (JSON), decoded as ``values``/their keys unless ``fail``."""

    def decode() -> tuple[list[Any], list[Any]]:
        if fail:
            raise DataError("not JSON")
        return [None] * len(values), values

    return SinkRecordBatch(
        topic, None, None, None, None, _columns(offsets), original_topic="in",
        raw_values=[b"%d" % v for v in values], decode=decode, raw_format=WireFormat("json"),
        raw_keys=[b"k%d" % o for o in offsets], decode_keys=lambda: ([None] * len(offsets), [f"k{o}" for o in offsets]),
        raw_key_format=WireFormat("json"),
    )  # fmt: skip


def test_consecutive_batches_join_into_one_with_raw_values_and_keys_kept_raw() -> None:
    joined = SinkRecordBatch.concat([_raw_batch([3, 4], [30, 40]), _raw_batch([5], [50])])
    assert len(joined) == 3 and joined.raw_values == [b"30", b"40", b"50"] and joined.raw_keys == [b"k3", b"k4", b"k5"]
    assert joined.raw_format == WireFormat("json") and joined.original_topic == "in"
    assert joined.offsets == [3, 4, 5] and joined.partitions == [0, 0, 0]
    assert joined.values == [30, 40, 50] and joined.keys == ["k3", "k4", "k5"]
    assert [r.kafka_offset for r in joined] == [3, 4, 5]


def test_joined_raw_values_that_do_not_convert_are_given_back_from_the_part_that_fails() -> None:
    joined = SinkRecordBatch.concat([_raw_batch([3, 4], [30, 40]), _raw_batch([5, 6], [0, 0], fail=True)])
    with pytest.raises(UnusableRawValues) as info:
        joined.values  # noqa: B018
    assert info.value.offsets == {TopicPartition("in", 0): 5}


def test_batches_of_different_topics_or_forms_do_not_join() -> None:
    decoded = SinkRecordBatch.of([SinkRecord("t", 0, 9, "v", None, "k", STRING_SCHEMA)])
    raw = _raw_batch([3], [30])
    assert raw.joinable(_raw_batch([4], [40])) and not raw.joinable(_raw_batch([4], [40], topic="u"))
    assert not raw.joinable(decoded) and not decoded.joinable(raw)
    with pytest.raises(ValueError, match="cannot be joined"):
        SinkRecordBatch.concat([raw, decoded])
    assert SinkRecordBatch.concat([decoded, decoded]).values == ["v", "v"]

