"""Records → bulk action lines: ids, verbs, tombstones, invalid records, versions, lanes."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import orjson

from sluice.connectors.api import SinkRecord, SinkRecordBatch
from sluice.connectors.sink.elasticsearch.config import ElasticsearchSinkConfig
from sluice.connectors.sink.elasticsearch.documents import ActionBuilder, Built, Target, document_bytes


def _builder(lanes: int = 1, **extra: Any) -> ActionBuilder:
    cfg = ElasticsearchSinkConfig.parse({"connection.url": "http://h:9200", **{k.replace("_", "."): v for k, v in extra.items()}})
    return ActionBuilder(cfg, lanes)


def _lines(built: Built) -> list[Any]:
    return [orjson.loads(line) for lane in built.payloads for p in lane for line in p.splitlines()]


def _recs(*values: Any, keys: Any = None, topic: str = "t", headers: Any = None) -> SinkRecordBatch:
    keys = keys or [f"k{i}" for i in range(len(values))]
    return SinkRecordBatch.of(
        [
            SinkRecord(topic, 0, 10 + i, v, key=k, timestamp=1000 + i, headers=headers[i] if headers else None)
            for i, (k, v) in enumerate(zip(keys, values))
        ]
    )


def test_insert_uses_the_key_as_id() -> None:
    built = _builder().build("t", _recs({"a": 1}, {"a": 2}), Target("t"))
    assert _lines(built) == [
        {"index": {"_index": "t", "_id": "k0"}}, {"a": 1},
        {"index": {"_index": "t", "_id": "k1"}}, {"a": 2},
    ]
    assert [c.pending for c in built.all_chunks] == [2]
    assert built.all_chunks[0].first_offset == 10


def test_key_ignore_uses_topic_partition_offset_and_integer_keys_are_ids() -> None:
    built = _builder(key_ignore="true").build("t", _recs({"a": 1}), Target("t"))
    assert _lines(built)[0] == {"index": {"_index": "t", "_id": "t+0+10"}}
    built = _builder().build("t", _recs({"a": 1}, keys=[42]), Target("t"))
    assert _lines(built)[0] == {"index": {"_index": "t", "_id": "42"}}


def test_upsert_sends_partial_documents() -> None:
    built = _builder(write_method="upsert").build("t", _recs({"a": 1}), Target("t"))
    assert _lines(built) == [{"update": {"_index": "t", "_id": "k0"}}, {"doc": {"a": 1}, "doc_as_upsert": True}]


def test_tombstones_follow_behavior_on_null_values() -> None:
    records = _recs({"a": 1}, None)
    deleted = _builder(behavior_on_null_values="delete").build("t", records, Target("t"))
    assert _lines(deleted)[-1] == {"delete": {"_index": "t", "_id": "k1"}}
    ignored = _builder(behavior_on_null_values="ignore").build("t", records, Target("t"))
    assert len(_lines(ignored)) == 2 and ignored.skipped == 1
    failed = _builder().build("t", records, Target("t"))
    assert [(r.index, r.null) for r in failed.rejected] == [(1, True)]


def test_records_that_cannot_be_documents_are_rejected_not_sent() -> None:
    records = _recs({"ok": 1}, {"x": 1}, [1, 2], "not json", keys=["a", {"struct": "key"}, "c", "d"])
    built = _builder().build("t", records, Target("t"))
    assert len(_lines(built)) == 2
    reasons = {r.index: r.reason for r in built.rejected}
    assert set(reasons) == {1, 2, 3}
    assert "dict key" in reasons[1] and "key.ignore" in reasons[1]
    assert "list" in reasons[2]
    assert "not valid JSON" in reasons[3]


def test_json_text_values_pass_through_and_pretty_json_is_compacted() -> None:
    assert document_bytes('{"a": 1}') == b'{"a": 1}'
    assert document_bytes(b'{\n  "a": 1\n}') == b'{"a":1}'


def test_connect_values_serialise() -> None:
    value = {
        "price": decimal.Decimal("1.25"),
        "raw": b"\x00\x01",
        "at": dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        "day": dt.date(2024, 1, 2),
        "t": dt.time(1, 2, 3, 4000),
        "m": {1: "one"},
    }
    assert orjson.loads(document_bytes(value)) == {
        "price": 1.25,
        "raw": "AAE=",
        "at": "2024-01-02T03:04:05+00:00",
        "day": "2024-01-02",
        "t": "01:02:03.004000",
        "m": {"1": "one"},
    }


def test_external_version_from_a_header() -> None:
    records = _recs({"a": 1}, {"a": 2}, headers=[(("lsn", b"77"),), ()])
    built = _builder(external_version_header="lsn").build("t", records, Target("t"))
    assert _lines(built)[0] == {"index": {"_index": "t", "_id": "k0", "version": 77, "version_type": "external"}}
    assert [r.index for r in built.rejected] == [1]


def test_data_streams_create_with_a_timestamp() -> None:
    builder = _builder(data_stream_type="logs", data_stream_dataset="app", data_stream_timestamp_field="when")
    built = builder.build("t", _recs({"a": 1}, {"when": "2024-01-01T00:00:00Z"}, {}), Target("logs-app-t", data_stream=True))
    lines = _lines(built)
    assert lines[0] == {"create": {"_index": "logs-app-t", "_id": "k0"}}
    assert lines[1] == {"@timestamp": 1000, "a": 1}
    assert lines[3] == {"@timestamp": "2024-01-01T00:00:00Z", "when": "2024-01-01T00:00:00Z"}
    assert lines[5] == {"@timestamp": 1002}


def test_one_id_always_takes_the_same_lane() -> None:
    builder = _builder(lanes=4)
    keys = [f"k{i % 7}" for i in range(200)]
    built = builder.build("t", _recs(*({"i": i} for i in range(200)), keys=keys), Target("t"))
    lanes_of: dict[str, set[int]] = {}
    for lane, payloads in enumerate(built.payloads):
        for p in payloads:
            lanes_of.setdefault(orjson.loads(p.split(b"\n")[0])["index"]["_id"], set()).add(lane)
    assert all(len(v) == 1 for v in lanes_of.values())
    assert sum(len(p) for p in built.payloads) == 200


def test_columnar_batches_with_two_partitions_make_two_chunks() -> None:
    values = [{"i": i} for i in range(4)]
    columns = {"partition": [0, 1, 0, 1], "kafka_offset": [5, 7, 6, 8]}
    batch = SinkRecordBatch("t", values, [None] * 4, ["a", "b", "c", "d"], [None] * 4, columns.__getitem__)
    built = _builder().build("t", batch, Target("t"))
    assert sorted((c.tp.partition, c.first_offset, c.pending) for c in built.all_chunks) == [(0, 5, 2), (1, 7, 2)]
