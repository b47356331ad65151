"""Restore of interleaved objects in offset order, and generic mode, against an in-memory bucket."""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sluice.connectors.api import ConfigError, SinkRecord, SinkRecordBatch, SourceRecord
from sluice.connectors.s3_common.storage import MemoryStorage
from sluice.connectors.sink.s3.task import S3SinkTask
from sluice.connectors.source.s3 import S3SourceConnector
from sluice.connectors.source.s3.config import S3SourceConfig
from sluice.connectors.source.s3.task import S3SourceTask

T0 = 1_700_000_000_000
HOUR = 3_600_000


class Offsets:
    """An offset reader holding whatever the test stored, keyed by the whole source partition."""

    def __init__(self, stored: list[tuple[Mapping[str, Any], Mapping[str, Any]]] | None = None) -> None:
        self.stored = {orjson.dumps(p, option=orjson.OPT_SORT_KEYS): o for p, o in stored or []}

    def offset(self, partition: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return self.stored.get(orjson.dumps(partition, option=orjson.OPT_SORT_KEYS))

    def offsets(self, partitions: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any] | None]:
        return [self.offset(p) for p in partitions]


class Context:
    connector_name = "s3-source"
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


def _drain(task: S3SourceTask, limit: int = 200) -> list[SourceRecord]:
    out: list[SourceRecord] = []
    for _ in range(limit):
        batch = task.poll()
        if not batch:
            break
        out.extend(batch)
    return out


def _source(config: dict[str, str], offsets: Offsets | None = None) -> S3SourceTask:
    task = S3SourceTask()
    task.start({"s3.poll.interval.ms": "100", "record.batch.max.size": "4", **config}, Context(offsets or Offsets()))  # type: ignore[arg-type]
    return task


# -- restore: interleaved objects ------------------------------------------------------------------

TIME_BASED = {
    "s3.bucket.name": "bkt",
    "format.class": "json",
    "partitioner.class": "TimeBasedPartitioner",
    "path.format": "'h'=HH",
    "partition.duration.ms": str(HOUR),
    "timestamp.extractor": "Record",
    "flush.size": "6",
    "s3.upload.threads": "0",
    "store.kafka.keys": "true",
    "store.kafka.timestamps": "true",
}


def _archive_interleaved(count: int = 24) -> list[SinkRecord]:
    """Partition 0's records alternate between two hour buckets, partition 1 has three buckets with
    a late record: every flush commits objects whose offsets interleave."""
    sink = S3SinkTask()
    sink.start(TIME_BASED, None)  # type: ignore[arg-type]
    records = []
    for o in range(count):
        records.append(SinkRecord("t", 0, o, {"o": o}, key=f"k{o}", timestamp=T0 + (o % 2) * HOUR))
        records.append(SinkRecord("t", 1, o, {"o": 100 + o}, timestamp=T0 + (o % 3) * HOUR - (HOUR if o == 7 else 0)))
    sink.put(SinkRecordBatch.of(records))
    return records


def test_interleaved_objects_restore_each_partition_in_offset_order(bucket: MemoryStorage) -> None:
    _archive_interleaved()
    data = sorted(k for k in bucket.objects if k.count(".") == 1)
    assert "topics/t/h=22/t+0+0000000000.json" in data and "topics/t/h=23/t+0+0000000001.json" in data
    got = _drain(_source({**TIME_BASED, "topics": "t"}))
    zero = [r for r in got if r.partition == 0]
    assert [r.value["o"] for r in zero] == list(range(24))  # not object by object: 0,2,4,1,3,5,...
    assert [r.key for r in zero] == [f"k{o}" for o in range(24)]
    assert [r.timestamp for r in zero] == [T0 + (o % 2) * HOUR for o in range(24)]
    assert [r.value["o"] - 100 for r in got if r.partition == 1] == list(range(24))
    assert zero[5].source_offset["offset"] == 5  # type: ignore[index]


def test_interleaved_restore_resumes_after_the_stored_kafka_offset(bucket: MemoryStorage) -> None:
    _archive_interleaved()
    first = _drain(_source({**TIME_BASED, "topics": "t"}), limit=2)  # 8 records
    last_zero = [r for r in first if r.partition == 0][-1]
    stored = Offsets([(last_zero.source_partition, last_zero.source_offset)])  # type: ignore[list-item]
    rest = _drain(_source({**TIME_BASED, "topics": "t"}, stored))
    resumed = [r.value["o"] for r in rest if r.partition == 0]
    assert resumed == list(range(last_zero.source_offset["offset"] + 1, 24))  # type: ignore[index]


def test_objects_without_offsets_sidecars_replay_object_by_object(bucket: MemoryStorage) -> None:
    sink = S3SinkTask()
    sink.start({**TIME_BASED, "store.kafka.offsets": "false"}, None)  # type: ignore[arg-type]
    sink.put(SinkRecordBatch.of([SinkRecord("t", 0, o, {"o": o}, timestamp=T0 + (o % 2) * HOUR) for o in range(6)]))
    assert not [k for k in bucket.objects if ".offsets." in k]
    got = _drain(_source({**TIME_BASED, "topics": "t"}))
    assert [r.value["o"] for r in got] == [0, 2, 4, 1, 3, 5]  # start-offset order, the best it can do


# -- generic mode ----------------------------------------------------------------------------------


def _lines(*values: Any) -> bytes:
    return b"".join(orjson.dumps(v) + b"\n" for v in values)


GENERIC = {
    "s3.bucket.name": "bkt",
    "mode": "GENERIC",
    "format.class": "json",
    "topics.dir": "landing",
    "topic.regex.list": r"orders:orders/.*\.json(\.gz)?,clicks:clicks/.*",
}


def test_generic_mode_maps_keys_to_topics_and_reads_every_matching_object(bucket: MemoryStorage) -> None:
    bucket.objects["landing/orders/2024/a.json"] = _lines({"id": 1}, {"id": 2})
    bucket.objects["landing/orders/2024/b.json.gz"] = gzip.compress(_lines({"id": 3}))
    bucket.objects["landing/clicks/c.json"] = _lines({"click": "x"})
    bucket.objects["landing/other/d.json"] = _lines({"ignored": True})
    bucket.objects["elsewhere/orders/e.json"] = _lines({"ignored": True})
    got = _drain(_source(GENERIC))
    assert sorted((r.topic, orjson.dumps(r.value)) for r in got) == [
        ("clicks", b'{"click":"x"}'),
        ("orders", b'{"id":1}'),
        ("orders", b'{"id":2}'),
        ("orders", b'{"id":3}'),
    ]
    first = next(r for r in got if r.value == {"id": 1})
    assert first.source_partition == {"bucket": "bkt", "object": "landing/orders/2024/a.json"}
    assert first.source_offset == {"position": 1, "complete": False}
    assert first.key is None and first.partition is None


def test_generic_mode_resumes_mid_object_and_skips_complete_objects(bucket: MemoryStorage) -> None:
    bucket.objects["landing/orders/a.json"] = _lines(*({"id": i} for i in range(5)))
    bucket.objects["landing/orders/b.json"] = _lines({"id": 10})
    stored = Offsets([
        ({"bucket": "bkt", "object": "landing/orders/a.json"}, {"position": 3, "complete": False}),
        ({"bucket": "bkt", "object": "landing/orders/b.json"}, {"position": 1, "complete": True}),
    ])
    got = _drain(_source(GENERIC, stored))
    assert [r.value["id"] for r in got] == [3, 4]
    assert got[-1].source_offset == {"position": 5, "complete": True}


def test_generic_mode_reads_parquet_and_bytes(bucket: MemoryStorage) -> None:
    out = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([{"a": 1}, {"a": 2}]), out)
    bucket.objects["landing/orders/x.parquet"] = out.getvalue()
    got = _drain(_source({**GENERIC, "format.class": "parquet", "topic.regex.list": r"orders:.*\.parquet"}))
    assert [r.value for r in got] == [{"a": 1}, {"a": 2}]
    bucket.objects["landing/raw/y.bin"] = b"line one\nline two\n"
    got = _drain(_source({**GENERIC, "format.class": "bytearray", "topic.regex.list": r"raw:raw/.*"}))
    assert [r.value for r in got] == [b"line one", b"line two"]


def test_generic_mode_shares_objects_between_tasks_without_overlap(bucket: MemoryStorage) -> None:
    for i in range(20):
        bucket.objects[f"landing/orders/{i:02d}.json"] = _lines({"id": i})
    connector = S3SourceConnector()
    connector.start(S3SourceConnector.validate(GENERIC))
    configs = connector.task_configs(3)
    assert len(configs) == 3
    seen: list[int] = []
    for config in configs:
        seen += [r.value["id"] for r in _drain(_source(config))]
    assert sorted(seen) == list(range(20))


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"topic.regex.list": ""}, "topic.regex.list"),
        ({"topic.regex.list": "no-colon"}, "topic.regex.list"),
        ({"topic.regex.list": "t:([unclosed"}, "topic.regex.list"),
        ({"mode": "SOMETHING"}, "mode"),
    ],
)
def test_generic_mode_config_errors_name_the_key(extra: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        S3SourceConfig.parse({**GENERIC, **extra})
    assert key in str(info.value)
