"""Per-Kafka-partition object writing: rotation rules, the open-object cap and durable offsets.

One :class:`TopicPartitionWriter` per assigned Kafka partition. Records go into *open objects*,
one per encoded partition (directory), each streamed to a multipart upload as it grows. The
writer's state since it was last empty is a function of the records alone (never of the
wall clock, of other partitions or of batch boundaries), which is what makes the layout
exactly-once: replaying from a committed offset rebuilds the same objects, with the same names
and the same bytes. Rules, in the order they are applied to each record:

1. ``rotate.interval.ms``: if the record's time (the partitioner's extractor) is at least the
   interval past the first record of the current epoch, or a time-based partitioner puts it in
   another bucket than the previous record, every open object is committed first.
2. A value-schema change commits every open object first (``schema.compatibility=NONE``).
3. Opening an object beyond ``partitioner.max.open.files`` commits the oldest open object alone,
   so memory stays bounded however many directories a partition spreads over.
4. After the record is written, ``flush.size`` records since the last full commit commit every
   open object.

``rotate.schedule.interval.ms`` (wall clock) commits everything when due, checked on each put
and pre-commit. The safe consumer offset is the offset after the last *full* commit: a replay
must start from a point where the writer was empty, or it would name objects differently.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from concurrent.futures import wait as futures_wait
from typing import Any
from zoneinfo import ZoneInfo

from sluice.connectors.api import DataError, Schema
from sluice.connectors.s3_common.formats import RecordFormat
from sluice.connectors.s3_common.layout import ObjectLayout
from sluice.connectors.s3_common.partitioners import (
    DefaultPartitioner,
    Extractor,
    Partitioner,
    TimeBasedPartitioner,
    make_extractor,
)
from sluice.connectors.s3_common.storage import ObjectStorage
from sluice.connectors.sink.s3.open_object import JSON_LINES, Columns, OpenObject, WriterSettings, null_probe

__all__ = ["Columns", "TopicPartitionWriter", "WriterSettings", "null_probe"]

log = logging.getLogger(__name__)


class TopicPartitionWriter:
    """Writes the records of one Kafka partition into objects; see the module docstring."""

    def __init__(
        self,
        topic: str,
        partition: int,
        storage: ObjectStorage,
        fmt: RecordFormat,
        partitioner: Partitioner,
        layout: ObjectLayout,
        settings: WriterSettings,
        keys_format: RecordFormat | None = None,
        clock: Callable[[], float] = time.time,
        uploader: Executor | None = None,
        max_pending: int = 4,
    ) -> None:
        self.topic = topic
        self.uploader = uploader
        self.max_pending = max_pending
        self.partition = partition
        self.storage = storage
        self.fmt = fmt
        self.partitioner = partitioner
        self.layout = layout
        self.settings = settings
        self.keys_format = keys_format or JSON_LINES
        self.clock = clock
        self.open: dict[str, OpenObject] = {}
        #: Objects rotated out but not yet uploaded, each with the offset that becomes durable when
        #: it (and everything before it) is committed — ``None`` for a lone capped object.
        self.pending: deque[tuple[OpenObject, int | None]] = deque()
        self._boundary_without_objects: int | None = None
        #: Every record before this offset is in a committed object (or was skipped).
        self.durable: int | None = None
        #: The offset after the last record seen (records below it are duplicates of a retried put).
        self.next_offset: int | None = None
        self.epoch_count = 0
        self.tombstones_ignored = 0  # null values skipped (behavior.on.null.values=ignore), each logged
        self.epoch_base_time: int | None = None
        self.current_encoded: str | None = None
        self.current_schema: Schema | None = None
        self.committed_keys: list[str] = []
        self._times_extractor: Extractor | None = None
        if settings.rotate_interval_ms > 0:
            if isinstance(partitioner, TimeBasedPartitioner):
                self._times_extractor = partitioner.record_times
            else:
                self._times_extractor = make_extractor(settings.timestamp_extractor, settings.timestamp_field)
        self.next_scheduled_ms = self._next_schedule(int(clock() * 1000))

    # -- state ----------------------------------------------------------------------------------

    @property
    def is_empty(self) -> bool:
        """True when nothing is buffered or waiting for upload."""
        return not self.open and not self.pending

    @property
    def memory_bytes(self) -> int:
        return sum(o.memory_bytes for o in self.open.values()) + sum(o.memory_bytes for o, _ in self.pending)

    def safe_offset(self, consumed: int) -> int | None:
        """The consumer offset that may be committed now (``None``: nothing new is durable)."""
        if self.is_empty:
            return consumed
        return self.durable

    # -- writing --------------------------------------------------------------------------------

    def write(self, cols: Columns) -> None:
        """Add the records of ``cols`` (offsets ascending); records already seen are skipped."""
        self.drain()
        n = len(cols.offsets)
        start = 0
        if self.next_offset is not None and n and cols.offsets[0] < self.next_offset:
            while start < n and cols.offsets[start] < self.next_offset:
                start += 1  # a put() retried after a RetriableError: these are buffered already
        if start >= n:
            return
        values = cols.values
        has_null = None in values
        if has_null and self.settings.null_values == "fail":
            # Before any state changes: the runtime offers the batch again without the record.
            first = next((i for i in range(start, n) if values[i] is None), None)
            if first is not None:
                raise DataError(
                    f"Null value in {cols.topic}-{cols.partition} at offset {cols.offsets[first]}; "
                    "set behavior.on.null.values=ignore (or write) to accept tombstones"
                )
        self.check_schedule()
        fast = (
            self.partitioner.per_kafka_partition
            and self._times_extractor is None
            and not has_null
            and _uniform(cols.schemas, start)
        )
        if fast:
            self._write_fast(cols, start)
        else:
            self._write_general(cols, start)
        self.drain()

    def _write_fast(self, cols: Columns, start: int) -> None:
        """One directory, no time rules, one schema: cut the batch at flush.size boundaries."""
        n = len(cols.offsets)
        assert isinstance(self.partitioner, DefaultPartitioner)
        encoded = self.partitioner.encode(cols.partition)
        schema = cols.schemas[start] if cols.schemas else None
        if self.open and schema is not self.current_schema and schema != self.current_schema:
            self.rotate_all(cols.offsets[start])
        self.current_schema = schema
        i = start
        while i < n:
            if self.is_empty:
                self.durable = cols.offsets[i]
            room = self.settings.flush_size - self.epoch_count
            j = min(n, i + room)
            obj = self._object(encoded, cols, i)
            obj.append(cols, slice(i, j), schema)
            self.epoch_count += j - i
            self.next_offset = cols.offsets[j - 1] + 1
            if self.epoch_count >= self.settings.flush_size:
                self.rotate_all(self.next_offset)
            i = j

    def _write_general(self, cols: Columns, start: int) -> None:
        n = len(cols.offsets)
        offsets, values, schemas = cols.offsets, cols.values, cols.schemas
        settings = self.settings
        sub_values = values[start:] if start else values
        times = _record_times(self._times_extractor, cols, start) if self._times_extractor else None
        encoded_list, constant = self._directories(cols, start, sub_values, times)
        # The per-record loop stays whole: it is the hot path, its rules share the run and epoch state.
        run: dict[str, list[int]] = {}  # records not yet handed to their object, per directory
        rotate_interval = settings.rotate_interval_ms
        time_based = self.partitioner.time_based
        ignored = 0
        for k in range(n - start):
            i = start + k
            offset = offsets[i]
            value = values[i]
            encoded = encoded_list[k] if encoded_list is not None else constant
            if value is None:
                if settings.null_values == "ignore":
                    if self.is_empty and not run:
                        self.durable = offset + 1
                    self.next_offset = offset + 1
                    ignored += 1
                    continue
                if settings.null_values == "fail":
                    raise DataError(
                        f"Null value in {cols.topic}-{cols.partition} at offset {offset}; "
                        "set behavior.on.null.values=ignore (or write) to accept tombstones"
                    )
                encoded = settings.tombstone_partition
            if self.is_empty and not run:
                self.durable = offset
            schema = schemas[i] if schemas else None
            if (self.open or run) and schema is not self.current_schema and schema != self.current_schema:
                self._flush_run(run, cols)
                self.rotate_all(offset)
            self.current_schema = schema
            if times is not None:
                record_time = times[k]
                if self.epoch_base_time is None or not (self.open or run):
                    self.epoch_base_time = record_time
                elif record_time - self.epoch_base_time >= rotate_interval or (
                    time_based and encoded != self.current_encoded
                ):
                    self._flush_run(run, cols)
                    self.rotate_all(offset)
                    self.epoch_base_time = record_time
            self.current_encoded = encoded
            if encoded not in self.open and encoded not in run:
                while len(self.open.keys() | run.keys()) >= settings.max_open_files:
                    self._evict_oldest(run, cols)
            run.setdefault(encoded, []).append(i)
            self.epoch_count += 1
            self.next_offset = offset + 1
            if self.epoch_count >= settings.flush_size:
                self._flush_run(run, cols)
                self.rotate_all(offset + 1)
        self._flush_run(run, cols)
        if ignored:
            self._tombstones_ignored(ignored, cols)

    def _directories(
        self, cols: Columns, start: int, sub_values: Sequence[Any], times: list[int] | None
    ) -> tuple[Sequence[str] | None, str]:
        """The encoded partition (directory) of each record from ``start`` on, or ``None`` and the
        one directory of them all."""
        if isinstance(self.partitioner, DefaultPartitioner):
            return None, self.partitioner.encode(cols.partition)
        if isinstance(self.partitioner, TimeBasedPartitioner) and times is not None:
            return self.partitioner.encode_times(times), ""
        non_null = [v for v in sub_values if v is not None] if None in sub_values else sub_values
        encoded_non_null = self.partitioner.encode_batch(cols.partition, non_null, lambda: _non_null_times(cols, start))
        if non_null is sub_values:
            return encoded_non_null, ""
        it = iter(encoded_non_null)
        tombstone = self.settings.tombstone_partition
        return [tombstone if v is None else next(it) for v in sub_values], ""

    def _tombstones_ignored(self, ignored: int, cols: Columns) -> None:
        self.tombstones_ignored += ignored
        log.warning(
            "Ignored %d tombstone(s) (null values) of %s-%d up to offset %d: behavior.on.null.values=ignore",
            ignored,
            cols.topic,
            cols.partition,
            cols.offsets[-1],
        )

    def _flush_run(self, run: dict[str, list[int]], cols: Columns) -> None:
        runs = list(run.items())
        for k, (encoded, indices) in enumerate(runs):
            obj = self._object(encoded, cols, indices[0])
            schema = cols.schemas[indices[0]] if cols.schemas else None
            try:
                obj.append(cols, indices, schema)
            except DataError:
                # A value the format refuses (appends leave nothing of a refused call): the records
                # of this run and the later ones are not written, so a put() offered again must not
                # skip them as already buffered, nor count them twice towards flush.size (the
                # objects would then depend on where the batch was cut).
                self.next_offset = min(cols.offsets[i[0]] for _, i in runs[k:])
                self.epoch_count -= sum(len(i) for _, i in runs[k:])
                raise
        run.clear()

    def _evict_oldest(self, run: dict[str, list[int]], cols: Columns) -> None:
        # Open objects were opened before anything in the current run, so they are the oldest.
        if self.open:
            encoded = next(iter(self.open))
        else:
            encoded = next(iter(run))
        indices = run.pop(encoded, None)
        if indices:
            schema = cols.schemas[indices[0]] if cols.schemas else None
            self._object(encoded, cols, indices[0]).append(cols, indices, schema)
        obj = self.open.pop(encoded)
        log.debug("Open-object cap reached: committing %s early", obj.key)
        self.pending.append((obj, None))

    def _object(self, encoded: str, cols: Columns, first_index: int) -> OpenObject:
        obj = self.open.get(encoded)
        if obj is None:
            start = cols.offsets[first_index]
            key = self.layout.object_key(cols.topic, encoded, cols.partition, start, self.fmt.extension)
            obj = self.open[encoded] = OpenObject(
                key, encoded, start, self.storage, self.fmt, self.settings, self.keys_format, self.uploader
            )
        return obj

    # -- rotation and upload ----------------------------------------------------------------------

    def rotate_all(self, next_offset: int) -> None:
        """Queue every open object for upload; ``next_offset`` becomes durable once they are."""
        objects = list(self.open.values())
        self.open.clear()
        self.epoch_count = 0
        self.epoch_base_time = None
        if objects:
            for obj in objects[:-1]:
                self.pending.append((obj, None))
            self.pending.append((objects[-1], next_offset))
        elif self.pending:
            last, _ = self.pending.pop()
            self.pending.append((last, next_offset))
        else:
            self.durable = next_offset

    def drain(self, wait: bool = False) -> None:
        """Upload the queued objects; ``durable`` advances over the finished front of the queue.

        Without an uploader the uploads run here, in order. With one they run on its threads,
        overlapping the encoding of the next records; this returns without waiting unless
        ``wait`` is set or more than ``max_pending`` objects are queued (back-pressure that
        bounds the memory held by finished-but-unsent objects). A failed upload raises the
        storage's error here, at the front of the queue; calling again resubmits it.
        """
        uploader = self.uploader
        if uploader is not None:
            for obj, _ in self.pending:
                if obj.upload_future is None:
                    obj.upload_future = uploader.submit(obj.commit)
        while self.pending:
            obj, boundary = self.pending[0]
            future = obj.upload_future
            if future is None:
                obj.commit()
            else:
                if not future.done() and not wait and len(self.pending) <= self.max_pending:
                    break
                try:
                    future.result()
                except BaseException:
                    obj.upload_future = None  # resubmitted by the next drain
                    raise
            self.pending.popleft()
            self.committed_keys.append(obj.key)
            if len(self.committed_keys) > 10_000:
                del self.committed_keys[:5_000]
            if boundary is not None:
                self.durable = boundary
        if not self.open and not self.pending and self.next_offset is not None:
            self.durable = self.next_offset

    def check_schedule(self) -> None:
        """Commit everything if the ``rotate.schedule.interval.ms`` wall-clock boundary passed."""
        if self.next_scheduled_ms is None:
            return
        now = int(self.clock() * 1000)
        if now < self.next_scheduled_ms:
            return
        self.next_scheduled_ms = self._next_schedule(now)
        if self.open and self.next_offset is not None:
            log.debug("Scheduled rotation of %s-%d", self.topic, self.partition)
            self.rotate_all(self.next_offset)

    def _next_schedule(self, now_ms: int) -> int | None:
        interval = self.settings.rotate_schedule_interval_ms
        if interval <= 0:
            return None
        offset = _zone_offset_ms(self.settings.timezone, now_ms)
        local = now_ms + offset
        return local - local % interval + interval - offset

    def abort(self, delete_completed: bool = False) -> None:
        """Drop everything buffered (partition revoked or task stopped): uploads are aborted.

        Objects queued for upload may have completed meanwhile, out of order; they hold records
        past :attr:`durable`, which a replay rewrites with the same names and bytes. With
        ``delete_completed`` they are deleted instead, for a replay whose records differ (one was
        dropped, see ``S3SinkTask._redeliver_decoded``) and would rewrite them under other names.
        """
        for obj in self.open.values():
            obj.abort()
        for obj, _ in self.pending:
            future = obj.upload_future
            if future is not None and not future.cancel():
                futures_wait([future])  # never abort an upload another thread is still sending
            obj.abort()
            if delete_completed:
                obj.delete_if_completed(self.storage)
        self.open.clear()
        self.pending.clear()


def _uniform(schemas: Sequence[Schema | None], start: int) -> bool:
    if not schemas:
        return True
    first = schemas[start]
    for s in schemas[start:]:
        if s is not first and s != first:
            return False
    return True


def _non_null_times(cols: Columns, start: int) -> list[int | None]:
    ts = cols.timestamps()
    return [t for t, v in zip(ts[start:], cols.values[start:], strict=False) if v is not None]


def _record_times(extract: Any, cols: Columns, start: int) -> list[int]:
    """Each record's time for the rotation rule; a null value (tombstone) takes its predecessor's."""
    values = cols.values[start:]
    if None not in values:
        return list(extract(values, lambda: cols.timestamps()[start:]))
    keep = [i for i, v in enumerate(values) if v is not None]
    found = extract([values[i] for i in keep], lambda: [cols.timestamps()[start + i] for i in keep]) if keep else []
    out: list[int] = []
    it = iter(found)
    last = 0
    for v in values:
        if v is not None:
            last = next(it)
        out.append(last)
    return out


def _zone_offset_ms(zone_name: str, now_ms: int) -> int:
    delta = ZoneInfo(zone_name).utcoffset(dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC))
    return int(delta.total_seconds() * 1000) if delta else 0
