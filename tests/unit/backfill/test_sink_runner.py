"""The backfill's in-process sink (worker/backfill/sink_runner.py): a topic range's rows, as a
Spark job hands them over, converted and put into a fresh task of the sink connector; at the end
of the range the task commits what it held back (``SinkTask.end_of_input``)."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest

from sluice.connectors.api import TopicPartition
from sluice.connectors.s3_common.storage import MemoryStorage
from sluice.connectors.sink.s3.task import S3SinkTask
from sluice.worker.backfill.sink_runner import InProcessSink

TP = TopicPartition("orders", 0)
T0 = 1_700_000_000_000


@pytest.fixture
def bucket() -> Iterator[MemoryStorage]:
    storage = MemoryStorage("bkt")
    S3SinkTask.storage_factory = lambda cfg: storage
    yield storage
    S3SinkTask.storage_factory = None


def s3_export(**settings: str) -> InProcessSink:
    config = {
        "name": "export",
        "connector.class": "S3Sink",
        "topics": "orders",
        "s3.bucket.name": "bkt",
        "format.class": "json",
        "flush.size": "3",
        "s3.upload.threads": "0",
        "key.converter": "StringConverter",
        "value.converter": "JsonConverter",
        "value.converter.schemas.enable": "false",
        **settings,
    }
    return InProcessSink("export", config, "127.0.0.1:9")  # the broker is never reached


def put_range(sink: InProcessSink, first: int, last: int) -> None:
    offsets = list(range(first, last + 1))
    sink.put_columns(
        "orders",
        [0] * len(offsets),
        offsets,
        [b"k%d" % o for o in offsets],
        [orjson.dumps({"n": o}) for o in offsets],
        [T0 + o if o % 2 else None for o in offsets],
        [[("origin", b"spark")] if o == first else None for o in offsets],
    )


def test_a_range_ends_with_its_tail_in_the_bucket_under_the_streams_key(bucket: MemoryStorage) -> None:
    sink = s3_export()
    sink.start([TP])
    put_range(sink, 10, 13)
    sink.finish({TP: 14})
    assert sorted(bucket.objects) == [
        "topics/orders/partition=0/orders+0+0000000010.json",
        "topics/orders/partition=0/orders+0+0000000013.json",  # the tail a stream holds back for more
    ]
    lines = [orjson.loads(x) for x in bucket.objects["topics/orders/partition=0/orders+0+0000000010.json"].splitlines()]
    assert lines == [{"n": 10}, {"n": 11}, {"n": 12}]
    assert (sink.rows, sink.bytes) == (4, 4 * len(b'{"n":10}') + 4 * len(b"k10"))


def test_the_batch_carries_the_consumed_columns(bucket: MemoryStorage) -> None:
    sink = s3_export(**{"store.kafka.headers": "true", "headers.format.class": "json"})
    seen: list[tuple[list[int], list[int | None], list[int], list[object]]] = []
    put = sink.task.put
    sink.task.put = lambda batch: (  # type: ignore[method-assign]
        seen.append((batch.offsets, batch.timestamps, batch.timestamp_types, batch.headers)),
        put(batch),
    )[1]
    sink.start([TP])
    put_range(sink, 0, 2)
    sink.stop()
    assert seen == [([0, 1, 2], [None, T0 + 1, None], [0, 1, 0], [(("origin", "spark"),), None, None])]
