"""A topic range as a DataFrame, read by Spark's Kafka data source with explicit offsets.

Offsets and timestamps in the spec are resolved to concrete offsets per partition in the driver
first (metadata only), so the job reads exactly the range it reports, and its total — the sum of
``end - start`` — is known before the read (an upper bound on compacted topics).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sluice.connectors.backfill.errors import BackfillJobError
from sluice.connectors.backfill.kafka_admin import offsets_for_times, partition_count, watermarks


@dataclass(frozen=True)
class ResolvedRange:
    """Concrete ``[start, end)`` offsets per partition of one topic."""

    topic: str
    start: dict[int, int]
    end: dict[int, int]

    @property
    def total(self) -> int:
        return sum(max(0, self.end[p] - self.start[p]) for p in self.start)

    @property
    def partitions(self) -> list[int]:
        return [p for p in sorted(self.start) if self.end[p] > self.start[p]]


def resolve_range(source: Any, bootstrap: str) -> ResolvedRange:
    """The spec's range (offsets, timestamps or neither) as offsets, clamped to what exists."""
    count = partition_count(bootstrap, source.topic)
    if not count:
        raise BackfillJobError(f"topic {source.topic} does not exist")
    marks = watermarks(bootstrap, source.topic, count)
    start = {p: low for p, (low, _) in marks.items()}
    end = {p: high for p, (_, high) in marks.items()}
    if source.start_offsets is not None:
        start = {p: start[p] for p in start if str(p) in source.start_offsets}
        for p_text, offset in source.start_offsets.items():
            p = int(p_text)
            if p not in marks:
                raise BackfillJobError(f"source.start.offsets: topic {source.topic} has no partition {p}")
            start[p] = max(marks[p][0], offset)
    elif source.start_timestamp_ms is not None:
        start = offsets_for_times(bootstrap, source.topic, count, source.start_timestamp_ms)
    if source.end_offsets is not None:
        for p_text, offset in source.end_offsets.items():
            p = int(p_text)
            if p not in marks:
                raise BackfillJobError(f"source.end.offsets: topic {source.topic} has no partition {p}")
            end[p] = min(marks[p][1], offset)
    elif source.end_timestamp_ms is not None:
        end = offsets_for_times(bootstrap, source.topic, count, source.end_timestamp_ms)
    start = {p: o for p, o in start.items() if p in end}
    end = {p: max(end[p], start[p]) for p in start}
    return ResolvedRange(source.topic, start, end)


def read_range(spark: Any, source: Any, rng: ResolvedRange, bootstrap: str) -> Any:
    """``topic, partition, offset, key, value, timestamp_ms, headers`` of the range, one Spark
    partition per Kafka partition, in offset order."""
    parts = rng.partitions
    if not parts:
        return None
    starting = {rng.topic: {str(p): rng.start[p] for p in parts}}
    ending = {rng.topic: {str(p): rng.end[p] for p in parts}}
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("assign", json.dumps({rng.topic: parts}))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("includeHeaders", "true")
    )
    for key, value in source.consumer.items():
        reader = reader.option(f"kafka.{key}", value)
    return reader.load().selectExpr(
        "topic", "partition", "offset", "key", "value", "unix_millis(timestamp) AS timestamp_ms", "headers"
    )
