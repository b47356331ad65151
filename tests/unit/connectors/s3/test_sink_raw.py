"""The S3 sink's raw JSON path: batches whose values the runtime handed over as consumed, undecoded.

JSON lines objects get the consumed bytes as they are; Parquet objects are parsed from them by
the native parser (``converters/json_arrow.py``) or, without it, pyarrow's JSON reader: every test
runs with each. Either way the result must be what the decoded path gives (same records; for
Parquet the same bytes) and the values must not be decoded at all.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from sluice.connectors.api import (
    DataError,
    RetriableError,
    SinkRecord,
    SinkRecordBatch,
    TopicPartition,
    UnusableRawValues,
    UnwritableRecordError,
    ValueFormat,
)
from sluice.connectors.s3_common.parquet_format import ParquetObjectWriter, _read_json_rows
from sluice.connectors.s3_common.storage import MemoryStorage, ObjectUpload
from tests.json_parsers import parser_fixture  # noqa: F401 - every test runs with each parser

from .test_sink_task import _task  # the same task set-up (the bucket fixture is in conftest.py)

TP = TopicPartition("t", 0)
T0 = 1_700_000_000_000
DIR = "topics/t/partition=0"


def _batch(
    raws: Sequence[bytes | None], start: int = 0, raw: bool = True, partitions: list[int] | None = None
) -> SinkRecordBatch:
    """A batch as the runtime builds it for a raw-JSON task: values decoded only when read."""
    n = len(raws)
    parts = partitions or [0] * n
    decodes: list[int] = []

    def decode() -> tuple[list[Any], list[Any]]:
        decodes.append(1)
        return [None] * n, [None if v is None else orjson.loads(v) for v in raws]

    def load(column: str) -> Any:
        if column == "partition":
            return parts
        if column == "kafka_offset":
            return list(range(start, start + n))
        if column == "timestamp":
            return [T0 + i for i in range(start, start + n)]
        if column == "timestamp_type":
            return [1] * n
        if column == "headers":
            return [(("h", f"v{i}"),) for i in range(start, start + n)]
        raise KeyError(column)

    keys = [f"k{i}" for i in range(start, start + n)]
    if not raw:
        schemas, values = decode()
        return SinkRecordBatch("t", values, schemas, keys, [None] * n, load)
    batch = SinkRecordBatch("t", None, None, keys, [None] * n, load, raw_values=list(raws), decode=decode)
    _DECODES[id(batch)] = decodes
    return batch


#: How often each raw batch's values were decoded (by ``id``).
_DECODES: dict[int, list[int]] = {}


def _decoded(batch: SinkRecordBatch) -> bool:
    return bool(_DECODES.get(id(batch)))


def test_json_lines_are_the_consumed_bytes_and_values_are_never_decoded(bucket: MemoryStorage) -> None:
    task = _task(**{"store.kafka.keys": "true", "store.kafka.headers": "true"})
    raws: list[bytes | None] = [b'{"b": 2,  "a": 1.50}', b'{"s":"\\u00e9"}', b"12345678901234567890"]
    batch = _batch(raws)
    task.put(batch)
    assert not _decoded(batch)
    assert (
        bucket.objects[f"{DIR}/t+0+0000000000.json"] == b'{"b": 2,  "a": 1.50}\n{"s":"\\u00e9"}\n12345678901234567890\n'
    )
    # The sidecars come from the other columns, as on the decoded path.
    assert bucket.objects[f"{DIR}/t+0+0000000000.keys.json"] == b'"k0"\n"k1"\n"k2"\n'
    assert orjson.loads(bucket.objects[f"{DIR}/t+0+0000000000.headers.json"].splitlines()[2]) == [["h", "v2"]]


def test_a_value_over_several_lines_is_re_encoded_on_one(bucket: MemoryStorage) -> None:
    task = _task()
    task.put(_batch([b'{"a":1}', b'{\n  "b": [1,\n 2]\n}', b"[3]"]))
    assert bucket.objects[f"{DIR}/t+0+0000000000.json"] == b'{"a":1}\n{"b":[1,2]}\n[3]\n'


@pytest.mark.parametrize("null", [None, b"null"])
def test_nulls_are_skipped_with_ignore(bucket: MemoryStorage, null: bytes | None) -> None:
    task = _task(**{"behavior.on.null.values": "ignore"})
    task.put(_batch([b"1", null, b"2", b"3", null]))
    assert bucket.objects == {f"{DIR}/t+0+0000000000.json": b"1\n2\n3\n"}
    assert task.pre_commit({TP: 5}) == {TP: 5}


def test_nulls_are_written_with_write(bucket: MemoryStorage) -> None:
    task = _task(**{"behavior.on.null.values": "write", "flush.size": 4})
    task.put(_batch([b"1", None, b"null", b"2"]))
    assert bucket.objects[f"{DIR}/t+0+0000000000.json"] == b"1\n2\n"
    assert bucket.objects["topics/t/tombstone/t+0+0000000001.json"] == b"null\nnull\n"


def test_nulls_fail_by_default(bucket: MemoryStorage) -> None:
    task = _task()
    with pytest.raises(DataError, match="offset 1"):
        task.put(_batch([b"1", b"null", b"2"]))


def test_raw_and_decoded_batches_write_the_same_records(bucket: MemoryStorage) -> None:
    task = _task(**{"flush.size": 4})
    task.put(_batch([b'{"a": 0}', b'{"a": 1}']))
    task.put(_batch([b'{"a": 2}', b'{"a": 3}'], start=2, raw=False))  # e.g. after a bad record
    data = bucket.objects[f"{DIR}/t+0+0000000000.json"]
    assert [orjson.loads(x) for x in data.splitlines()] == [{"a": i} for i in range(4)]


def test_a_batch_of_several_partitions_splits_its_raw_bytes(bucket: MemoryStorage) -> None:
    task = _task(**{"flush.size": 2})
    task.open([TopicPartition("t", 1)])
    batch = _batch([b"10", b"11", b"12", b"13"], partitions=[0, 1, 0, 1])
    task.put(batch)
    assert not _decoded(batch)
    assert bucket.objects[f"{DIR}/t+0+0000000000.json"] == b"10\n12\n"
    assert bucket.objects["topics/t/partition=1/t+1+0000000001.json"] == b"11\n13\n"


@pytest.mark.parametrize(
    "config",
    [
        {"format.class": "avro"},
        {"partitioner.class": "FieldPartitioner", "partition.field.name": "a"},
        {
            "partitioner.class": "TimeBasedPartitioner",
            "path.format": "'d'=YYYY",
            "partition.duration.ms": 3_600_000,
            "timestamp.extractor": "RecordField",
            "timestamp.field": "ts",
        },
    ],
)
def test_formats_and_partitioners_that_need_values_decode_them_before_writing(
    bucket: MemoryStorage, config: dict[str, Any]
) -> None:
    task = _task(**config)
    batch = _batch([b'{"a": "x", "ts": %d}' % (T0 + i) for i in range(3)])
    task.put(batch)
    assert _decoded(batch)
    assert len([k for k in bucket.objects if ".offsets." not in k]) == 1


def test_time_based_partitioner_on_record_time_keeps_raw_bytes(bucket: MemoryStorage) -> None:
    task = _task(
        **{
            "partitioner.class": "HourlyPartitioner",
            "timestamp.extractor": "Record",
            "rotate.interval.ms": 3_600_000,
            "locale": "en",
            "timezone": "UTC",
        }
    )
    batch = _batch([b'{"x": 1}', b'{"x": 2}', b'{"x": 3}'])
    task.put(batch)
    assert not _decoded(batch)
    (data,) = bucket.objects.values()
    assert data == b'{"x": 1}\n{"x": 2}\n{"x": 3}\n'


# -- Parquet --------------------------------------------------------------------------------------


def _parquet(
    values: list[Any], raw: bool, batches: int = 1, row_group: int = 4, executor: Executor | None = None
) -> bytes | str:
    """The Parquet object of ``values`` written raw or decoded (in ``batches`` writes), or the error."""
    out = io.BytesIO()
    writer = ParquetObjectWriter(out, "zstd", row_group, executor)
    raws = [orjson.dumps(v) for v in values]
    step = -(-len(values) // batches)
    try:
        for i in range(0, len(values), step):
            if raw:
                writer.write_raw_json(raws[i : i + step])
            else:
                writer.write(values[i : i + step], None)
        writer.close()
    except DataError as exc:
        return f"DataError: {exc}"
    return out.getvalue()


CASES: dict[str, list[Any]] = {
    "uniform": [{"id": i, "name": f"n{i}", "amount": i * 0.5, "ok": i % 2 == 0} for i in range(10)],
    "nested": [{"s": {"a": i, "l": [i, i + 1]}, "m": None} for i in range(6)],
    "int_then_float": [{"a": 1}] * 5 + [{"a": 1.5}] * 3,
    "missing_field": [{"a": 1, "b": "x"}] * 5 + [{"a": 2}] * 3,
    "extra_field": [{"a": 1}] * 5 + [{"a": 2, "b": "y"}] * 3,
    "nested_extra_field": [{"s": {"a": 1}}] * 5 + [{"s": {"a": 1, "b": 2}}] * 3,
    "null_then_string": [{"a": None}] * 5 + [{"a": "x"}] * 3,
    "string_then_number": [{"a": "1"}] * 5 + [{"a": 1}] * 3,
    "timestamp_like_string": [{"a": "2024-01-01T00:00:00"}] * 6,
    "not_objects": [1, 2, 3, 4, 5],
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("batches", [1, 3])
def test_parquet_from_raw_json_is_byte_identical_to_the_decoded_path(case: str, batches: int) -> None:
    values = CASES[case]
    assert _parquet(values, raw=True, batches=batches) == _parquet(values, raw=False)


@pytest.mark.parametrize("case", ["uniform", "string_then_number", "not_objects"])
def test_parquet_row_groups_encoded_on_a_thread_give_the_same_bytes_and_errors(case: str) -> None:
    with ThreadPoolExecutor(2) as pool:
        assert _parquet(CASES[case], raw=True, batches=5, executor=pool) == _parquet(CASES[case], raw=False)


def test_parquet_row_groups_do_not_depend_on_batch_sizes() -> None:
    values = CASES["uniform"]
    data = _parquet(values, raw=True, batches=1)
    assert isinstance(data, bytes)
    assert _parquet(values, raw=True, batches=7) == data
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [4, 4, 2]


def test_parquet_reads_typical_rows_with_the_json_reader() -> None:
    raws = [orjson.dumps(v) for v in CASES["uniform"]]
    table = _read_json_rows(raws, None)
    assert table is not None and table.to_pylist() == CASES["uniform"]


def test_parquet_sink_task_never_decodes_raw_values(bucket: MemoryStorage) -> None:
    task = _task(**{"format.class": "parquet", "parquet.codec": "zstd", "flush.size": 4})
    batch = _batch([orjson.dumps({"i": i, "s": str(i)}) for i in range(4)])
    task.put(batch)
    assert not _decoded(batch)
    table = pq.read_table(io.BytesIO(bucket.objects[f"{DIR}/t+0+0000000000.parquet"]))
    assert table.to_pylist() == [{"i": i, "s": str(i)} for i in range(4)]


# -- multipart parts on upload threads ------------------------------------------------------------


class _Pool:
    """A tiny executor running each job on a new thread (enough for ObjectUpload)."""

    def submit(self, fn: Any, *args: Any) -> Any:
        from concurrent.futures import Future

        future: Future[Any] = Future()

        def run() -> None:
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as exc:  # noqa: BLE001 - handed to the future, as an executor does
                    future.set_exception(exc)

        threading.Thread(target=run).start()
        return future


def test_parts_are_sent_in_the_background_and_a_failed_part_is_resent_on_commit() -> None:
    storage = MemoryStorage("bkt")
    storage.min_part_size = 4
    original = storage.upload_part
    failures = [RetriableError("throttled")]
    failed = threading.Event()

    def flaky_part(key: str, upload_id: str, number: int, data: bytes) -> str:
        if number == 1 and failures:
            failed.set()
            raise failures.pop()
        return original(key, upload_id, number, data)

    storage.upload_part = flaky_part  # type: ignore[method-assign,assignment]
    upload = ObjectUpload(storage, "k", part_size=4, executor=_Pool(), max_inflight=2)  # type: ignore[arg-type]
    upload.write(b"aaaabbbb")  # two parts queued: the first one fails in the background
    upload.write(b"cc")
    # A part no thread has started yet is sent inline by commit(): wait until it failed in the background.
    assert failed.wait(10)
    upload.commit()  # sends the failed part again
    assert storage.objects["k"] == b"aaaabbbbcc"
    assert upload.buffered_bytes == 0
    assert [op for op, _ in storage.requests].count("UploadPart") == 3


def test_a_part_failing_mid_stream_fails_the_next_put_before_it_writes_anything(bucket: MemoryStorage) -> None:
    """A failed part is kept; the next put raises (retriable) before taking its records, so the
    runtime's retry of that put leaves every record in the object once."""
    task = _task(**{"flush.size": 120, "s3.part.size": 5 * 1024 * 1024})
    big = [b'"%s"' % (b"%03d" % i * 33_000) for i in range(120)]  # 99 kB each: 60 are over one part
    bucket.fail_next = RetriableError("throttled")
    task.put(_batch(big[:60]))  # its part fails inside the write: kept, not raised
    assert bucket.fail_next is None and "k" not in bucket.objects
    bucket.fail_next = RetriableError("throttled")
    with pytest.raises(RetriableError):
        task.put(_batch(big[60:], start=60))
    task.put(_batch(big[60:], start=60))  # the runtime's retry
    assert bucket.objects[f"{DIR}/t+0+0000000000.json"] == b"\n".join(big) + b"\n"
    assert task.pre_commit({TP: 120}) == {TP: 120}


def test_in_flight_parts_count_as_buffered_memory() -> None:
    storage = MemoryStorage("bkt")
    storage.min_part_size = 4
    gate = threading.Event()
    original = storage.upload_part

    def slow_part(key: str, upload_id: str, number: int, data: bytes) -> str:
        gate.wait(5)
        return original(key, upload_id, number, data)

    storage.upload_part = slow_part  # type: ignore[method-assign,assignment]
    upload = ObjectUpload(storage, "k", part_size=4, executor=_Pool(), max_inflight=2)  # type: ignore[arg-type]
    upload.write(b"aaaabbbbc")
    assert upload.buffered_bytes == 9
    gate.set()
    upload.commit()
    assert storage.objects["k"] == b"aaaabbbbc"


def test_parquet_row_group_with_a_value_over_several_lines_is_the_decoded_one(parser: str) -> None:
    # pyarrow's JSON reader splits rows at newlines, so a pretty-printed value sends its row group
    # down the decoded path (the native parser reads it); the object must not show which path a
    # row group took.
    values = CASES["uniform"]
    raws = [orjson.dumps(v) for v in values]
    raws[5] = orjson.dumps(values[5], option=orjson.OPT_INDENT_2)
    assert b"\n" in raws[5]
    assert (_read_json_rows(raws[4:8], None) is None) == (parser == "arrow")
    out = io.BytesIO()
    writer = ParquetObjectWriter(out, "zstd", 4)
    writer.write_raw_json(raws)
    writer.close()
    assert out.getvalue() == _parquet(values, raw=False)


@pytest.mark.parametrize("bad_at", [None, 2, 21, 38])
def test_parquet_row_groups_encoded_on_threads_are_written_in_order(bad_at: int | None) -> None:
    # Ten row groups on a pool of two: the file (or the first error) is the decoded path's.
    values: list[Any] = [{"id": i, "name": f"n{i}", "amount": i * 0.5} for i in range(40)]
    if bad_at is not None:
        values[bad_at] = {"id": "not a number", "name": "x", "amount": 0.0}
    with ThreadPoolExecutor(2) as pool:
        raw = _parquet(values, raw=True, batches=13, executor=pool)
    assert raw == _parquet(values, raw=False)
    if bad_at is None:
        meta = pq.ParquetFile(io.BytesIO(raw)).metadata  # type: ignore[arg-type]
        assert meta.num_row_groups == 10


def test_discarding_a_parquet_object_with_row_groups_in_flight_returns() -> None:
    out = io.BytesIO()
    with ThreadPoolExecutor(2) as pool:
        writer = ParquetObjectWriter(out, "zstd", 4, pool)
        writer.write_raw_json([orjson.dumps({"i": i}) for i in range(4)])  # the first sets the schema
        writer.write_raw_json([orjson.dumps({"i": i}) for i in range(4, 40)])
        writer.discard()  # returns once no thread writes into the object any more
        written = out.getvalue()
    assert out.getvalue() == written  # the pool is shut down: nothing came after discard


# -- values taken unchecked (Parquet) ---------------------------------------------------------------


def _given_back(call: Any) -> dict[TopicPartition, int] | None:
    """The offsets ``call()`` gave back to the runtime with UnusableRawValues, if it did."""
    try:
        call()
    except UnusableRawValues as exc:
        return exc.offsets
    return None


@pytest.mark.parametrize(
    ("config", "raw"),
    [
        ({"format.class": "parquet"}, True),
        ({"format.class": "json"}, True),  # the bytes go into the object as they are, checked
        ({"format.class": "avro"}, False),
        ({"format.class": "parquet", "partitioner.class": "FieldPartitioner", "partition.field.name": "c"}, False),
    ],
)
def test_json_lines_and_parquet_take_raw_values(bucket: MemoryStorage, config: dict[str, str], raw: bool) -> None:
    # Both take JSON with schemas raw too (typed columns; the payloads' bytes), and raw keys with it.
    assert (_task(**config).value_format is ValueFormat.RAW_TYPED) is raw


def test_json_lines_give_back_a_batch_with_a_value_that_is_not_json(bucket: MemoryStorage) -> None:
    """JSON lines copy the bytes: a value that is not one JSON document gives the whole batch back
    before anything is written (the runtime's decoded delivery then meets the bad record)."""
    task = _task()
    batch = _batch([b'{"i":0}', b"{bad", b'{"i":2}'], start=7)
    assert _given_back(lambda: task.put(batch)) == {TP: 7}
    assert bucket.objects == {}  # nothing of the batch was kept


@pytest.mark.parametrize("threads", ["0", "2"])
def test_a_raw_value_that_is_not_json_rewinds_the_partition_to_be_delivered_again_decoded(
    bucket: MemoryStorage, threads: str
) -> None:
    """Taken unchecked, ``{bad`` surfaces when its row group is parsed: the open objects go, the
    partition is consumed again from the first record not in a completed object, and that replay
    is decoded (so the runtime's conversion meets the bad record). What the runtime then delivers
    without it is written as the checked path would have, and raw batches resume after it."""
    task = _task(**{"format.class": "parquet", "flush.size": 4, "s3.upload.threads": threads})
    good = [orjson.dumps({"i": i, "s": f"v{i}"}) for i in range(14)]
    raws = [b"{bad" if i == 5 else good[i] for i in range(10)]
    task.put(_batch(raws[:4]))
    for _ in range(100):  # the first object is complete: the give-back goes back to its end
        if task.pre_commit({TP: 4}) == {TP: 4}:
            break
        threading.Event().wait(0.02)
    given = _given_back(lambda: task.put(_batch(raws[4:], start=4)))
    for _ in range(100):  # with upload threads the error comes from the thread parsing the row group
        if given:
            break
        threading.Event().wait(0.02)
        given = _given_back(lambda: task.pre_commit({TP: 10}))
    assert given == {TP: 4}
    assert sorted(bucket.objects) == [f"{DIR}/t+0+0000000000.parquet"]

    # The runtime consumes from offset 4 again, decoded: the bad record is dead-lettered there.
    records = [SinkRecord("t", 0, i, orjson.loads(good[i])) for i in (4, 6, 7, 8, 9)]
    task.put(SinkRecordBatch.of(records))
    after = _batch(good[10:14], start=10)
    task.put(after)
    assert not _decoded(after)  # past the replay, values are raw (and unchecked) again
    task.pre_commit({TP: 14})
    for _ in range(100):
        if len(bucket.objects) == 3:
            break
        threading.Event().wait(0.02)
    rows = {k: pq.read_table(io.BytesIO(v)).to_pylist() for k, v in bucket.objects.items()}
    assert rows == {
        f"{DIR}/t+0+0000000000.parquet": [{"i": i, "s": f"v{i}"} for i in range(4)],
        f"{DIR}/t+0+0000000004.parquet": [{"i": i, "s": f"v{i}"} for i in (4, 6, 7, 8)],
        f"{DIR}/t+0+0000000009.parquet": [{"i": i, "s": f"v{i}"} for i in (9, 10, 11, 12)],
    }
    assert task.pre_commit({TP: 14}) == {TP: 13}
    task.stop()


def test_a_raw_null_with_whitespace_is_delivered_again_decoded(bucket: MemoryStorage) -> None:
    """Unchecked, `` null`` reaches the Parquet writer (the null handling looks for ``null``); it
    takes the rewind, and the decoded replay meets behavior.on.null.values as the checked path does."""
    task = _task(**{"format.class": "parquet", "flush.size": 3, "behavior.on.null.values": "ignore"})
    raws = [b'{"i":0}', b" null", b'{"i":2}', b'{"i":3}']
    assert _given_back(lambda: task.put(_batch(raws))) == {TP: 0}
    assert bucket.objects == {}
    task.put(_batch(raws, raw=False))  # the replay: decoded this time, the null ignored
    rows = {k: pq.read_table(io.BytesIO(v)).to_pylist() for k, v in bucket.objects.items()}
    assert rows == {f"{DIR}/t+0+0000000000.parquet": [{"i": 0}, {"i": 2}, {"i": 3}]}


@pytest.mark.parametrize("threads", ["0", "2"])
@pytest.mark.parametrize("poison", [b"[1,2,3]", b'{"i": "not-a-number", "s": "v5"}'])
def test_a_raw_value_that_does_not_fit_the_parquet_object_is_refused_on_the_decoded_replay(
    bucket: MemoryStorage, threads: str, poison: bytes
) -> None:
    """JSON that is not an object, or whose field changes type, shows only when its row group is
    parsed (the good raw path never looks at a value in Python): it takes the rewind, and on the
    decoded replay put() names it, so the runtime dead-letters it (or fails the task there) and
    offers the rest again. Before, the array became a row of nulls and the text failed the commit."""
    task = _task(**{"format.class": "parquet", "flush.size": 4, "s3.upload.threads": threads})
    good = [orjson.dumps({"i": i, "s": f"v{i}"}) for i in range(14)]
    raws = [poison if i == 5 else good[i] for i in range(10)]
    task.put(_batch(raws[:4]))
    for _ in range(100):  # the first object is complete: the give-back goes back to its end
        if task.pre_commit({TP: 4}) == {TP: 4}:
            break
        threading.Event().wait(0.02)
    given = _given_back(lambda: task.put(_batch(raws[4:], start=4)))
    for _ in range(100):  # with upload threads the refusal comes from the thread encoding the object
        if given:
            break
        threading.Event().wait(0.02)
        given = _given_back(lambda: task.pre_commit({TP: 10}))
    assert given == {TP: 4}

    replay = _batch(raws[4:], start=4, raw=False)  # the runtime delivers it again decoded
    with pytest.raises(UnwritableRecordError) as refused:
        task.put(replay)
    assert (refused.value.record.kafka_offset, refused.value.record.value) == (5, orjson.loads(poison))
    task.put(SinkRecordBatch.of([r for r in replay if r.kafka_offset != 5]))  # what the runtime offers again
    task.put(_batch(good[10:14], start=10))
    task.pre_commit({TP: 14})
    for _ in range(100):
        if len(bucket.objects) == 3:
            break
        threading.Event().wait(0.02)
    rows = {k: pq.read_table(io.BytesIO(v)).to_pylist() for k, v in bucket.objects.items()}
    assert rows == {
        f"{DIR}/t+0+0000000000.parquet": [{"i": i, "s": f"v{i}"} for i in range(4)],
        f"{DIR}/t+0+0000000004.parquet": [{"i": i, "s": f"v{i}"} for i in (4, 6, 7, 8)],
        f"{DIR}/t+0+0000000009.parquet": [{"i": i, "s": f"v{i}"} for i in (9, 10, 11, 12)],
    }
    task.stop()
