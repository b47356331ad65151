"""JSON with schemas read late (row group by row group, on the upload threads): what the reader
refuses is delivered again decoded and nothing is lost.

The S3 sink places and rotates records of envelopes that all start with one ``schema`` text
before reading them (see ``connectors/sink/s3/typed_values.py``); the Parquet writer reads each row
group later. A value the reader refuses then shows after its ``put``: the partition is given back
from its first record not in a completed object, the runtime consumes it again decoded, and the
objects end up exactly those of the decoded path.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import pyarrow.parquet as pq
import pytest

from sluice.connectors.api import SinkRecordBatch, TopicPartition, UnusableRawValues
from sluice.connectors.s3_common.storage import MemoryStorage
from sluice.connectors.sink.s3.task import S3SinkTask
from sluice.converters import json_arrow
from sluice.converters.json import JsonConverter
from tests.unavailable import unavailable
from tests.unit.connectors.s3.test_sink_envelope import _Batch

if not json_arrow.available():
    unavailable("the native parser (sluice_native) is not installed: `make setup` builds it from native/ (needs cargo)", allow_module_level=True)

TP = TopicPartition("t", 0)
SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "int64", "optional": False, "field": "i"},
        {"type": "string", "optional": True, "field": "s"},
    ],
    "optional": False,
    "name": "row",
}
_CONVERTER = JsonConverter()
_CONVERTER.configure({"schemas.enable": "true"}, False)


def _envelope(i: int, **extra: Any) -> bytes:
    return orjson.dumps({"schema": SCHEMA, "payload": {"i": i, "s": f"v{i}", **extra}})


class _Batches(_Batch):
    """Batches of partition 0 at given offsets, raw unless ``raw=False`` (see ``_Batch``)."""

    def __call__(self, raws: Sequence[bytes], offsets: Sequence[int], *, raw: bool = True) -> SinkRecordBatch:  # type: ignore[override]
        return self.batch(raws, offsets, raw=raw, partitions=[0] * len(raws))


def _task(storage: MemoryStorage, threads: str) -> S3SinkTask:
    S3SinkTask.storage_factory = lambda cfg: storage
    task = S3SinkTask()
    task.start(
        {"s3.bucket.name": "bkt", "format.class": "parquet", "flush.size": "4", "s3.upload.threads": threads},
        None,  # type: ignore[arg-type]
    )
    task.open([TP])
    return task


def _given_back(call: Callable[[], Any]) -> dict[TopicPartition, int] | None:
    try:
        call()
    except UnusableRawValues as exc:
        return exc.offsets
    return None


def _wait_for(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        threading.Event().wait(0.02)


def _decoded_objects(raws: list[bytes], offsets: list[int]) -> dict[str, bytes]:
    """The objects of the same records all delivered decoded (the reference)."""
    storage = MemoryStorage("bkt")
    try:
        task = _task(storage, "0")
        task.put(_Batches()(raws, offsets, raw=False))
        task.stop()
    finally:
        S3SinkTask.storage_factory = None
    return dict(storage.objects)


@pytest.mark.parametrize("threads", ["0", "2"])
@pytest.mark.parametrize(
    ("bad", "dead"),
    [
        # A member the schema lacks: the converter drops it, the reader refuses the row group.
        (_envelope(5, extra=1), False),
        # Not JSON after the schema: the converter fails it, the runtime dead-letters it.
        (_envelope(5)[:-3], True),
    ],
)
def test_a_row_group_the_late_reader_refuses_is_delivered_again_decoded(threads: str, bad: bytes, dead: bool) -> None:
    storage = MemoryStorage("bkt")
    make = _Batches()
    raws = [bad if i == 5 else _envelope(i) for i in range(14)]
    try:
        task = _task(storage, threads)
        task.put(make(raws[:4], range(4)))
        _wait_for(lambda: task.pre_commit({TP: 4}) == {TP: 4})  # the first object is complete
        given = _given_back(lambda: task.put(make(raws[4:10], range(4, 10))))
        for _ in range(200):  # on upload threads the refusal surfaces at a later call
            if given:
                break
            threading.Event().wait(0.02)
            given = _given_back(lambda: task.pre_commit({TP: 10}))
        assert given == {TP: 4}
        assert sorted(storage.objects) == ["topics/t/partition=0/t+0+0000000000.parquet"]
        assert make.decoded == 0

        # The runtime consumes from offset 4 again, decoded (a value that does not convert is dead-lettered).
        replay = [o for o in range(4, 10) if not (dead and o == 5)]
        task.put(make([raws[o] for o in replay], replay, raw=False))
        task.put(make(raws[10:14], range(10, 14)))  # raw again after the replay
        kept = [o for o in range(14) if not (dead and o == 5)]
        _wait_for(lambda: task.pre_commit({TP: 14}) == {TP: kept[12]})  # the 13th record is in the open object
        assert make.decoded == 0  # the later batch of that schema is read at once, not decoded
        task.stop()
    finally:
        S3SinkTask.storage_factory = None

    assert storage.objects == _decoded_objects([raws[o] for o in kept], kept)
    rows = [r["i"] for _, data in sorted(storage.objects.items()) for r in pq.read_table(io.BytesIO(data)).to_pylist()]
    assert rows == kept[:12]  # three whole objects of flush.size records; the rest stays open


@pytest.mark.parametrize("threads", ["0", "2"])
def test_rows_read_late_follow_rows_of_a_decoded_batch_in_the_same_object(threads: str) -> None:
    """A batch the sink decodes (records of another schema text: the same schema with its members
    in another order, an envelope with spaces) and raw batches read late share objects, records in
    offset order, as on the decoded path."""
    storage = MemoryStorage("bkt")
    make = _Batches()
    reordered = dict(reversed(list(SCHEMA.items())))  # the same schema, another text
    other = orjson.dumps({"schema": reordered, "payload": {"i": 2, "s": "v2"}})
    spaced = b'{"schema": ' + orjson.dumps(SCHEMA) + b', "payload": {"i": 3, "s": "v3"}}'
    raws = [_envelope(i) for i in range(10)]
    raws[2], raws[3] = other, spaced
    try:
        task = _task(storage, threads)
        task.put(make(raws[:2], range(2)))
        task.put(make(raws[2:5], range(2, 5)))
        task.put(make(raws[5:10], range(5, 10)))
        _wait_for(lambda: task.pre_commit({TP: 10}) == {TP: 8})
        task.stop()
    finally:
        S3SinkTask.storage_factory = None
    assert storage.objects == _decoded_objects(raws[:8], list(range(8)))
    rows = [r["i"] for _, data in sorted(storage.objects.items()) for r in pq.read_table(io.BytesIO(data)).to_pylist()]
    assert rows == list(range(8))
