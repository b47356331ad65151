"""A batch the S3 sink was handed, by Kafka partition, as the :class:`Columns` its writers take.

What each column holds depends on how the task could take the values (see
:meth:`~sluice.connectors.sink.s3.task.S3SinkTask.put`): raw bytes (schemaless JSON, or the
payloads of JSON with schemas) with their value schemas; a typed table, or the raw values and
what reads them into one later (Parquet from JSON with schemas or Avro); or the decoded values.
Keys, timestamps and headers are read only if an object stores them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from sluice.connectors.api import Headers, Schema, SinkRecordBatch, TopicPartition, WireFormat
from sluice.connectors.sink.s3.open_object import Columns, null_probe
from sluice.connectors.sink.s3.typed_values import LateTable

__all__ = ["Keys", "decoded", "split_batch"]

log = logging.getLogger(__name__)


class Keys(NamedTuple):
    """A batch's keys for :class:`Columns`: read on demand; with ``raw``, the JSON bytes of each."""

    read: Callable[[], Sequence[Any]]
    raw: bool = False


def decoded(records: SinkRecordBatch, wire: WireFormat, keys: Keys) -> list[tuple[TopicPartition, Columns]]:
    """A batch with raw values the fast path does not take, decoded (and logged at DEBUG, which
    tells why a topic is slower than it might be)."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "Decoding %d values (%s) of %s-%d from offset %d: the fast path does not take them as consumed",
            len(records),
            wire.kind + (" with schemas" if wire.schemas else ""),
            records.original_topic,
            records.partitions[0],
            records.offsets[0],
        )
    return split_batch(records, None, keys=keys)


def split_batch(
    batch: SinkRecordBatch,
    raw: Sequence[bytes | None] | None,
    typed: LateTable | tuple[Any, Schema] | None = None,
    raw_schemas: Sequence[Schema | None] = (),
    keys: Keys | None = None,
) -> list[tuple[TopicPartition, Columns]]:
    """The batch by Kafka partition. With ``raw`` (checked JSON bytes, each the JSON value decoding
    writes) the converted values are never read, and their schemas are ``raw_schemas`` (none:
    schemaless); with ``typed`` (the values as a typed table and their schema, or their schema and
    what reads the table later) they are read only by an object that does not take the table;
    otherwise ``values`` is read here, before any writer sees the batch. Keys (``keys``, else
    decoded) are read only by an object that stores them."""
    keys = keys if keys is not None else Keys(lambda: batch.keys)
    if isinstance(typed, LateTable):
        return _split_typed(batch, None, typed.schema, typed.read, keys)
    if typed is not None:
        return _split_typed(batch, *typed, keys=keys)
    partitions = batch.partitions
    first = partitions[0]
    if partitions.count(first) == len(partitions):  # the common case: one partition per batch
        cols = Columns(
            topic=batch.topic,
            partition=first,
            offsets=batch.offsets,
            values=batch.values if raw is None else null_probe(raw),
            schemas=batch.value_schemas if raw is None else raw_schemas,
            keys=keys.read,
            timestamps=lambda: batch.timestamps,
            headers=lambda: batch.headers,
            raw=raw,
            raw_keys=keys.raw,
        )
        return [(TopicPartition(batch.original_topic, first), cols)]  # offsets are the consumed topic's
    return _split_partitions(batch, raw, raw_schemas, keys)


def _split_partitions(
    batch: SinkRecordBatch, raw: Sequence[bytes | None] | None, raw_schemas: Sequence[Schema | None], keys: Keys
) -> list[tuple[TopicPartition, Columns]]:
    """:func:`split_batch` of a batch of several Kafka partitions, without a table."""
    indices: dict[int, list[int]] = {}
    for i, p in enumerate(batch.partitions):
        indices.setdefault(p, []).append(i)
    values = batch.values if raw is None else None
    schemas = batch.value_schemas if raw is None else raw_schemas or None
    out = []
    for p, idx in indices.items():

        def pick(column: Callable[[], Sequence[Any]], idx: list[int] = idx) -> Callable[[], list[Any]]:
            return lambda: [column()[i] for i in idx]

        timestamps: Callable[[], Sequence[int | None]] = pick(lambda: batch.timestamps)
        headers: Callable[[], Sequence[Headers | None]] = pick(lambda: batch.headers)
        sub_raw = None if raw is None else [raw[i] for i in idx]
        cols = Columns(
            topic=batch.topic,
            partition=p,
            offsets=[batch.offsets[i] for i in idx],
            values=[values[i] for i in idx] if values is not None else null_probe(sub_raw),  # type: ignore[arg-type]
            schemas=[schemas[i] for i in idx] if schemas is not None else (),
            keys=pick(keys.read),
            timestamps=timestamps,
            headers=headers,
            raw=sub_raw,
            raw_keys=keys.raw,
        )
        out.append((TopicPartition(batch.original_topic, p), cols))
    return out


def _split_typed(
    batch: SinkRecordBatch,
    table: Any,
    schema: Schema,
    read_later: Callable[[list[bytes]], Any] | None = None,
    keys: Keys | None = None,
) -> list[tuple[TopicPartition, Columns]]:
    """The batch by Kafka partition, its values as rows of ``table`` (no nulls: the readers refuse
    tombstones), each partition's rows taken from it; or, with ``read_later``, its raw values
    read into such rows later (a tombstone among them stays ``None``: the writer applies
    ``behavior.on.null.values`` to it and hands the reader the others)."""
    partitions = batch.partitions
    raws = batch.raw_values
    assert raws is not None
    keys = keys if keys is not None else Keys(lambda: batch.keys)
    indices: dict[int, list[int]] = {}
    if partitions.count(partitions[0]) == len(partitions):  # the common case: one partition per batch
        indices[partitions[0]] = list(range(len(partitions)))
    else:
        for i, p in enumerate(partitions):
            indices.setdefault(p, []).append(i)
    out = []
    for p, idx in indices.items():
        whole = len(idx) == len(partitions)

        def pick(
            column: Callable[[], Sequence[Any]], idx: list[int] = idx, whole: bool = whole
        ) -> Callable[[], Sequence[Any]]:
            return column if whole else lambda: [column()[i] for i in idx]

        cols = Columns(
            topic=batch.topic,
            partition=p,
            offsets=batch.offsets if whole else [batch.offsets[i] for i in idx],
            values=raws if whole else [raws[i] for i in idx],  # null or not: all the writer reads of them
            schemas=[schema] * len(idx),
            keys=pick(keys.read),
            timestamps=pick(lambda: batch.timestamps),
            headers=pick(lambda: batch.headers),
            table=table if whole or table is None else table.take(idx),
            decoded=pick(lambda: batch.values),
            read_later=read_later,
            raw_keys=keys.raw,
        )
        out.append((TopicPartition(batch.original_topic, p), cols))
    return out
