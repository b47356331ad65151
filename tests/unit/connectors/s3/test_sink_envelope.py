"""The S3 sink's Parquet objects from JSON with schemas taken raw: byte for byte what decoding writes.

Seeded random batches of every Connect type Parquet stores (see ``tests/envelope_batches.py``) are
put twice, into two buckets: as the runtime hands them to the task (raw values with their wire
format) and decoded up front. Every object must have the same bytes, and the raw batches must
not have been decoded unless the fast path could not take them.
"""

from __future__ import annotations

import io
import random
from collections.abc import Sequence
from typing import Any

import pyarrow.parquet as pq
import pytest

from sluice.connectors.api import SinkRecordBatch, TopicPartition
from sluice.connectors.s3_common.storage import MemoryStorage
from sluice.connectors.sink.s3.task import S3SinkTask
from sluice.converters import json_arrow
from sluice.converters.json import JsonConverter
from tests.envelope_batches import envelope, random_batch, random_payload, random_schema
from tests.unavailable import unavailable

if not json_arrow.available():
    unavailable("the native parser (sluice_native) is not installed: `make setup` builds it from native/ (needs cargo)", allow_module_level=True)

_CONVERTER = JsonConverter()
_CONVERTER.configure({"schemas.enable": "true"}, False)


class _Batch:
    """Builds batches as the runtime does, counting how many raw batches were decoded."""

    def __init__(self, converter: Any = _CONVERTER) -> None:
        self.decoded = 0
        self.converter = converter

    def __call__(self, raws: Sequence[bytes], start: int, *, raw: bool, partitions: list[int]) -> SinkRecordBatch:
        return self.batch(raws, range(start, start + len(raws)), raw=raw, partitions=partitions)

    def batch(self, raws: Sequence[bytes], offsets: Sequence[int], *, raw: bool, partitions: list[int]) -> SinkRecordBatch:
        """The batch of ``raws`` at ``offsets`` (any, e.g. a replay's)."""
        n = len(raws)
        columns = {
            "partition": partitions,
            "kafka_offset": list(offsets),
            "timestamp": [1_700_000_000_000 + o for o in offsets],
            "timestamp_type": [1] * n,
            "headers": [None] * n,
        }
        keys = [f"k{o}" for o in offsets]
        if not raw:
            schemas, values = self.converter.to_connect_batch("t", list(raws))
            return SinkRecordBatch("t", values, schemas, keys, [None] * n, columns.__getitem__)

        def decode() -> Any:
            self.decoded += 1
            return self.converter.to_connect_batch("t", list(raws))

        return SinkRecordBatch(
            "t",
            None,
            None,
            keys,
            [None] * n,
            columns.__getitem__,
            raw_values=list(raws),
            decode=decode,
            raw_format=self.converter.wire_format(),
            writer_schema=self.converter.writer_schema,
        )


def _objects(
    batches: list[list[bytes]], *, raw: bool, partitions: int = 1, converter: Any = _CONVERTER, **config: Any
) -> tuple[dict[str, bytes], int]:
    """The objects the sink writes for ``batches`` (all committed ones), and how many raw batches it decoded."""
    storage = MemoryStorage("bkt")
    S3SinkTask.storage_factory = lambda cfg: storage
    make = _Batch(converter)
    try:
        task = S3SinkTask()
        settings = {
            "s3.bucket.name": "bkt",
            "format.class": "parquet",
            "flush.size": "300",
            "parquet.row.group.rows": "128",
            "s3.upload.threads": "0",
            **{k: str(v) for k, v in config.items()},
        }
        task.start(settings, None)  # type: ignore[arg-type]
        assert task.value_format == "raw_typed"
        task.open([TopicPartition("t", p) for p in range(partitions)])
        offset = 0
        for raws in batches:
            parts = [i % partitions for i in range(len(raws))]
            task.put(make(raws, offset, raw=raw, partitions=parts))
            offset += len(raws)
        # Uploads run on their own threads and close() aborts those in flight (their records are
        # not committed, so they are consumed again): wait for them, as commits over time would.
        for writer in task.writers.values():
            writer.drain(wait=True)
        task.close([TopicPartition("t", p) for p in range(partitions)])
        task.stop()
    finally:
        S3SinkTask.storage_factory = None
    return dict(storage.objects), make.decoded


@pytest.mark.parametrize("seed", range(30))
def test_random_batches_make_the_same_parquet_objects_as_decoded(seed: int) -> None:
    rng = random.Random(seed)
    schema, raws = random_batch(rng, 1000)
    batches = [raws[i : i + 250] for i in range(0, 1000, 250)]
    partitions = 1 + seed % 2
    fast, decoded = _objects(batches, raw=True, partitions=partitions)
    slow, _ = _objects(batches, raw=False, partitions=partitions)
    assert sorted(fast) == sorted(slow) and fast
    for key in slow:
        assert fast[key] == slow[key], key
    assert decoded == 0
    rows = sum(pq.read_table(io.BytesIO(data)).num_rows for data in fast.values())
    assert rows == (900 if partitions == 1 else 600)  # whole objects of flush.size records


def test_a_batch_with_a_record_of_another_schema_is_decoded_and_nothing_is_lost() -> None:
    rng = random.Random(5)
    schema = random_schema(rng, 4)
    other = random_schema(rng, 3)
    _, first = random_batch(rng, 300, schema)
    _, second = random_batch(rng, 300, schema)
    second[100] = envelope(other, random_payload(rng, other))
    fast, decoded = _objects([first, second], raw=True, **{"flush.size": 1000})
    slow, _ = _objects([first, second], raw=False, **{"flush.size": 1000})
    assert fast == slow
    assert decoded == 1  # only the mixed batch
    tables = [pq.read_table(io.BytesIO(data)) for _, data in sorted(fast.items())]
    # A schema change commits the open object (schema.compatibility=NONE): 400 rows, then the odd
    # record alone; the last 199 rows stay in the open object.
    assert [t.num_rows for t in tables] == [400, 1]
    assert tables[1].column_names == [f["field"] for f in other["fields"]]


@pytest.mark.parametrize("seed", range(6))
def test_row_groups_encoded_on_upload_threads_give_the_same_objects(seed: int) -> None:
    rng = random.Random(300 + seed)
    _, raws = random_batch(rng, 1000)
    batches = [raws[i : i + 100] for i in range(0, 1000, 100)]
    fast, decoded = _objects(batches, raw=True, **{"s3.upload.threads": 2})
    slow, _ = _objects(batches, raw=False)
    assert fast == slow and len(fast) == 3
    assert decoded == 0


@pytest.mark.parametrize("threads", [0, 2])
def test_tombstones_among_envelopes_stay_on_the_fast_path(threads: int) -> None:
    """A keyed topic's deletes (``behavior.on.null.values=ignore``): the other values of their
    batches are still read late, into the objects decoding writes."""
    rng = random.Random(77)
    _, raws = random_batch(rng, 1000)
    with_tombstones: list[Any] = list(raws)
    for i in (0, 5, 6, 250, 499, 999):
        with_tombstones[i] = None
    batches = [with_tombstones[i : i + 125] for i in range(0, 1000, 125)]
    config = {"behavior.on.null.values": "ignore", "s3.upload.threads": threads}
    fast, decoded = _objects(batches, raw=True, **config)
    slow, _ = _objects(batches, raw=False, **config)
    assert fast == slow and len(fast) == 3
    assert decoded == 0
