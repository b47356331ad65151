"""The S3 source task in restore mode against an in-memory bucket the sink filled."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from sluice.connectors.api import SinkRecord, SinkRecordBatch, SourceRecord, TopicPartition
from sluice.connectors.s3_common.storage import MemoryStorage
from sluice.connectors.sink.s3.task import S3SinkTask
from sluice.connectors.source.s3 import S3SourceConnector
from sluice.connectors.source.s3.task import S3SourceTask, decode_headers

T0 = 1_700_000_000_000


class Offsets:
    def __init__(self, stored: dict[tuple[str, int], Mapping[str, Any]] | None = None) -> None:
        self.stored = stored or {}

    def offset(self, partition: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return self.stored.get((partition["topic"], partition["partition"]))

    def offsets(self, partitions: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any] | None]:
        return [self.offset(p) for p in partitions]


class Context:
    connector_name = "restore"
    task_id = 0

    def __init__(self, offsets: Offsets) -> None:
        self.offset_reader = offsets


@pytest.fixture
def bucket() -> Iterator[MemoryStorage]:
    storage = MemoryStorage("bkt")
    S3SinkTask.storage_factory = lambda cfg: storage
    S3SourceTask.storage_factory = lambda cfg: storage
    yield storage
    S3SinkTask.storage_factory = None
    S3SourceTask.storage_factory = None


COMMON = {"s3.bucket.name": "bkt", "format.class": "parquet"}
# The sink uploads on its task thread: every completed object is in the bucket when put() returns
# (with background upload threads a source listing could run before the last upload finished).
SINK = {**COMMON, "s3.upload.threads": "0"}


def _archive(count: int = 23) -> list[SinkRecord]:
    sink = S3SinkTask()
    sidecars = {"store.kafka.keys": "true", "store.kafka.headers": "true", "store.kafka.timestamps": "true"}
    sink.start({**SINK, "flush.size": "5", **sidecars}, None)  # type: ignore[arg-type]
    records = [
        SinkRecord(
            "t", i % 2, i // 2, {"i": i}, key=f"k{i}", timestamp=T0 + i, headers=(("h", b"\x00"), ("s", f"v{i}"))
        )
        for i in range(count)
    ]
    sink.put(SinkRecordBatch.of(records))
    return records


def _drain(task: S3SourceTask, limit: int = 100) -> list[SourceRecord]:
    out: list[SourceRecord] = []
    for _ in range(limit):
        batch = task.poll()
        if not batch:
            break
        out.extend(batch)
    return out


def _source(offsets: Offsets | None = None, **extra: str) -> S3SourceTask:
    task = S3SourceTask()
    task.start(
        {**COMMON, "topics": "t", "s3.poll.interval.ms": "100", "record.batch.max.size": "3", **extra},
        Context(offsets or Offsets()),
    )  # type: ignore[arg-type]
    return task


def test_restore_replays_committed_objects_per_partition_in_offset_order(bucket: MemoryStorage) -> None:
    originals = _archive()
    got = _drain(_source())
    # Only completed objects are restored: 20 of the 23 records (flush.size 5 per partition).
    assert len(got) == 20
    for partition in (0, 1):
        mine = [r for r in got if r.partition == partition]
        expected = [r for r in originals if r.partition == partition][:10]
        assert [r.value for r in mine] == [r.value for r in expected]
        assert [r.key for r in mine] == [r.key for r in expected]
        assert [r.timestamp for r in mine] == [r.timestamp for r in expected]
        assert [r.headers for r in mine] == [r.headers for r in expected]
        assert all(r.topic == "t" for r in mine)


def test_restart_resumes_mid_object(bucket: MemoryStorage) -> None:
    _archive()
    # Polls return at most 3 records and never span objects: [0, 1, 2], [3, 4], then 3 of object 5.
    first = _drain(_source(), limit=3)
    last = first[-1]
    assert last.source_offset == {"object": "topics/t/partition=0/t+0+0000000005.parquet", "start": 5, "position": 3}
    stored = Offsets({("t", 0): last.source_offset})  # type: ignore[dict-item]
    rest = _drain(_source(stored))
    assert [r.value["i"] for r in rest if r.partition == 0] == [16, 18]
    assert len([r for r in rest if r.partition == 1]) == 10


def test_new_objects_are_picked_up_on_the_next_listing(bucket: MemoryStorage) -> None:
    _archive(10)
    task = _source()
    assert len(_drain(task)) == 10
    sink = S3SinkTask()
    sink.start({**SINK, "flush.size": "5"}, None)  # type: ignore[arg-type]
    sink.put(SinkRecordBatch.of([SinkRecord("t", 0, o, {"i": 100 + o}) for o in range(5, 10)]))
    import time

    time.sleep(0.15)
    assert [r.value["i"] for r in _drain(task)] == [105, 106, 107, 108, 109]


def test_connector_splits_topics_over_tasks(bucket: MemoryStorage) -> None:
    connector = S3SourceConnector()
    connector.start(S3SourceConnector.validate({**COMMON, "topics": "a,b,c"}))
    configs = connector.task_configs(2)
    assert [c["s3.source.task.topics"] for c in configs] == ["a,c", "b"]
    assert "io.confluent.connect.s3.source.S3SourceConnector" in S3SourceConnector.aliases


def test_headers_decode_bytes_markers() -> None:
    assert decode_headers([["a", {"$bytes": "AAE="}], ["b", "x"]]) == (("a", b"\x00\x01"), ("b", "x"))
    assert decode_headers([]) is None
    assert TopicPartition("t", 0).topic == "t"
