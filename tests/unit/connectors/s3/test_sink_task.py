"""The S3 sink task against an in-memory bucket: rotation rules, durable offsets, replay and memory."""

from __future__ import annotations

import io
from typing import Any

import fastavro
import orjson
import pyarrow.parquet as pq
import pytest

from sluice.connectors.api import (
    DataError,
    RetriableError,
    SinkRecord,
    SinkRecordBatch,
    TopicPartition,
    UnwritableRecordError,
)
from sluice.connectors.s3_common.storage import MemoryStorage
from sluice.connectors.sink.s3 import S3SinkConnector
from sluice.connectors.sink.s3.task import S3SinkTask
from sluice.connectors.sink.s3.writer import TopicPartitionWriter

TP = TopicPartition("t", 0)
T0 = 1_700_000_000_000
HOUR = 3_600_000


def _task(**config: Any) -> S3SinkTask:
    task = S3SinkTask()
    settings = {
        "s3.bucket.name": "bkt",
        "format.class": "json",
        "flush.size": "3",
        "s3.upload.threads": "0",  # uploads on the task thread: objects are in the bucket when put() returns
        **{k: str(v) for k, v in config.items()},
    }
    task.start(settings, None)  # type: ignore[arg-type]
    task.open([TP])
    return task


def _records(n: int, start: int = 0, partition: int = 0, **kw: Any) -> list[SinkRecord]:
    return [
        SinkRecord("t", partition, i, {"i": i, "c": "ab"[i % 2]}, key=f"k{i}", timestamp=T0 + i * 1000, **kw)
        for i in range(start, start + n)
    ]


def _lines(data: bytes) -> list[Any]:
    return [orjson.loads(x) for x in data.splitlines()]


def test_flush_size_commits_objects_named_by_start_offset(bucket: MemoryStorage) -> None:
    task = _task()
    task.put(SinkRecordBatch.of(_records(7)))
    assert sorted(bucket.objects) == [
        "topics/t/partition=0/t+0+0000000000.json",
        "topics/t/partition=0/t+0+0000000003.json",
    ]
    assert _lines(bucket.objects["topics/t/partition=0/t+0+0000000003.json"]) == [
        {"i": 3, "c": "b"},
        {"i": 4, "c": "a"},
        {"i": 5, "c": "b"},
    ]
    # Record 6 is buffered: only offsets up to 6 are durable.
    assert task.pre_commit({TP: 7}) == {TP: 6}


def test_flush_size_counts_records_of_the_partition_across_directories(bucket: MemoryStorage) -> None:
    task = _task(**{"partitioner.class": "FieldPartitioner", "partition.field.name": "c", "flush.size": 4})
    task.put(SinkRecordBatch.of(_records(9)))
    # 0..3 spread over c=a and c=b; all committed together at the 4th record, then 4..7.
    assert sorted(k for k in bucket.objects if ".offsets." not in k) == [
        "topics/t/c=a/t+0+0000000000.json",
        "topics/t/c=a/t+0+0000000004.json",
        "topics/t/c=b/t+0+0000000001.json",
        "topics/t/c=b/t+0+0000000005.json",
    ]
    # A field partitioner interleaves offsets across directories: each object gets an offsets
    # sidecar by default, so the S3 source can restore the partition in offset order.
    offsets = {k: _lines(v) for k, v in bucket.objects.items() if ".offsets." in k}
    assert sum(offsets.values(), []) and sorted(sum(offsets.values(), [])) == list(range(8))
    assert task.pre_commit({TP: 9}) == {TP: 8}


def test_replay_from_the_committed_offset_rewrites_identical_objects(bucket: MemoryStorage) -> None:
    config = {
        "partitioner.class": "FieldPartitioner",
        "partition.field.name": "c",
        "flush.size": 5,
        "format.class": "parquet",
        "partitioner.max.open.files": 1,
    }
    task = _task(**config)
    task.put(SinkRecordBatch.of(_records(13)))
    committed = task.pre_commit({TP: 13})[TP]
    first = dict(bucket.objects)
    task.stop()
    # "Crash": a new task starts from the committed offset and sees the rest again.
    replay = _task(**config)
    replay.put(SinkRecordBatch.of(_records(13 - committed, start=committed)))
    replay.put(SinkRecordBatch.of(_records(4, start=13)))
    for key, data in first.items():
        assert bucket.objects[key] == data
    assert replay.pre_commit({TP: 17}) == {TP: 15}


def test_a_retried_put_does_not_duplicate_buffered_records(bucket: MemoryStorage) -> None:
    task = _task(**{"flush.size": 4})
    batch = SinkRecordBatch.of(_records(6))
    bucket.fail_next = RetriableError("S3 PutObject failed after retries: SlowDown")
    with pytest.raises(RetriableError):
        task.put(batch)
    assert bucket.objects == {}
    task.put(batch)  # the runtime offers the same batch again
    task.put(SinkRecordBatch.of(_records(2, start=6)))
    assert _lines(bucket.objects["topics/t/partition=0/t+0+0000000000.json"]) == [
        {"i": i, "c": "ab"[i % 2]} for i in range(4)
    ]
    assert _lines(bucket.objects["topics/t/partition=0/t+0+0000000004.json"]) == [
        {"i": i, "c": "ab"[i % 2]} for i in range(4, 8)
    ]


def test_failed_upload_is_retried_by_pre_commit_and_offsets_wait(bucket: MemoryStorage) -> None:
    task = _task()
    task.put(SinkRecordBatch.of(_records(2)))
    bucket.fail_next = RetriableError("throttled")
    with pytest.raises(RetriableError):
        task.put(SinkRecordBatch.of(_records(1, start=2)))
    assert task.pre_commit({TP: 3}) == {TP: 3}  # pre_commit retried the upload
    assert "topics/t/partition=0/t+0+0000000000.json" in bucket.objects


def test_rotate_interval_uses_record_time_and_bucket_changes(bucket: MemoryStorage) -> None:
    task = _task(
        **{
            "partitioner.class": "TimeBasedPartitioner",
            "path.format": "'h'=HH",
            "partition.duration.ms": HOUR,
            "rotate.interval.ms": HOUR,
            "timestamp.extractor": "Record",
            "flush.size": 1000,
        }
    )
    times = [T0, T0 + 60_000, T0 + HOUR, T0 + HOUR + 1]
    task.put(SinkRecordBatch.of([SinkRecord("t", 0, i, {"i": i}, timestamp=ts) for i, ts in enumerate(times)]))
    assert sorted(bucket.objects) == ["topics/t/h=22/t+0+0000000000.json"]
    assert task.pre_commit({TP: 4}) == {TP: 2}


def test_rotate_schedule_commits_idle_objects_on_the_wall_clock(bucket: MemoryStorage) -> None:
    now = [1000.0]
    task = _task(**{"rotate.schedule.interval.ms": 60_000, "flush.size": 100})
    task.put(SinkRecordBatch.of(_records(2)))
    writer = task.writers[TP]
    writer.clock = lambda: now[0]
    writer.next_scheduled_ms = writer._next_schedule(int(now[0] * 1000))
    assert task.pre_commit({TP: 2}) == {TP: 0}
    now[0] += 61
    assert task.pre_commit({TP: 2}) == {TP: 2}
    assert list(bucket.objects) == ["topics/t/partition=0/t+0+0000000000.json"]


def test_null_values_fail_ignore_or_write(bucket: MemoryStorage) -> None:
    tombstone = [SinkRecord("t", 0, 0, {"i": 0}), SinkRecord("t", 0, 1, None), SinkRecord("t", 0, 2, {"i": 2})]
    with pytest.raises(DataError, match="offset 1"):
        _task().put(SinkRecordBatch.of(tombstone))
    ignoring = _task(**{"behavior.on.null.values": "ignore", "flush.size": 2})
    ignoring.put(SinkRecordBatch.of(tombstone))
    assert _lines(bucket.objects["topics/t/partition=0/t+0+0000000000.json"]) == [{"i": 0}, {"i": 2}]
    bucket.objects.clear()
    writing = _task(**{"behavior.on.null.values": "write", "flush.size": 3})
    writing.put(SinkRecordBatch.of(tombstone))
    assert _lines(bucket.objects["topics/t/tombstone/t+0+0000000001.json"]) == [None]


def test_open_object_cap_bounds_memory_over_1000_directories(bucket: MemoryStorage) -> None:
    task = _task(
        **{
            "partitioner.class": "FieldPartitioner",
            "partition.field.name": "d",
            "flush.size": 100_000,
            "partitioner.max.open.files": 50,
            "store.kafka.offsets": "false",
        }
    )
    peak = 0
    for start in range(0, 20_000, 500):
        task.put(SinkRecordBatch.of([SinkRecord("t", 0, i, {"d": i % 1000, "pad": "x" * 200}) for i in range(start, start + 500)]))
        writer = task.writers[TP]
        assert len(writer.open) <= 50
        peak = max(peak, task.memory_bytes)
    # 50 open objects of ~20 records x ~220 bytes; without the cap 1000 objects would be open.
    assert peak < 50 * 25 * 230
    assert len(bucket.objects) > 1000
    total = sum(len(_lines(data)) for data in bucket.objects.values())
    assert total + sum(o.count for o in task.writers[TP].open.values()) == 20_000


def test_large_objects_stream_as_multipart_parts(bucket: MemoryStorage) -> None:
    task = _task(**{"flush.size": 10_000})
    writer = task.writers.get(TP) or task._writer(TP, "t")
    # Shrink the part size below S3's minimum, which the in-memory bucket then accepts.
    bucket.min_part_size = 0
    object.__setattr__(writer.settings, "part_size", 64 * 1024)
    for start in range(0, 10_000, 1000):
        task.put(SinkRecordBatch.of([SinkRecord("t", 0, i, {"i": i, "pad": "y" * 100}) for i in range(start, start + 1000)]))
        assert task.memory_bytes < 2 * 64 * 1024
    ops = [op for op, _ in bucket.requests]
    assert (
        ops.count("CreateMultipartUpload") == 1
        and ops.count("UploadPart") > 10
        and ops[-1] == "CompleteMultipartUpload"
    )
    assert len(_lines(bucket.objects["topics/t/partition=0/t+0+0000000000.json"])) == 10_000


def test_close_aborts_uploads_and_reports_nothing_new_durable(bucket: MemoryStorage) -> None:
    task = _task(**{"flush.size": 10})
    task.put(SinkRecordBatch.of(_records(4)))
    task.close([TP])
    assert bucket.objects == {} and task.writers == {}


def test_end_of_input_writes_the_tail_a_stream_holds_back_under_the_same_key(bucket: MemoryStorage) -> None:
    task = _task()  # flush.size=3
    task.put(SinkRecordBatch.of(_records(4)))
    assert task.pre_commit({TP: 4}) == {TP: 3}  # record 3 waits for more records
    task.end_of_input({TP: 4})
    assert sorted(bucket.objects) == [
        "topics/t/partition=0/t+0+0000000000.json",
        "topics/t/partition=0/t+0+0000000003.json",  # named by its start offset, as the stream names it
    ]
    assert _lines(bucket.objects["topics/t/partition=0/t+0+0000000003.json"]) == [{"i": 3, "c": "b"}]
    assert task.pre_commit({TP: 4}) == {TP: 4}


def test_columnar_batches_with_several_partitions(bucket: MemoryStorage) -> None:
    values = [{"i": i} for i in range(6)]
    partitions = [0, 1, 0, 1, 0, 1]
    offsets = [0, 0, 1, 1, 2, 2]
    columns: dict[str, list[Any]] = {
        "partition": partitions,
        "kafka_offset": offsets,
        "timestamp": [T0] * 6,
        "timestamp_type": [0] * 6,
        "headers": [None] * 6,
    }
    batch = SinkRecordBatch("t", values, [None] * 6, [None] * 6, [None] * 6, columns.__getitem__)
    task = _task()
    task.put(batch)
    assert _lines(bucket.objects["topics/t/partition=1/t+1+0000000000.json"]) == [{"i": 1}, {"i": 3}, {"i": 5}]
    assert task.pre_commit({TP: 3, TopicPartition("t", 1): 3}) == {TP: 3, TopicPartition("t", 1): 3}


def test_sidecars_hold_keys_headers_and_timestamps(bucket: MemoryStorage) -> None:
    task = _task(**{"store.kafka.keys": "true", "store.kafka.headers": "true", "store.kafka.timestamps": "true"})
    task.put(SinkRecordBatch.of(_records(3, headers=(("h", b"\x01"), ("s", "v")))))
    base = "topics/t/partition=0/t+0+0000000000"
    assert _lines(bucket.objects[f"{base}.keys.json"]) == ["k0", "k1", "k2"]
    assert _lines(bucket.objects[f"{base}.headers.json"])[0] == [["h", {"$bytes": "AQ=="}], ["s", "v"]]
    assert _lines(bucket.objects[f"{base}.timestamps.json"]) == [T0, T0 + 1000, T0 + 2000]


def test_connector_config_validation_names_the_key() -> None:
    from sluice.connectors.api import ConfigError

    good = {
        "s3.bucket.name": "bkt",
        "format.class": "io.confluent.connect.s3.format.avro.AvroFormat",
        "flush.size": "10",
    }
    assert S3SinkConnector.validate(good).flush_size == 10
    for bad, key in [
        ({**good, "flush.size": "0"}, "flush.size"),
        ({**good, "format.class": "CsvFormat"}, "format.class"),
        ({**good, "partitioner.class": "Nope"}, "partitioner.class"),
        ({**good, "s3.part.size": "1024"}, "s3.part.size"),
        ({**good, "behavior.on.null.values": "write"}, "behavior.on.null.values"),
        ({**good, "aws.access.key.id": "AKIA"}, "aws.secret.access.key"),
        ({**good, "s3.bucket.nam": "x"}, "s3.bucket.nam"),
    ]:
        with pytest.raises(ConfigError) as info:
            S3SinkConnector.validate(bad)
        assert info.value.key == key, (bad, info.value)
    with pytest.raises(ConfigError, match="path.format"):
        S3SinkConnector.validate({**good, "partitioner.class": "TimeBasedPartitioner", "partition.duration.ms": "1000"})


def test_connector_aliases_secrets_and_task_configs() -> None:
    assert "io.confluent.connect.s3.S3SinkConnector" in S3SinkConnector.aliases
    assert S3SinkConnector.Config.secret_keys() == {"aws.access.key.id", "aws.secret.access.key"}
    connector = S3SinkConnector()
    connector.start(
        S3SinkConnector.validate(
            {
                "s3.bucket.name": "bkt",
                "format.class": "json",
                "flush.size": "5",
                "aws.access.key.id": "AK",
                "aws.secret.access.key": "SK",
                "partition.field.name": "a,b",
            }
        )
    )
    [config] = connector.task_configs(1)
    assert config["aws.secret.access.key"] == "SK" and config["partition.field.name"] == "a,b"
    assert S3SinkTask.__mro__[1].__name__ == "SinkTask" and isinstance(TopicPartitionWriter, type)


# -- background uploads (s3.upload.threads) --------------------------------------------------------


class SlowStorage(MemoryStorage):
    """Uploads wait for ``release``, so a test sees them in flight."""

    def __init__(self) -> None:
        super().__init__("bkt")
        import threading

        self.release = threading.Event()
        self.started = threading.Event()  # an upload thread is inside put_object

    def put_object(self, key: str, data: bytes) -> None:
        self.started.set()
        assert self.release.wait(10)
        super().put_object(key, data)


def _settle(task: S3SinkTask, consumed: int, expected: int) -> dict[TopicPartition, int]:
    import time

    deadline = time.monotonic() + 10
    safe = task.pre_commit({TP: consumed})
    while safe != {TP: expected} and time.monotonic() < deadline:
        time.sleep(0.01)
        safe = task.pre_commit({TP: consumed})
    return dict(safe)


def test_background_uploads_overlap_and_offsets_wait_for_them() -> None:
    storage = SlowStorage()
    S3SinkTask.storage_factory = lambda cfg: storage
    try:
        task = _task(**{"s3.upload.threads": 2})
        task.put(SinkRecordBatch.of(_records(7)))  # objects at 0 and 3 are rotated; put() returns while they upload
        assert storage.objects == {}
        assert task.pre_commit({TP: 7}) == {TP: 0}  # nothing is durable yet
        storage.release.set()
        assert _settle(task, 7, 6) == {TP: 6}
        assert sorted(storage.objects) == [
            "topics/t/partition=0/t+0+0000000000.json",
            "topics/t/partition=0/t+0+0000000003.json",
        ]
        task.stop()
    finally:
        S3SinkTask.storage_factory = None


def test_a_failed_background_upload_is_resubmitted_and_offsets_wait(bucket: MemoryStorage) -> None:
    task = _task(**{"s3.upload.threads": 2})
    bucket.fail_next = RetriableError("slow down")
    try:
        task.put(SinkRecordBatch.of(_records(3)))  # the rotated object's upload fails in the background ...
    except RetriableError:
        task.put(SinkRecordBatch.of(_records(3)))  # ... which put() may already report: the runtime offers the batch again
    assert _settle(task, 3, 3) == {TP: 3}  # a later drain resubmitted it
    assert _lines(bucket.objects["topics/t/partition=0/t+0+0000000000.json"]) == [
        {"i": i, "c": "ab"[i % 2]} for i in range(3)
    ]
    assert [op for op, _ in bucket.requests].count("PutObject") == 2
    task.stop()


def test_closing_waits_for_uploads_in_flight() -> None:
    storage = SlowStorage()
    S3SinkTask.storage_factory = lambda cfg: storage
    try:
        task = _task(**{"s3.upload.threads": 1})
        task.put(SinkRecordBatch.of(_records(3)))
        # Only an upload a thread has started is in flight; one still queued is cancelled by close().
        assert storage.started.wait(10)
        import threading

        threading.Timer(0.2, storage.release.set).start()
        task.close([TP])  # returns only after the upload it could not cancel has finished
        assert list(storage.objects) == ["topics/t/partition=0/t+0+0000000000.json"]
        assert task.writers == {}
        task.stop()
    finally:
        S3SinkTask.storage_factory = None


@pytest.mark.parametrize(
    ("fmt", "poison"),
    [("avro", [1, 2, 3]), ("avro", {"i": "not-a-number", "c": "a"}), ("json", None)],
)
def test_a_refused_record_changes_nothing_so_the_batch_offered_again_without_it_is_written_once(
    bucket: MemoryStorage, fmt: str, poison: Any
) -> None:
    # SinkTask.put's contract: a DataError leaves nothing of the batch written; the runtime then
    # offers the other records again (here: the halves around the refused one).
    task = _task(**{"format.class": fmt, "flush.size": 100})
    records = [r if r.kafka_offset != 5 else r.replace(value=poison) for r in _records(10)]
    with pytest.raises(DataError):
        task.put(SinkRecordBatch.of(records))
    task.put(SinkRecordBatch.of(records[:5]))
    task.put(SinkRecordBatch.of(records[6:]))
    writer = task.writers[TP]
    writer.rotate_all(10)
    writer.drain(wait=True)
    (data,) = bucket.objects.values()
    written = list(fastavro.reader(io.BytesIO(data))) if fmt == "avro" else _lines(data)
    assert [r["i"] for r in written] == [0, 1, 2, 3, 4, 6, 7, 8, 9]


@pytest.mark.parametrize("poison", [[1, 2, 3], {"i": "not-a-number", "c": "a"}, "text"])
def test_parquet_refuses_a_value_that_does_not_fit_the_object_by_record(bucket: MemoryStorage, poison: Any) -> None:
    # The row would fail the object's commit (or, an array, become a row of nulls) when its row
    # group is encoded, at rotation; the shape check names it in put() instead, nothing written.
    task = _task(**{"format.class": "parquet", "flush.size": 100})
    records = [r if r.kafka_offset != 5 else r.replace(value=poison) for r in _records(10)]
    with pytest.raises(UnwritableRecordError) as refused:
        task.put(SinkRecordBatch.of(records))
    assert refused.value.record is records[5]
    task.put(SinkRecordBatch.of([r for r in records if r.kafka_offset != 5]))  # the runtime offers the others again
    writer = task.writers[TP]
    writer.rotate_all(10)
    writer.drain(wait=True)
    (data,) = bucket.objects.values()
    assert [r["i"] for r in pq.read_table(io.BytesIO(data)).to_pylist()] == [0, 1, 2, 3, 4, 6, 7, 8, 9]


@pytest.mark.parametrize("fmt", ["avro", "parquet"])
def test_a_refused_record_on_the_general_path_leaves_the_objects_a_clean_run_writes(
    bucket: MemoryStorage, fmt: str
) -> None:
    # A tombstone sends the batch down the per-record path; the records of the refused run must
    # not count towards flush.size twice, or the objects would depend on where the batch was cut
    # (and a replay from a committed offset could name them differently).
    config = {"format.class": fmt, "flush.size": 4, "behavior.on.null.values": "ignore"}
    records = [r.replace(value=None) if r.kafka_offset == 1 else r for r in _records(10)]
    records[3] = records[3].replace(value=[1, 2, 3])
    clean = MemoryStorage("bkt")
    S3SinkTask.storage_factory = lambda cfg: clean
    _task(**config).put(SinkRecordBatch.of([r for r in records if r.kafka_offset != 3]))
    S3SinkTask.storage_factory = lambda cfg: bucket
    task = _task(**config)
    with pytest.raises(DataError):
        task.put(SinkRecordBatch.of(records))
    task.put(SinkRecordBatch.of([r for r in records if r.kafka_offset != 3]))
    assert bucket.objects == clean.objects
    assert sorted(bucket.objects) == [f"topics/t/partition=0/t+0+000000000{i}.{fmt}" for i in (0, 6)]
