"""The S3 source task: objects → records.

**Restore mode** (``mode=RESTORE_BACKUP``) replays what the S3 sink wrote. For each topic it
lists ``<topics.dir>/<topic>/``, keeps the objects the sink named
(``<topic>+<partition>+<start offset>.<ext>``, sidecars aside) and sends each record back to the
partition in its object's name, with its key, headers and timestamp when the sink stored them
(``.keys``, ``.headers.json``, ``.timestamps.json`` sidecars). Order within a Kafka partition:

* When every object of the partition has an ``.offsets.json`` sidecar (the sink writes one for
  field and time-based partitioners, whose objects can interleave offsets), the objects are
  merged by original offset: an object is opened only once the merge reaches its start offset,
  so at most the objects whose ranges overlap are in memory at once.
* Otherwise objects are replayed one after another in start-offset order, which is offset order
  for any layout whose objects do not interleave (the default partitioner).

Offsets: source partition ``{"bucket", "topic", "partition"}``, offset ``{"object", "start",
"position"}`` (records of that object delivered), plus ``"offset"`` (the original Kafka offset)
for merged partitions. A restart resumes mid-object: it skips the objects before the stored one
and the first ``position`` records of it, or, for merged partitions, every record at or below the
stored Kafka offset.

**Generic mode** (``mode=GENERIC``): see :mod:`sluice.connectors.source.s3.generic`.
"""

from __future__ import annotations

import base64
import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from itertools import islice
from typing import Any, ClassVar

from sluice.connectors.api import SourceRecord, SourceTask, SourceTaskContext
from sluice.connectors.s3_common.formats import FormatSettings, JsonFormat, RecordFormat, make_format
from sluice.connectors.s3_common.layout import ObjectLayout, ParsedKey
from sluice.connectors.s3_common.storage import ObjectStorage, S3Storage
from sluice.connectors.source.s3.config import TASK_COUNT_KEY, TASK_INDEX_KEY, TASK_TOPICS_KEY, S3SourceConfig
from sluice.connectors.source.s3.generic import GenericScan, parse_topic_regex_list

log = logging.getLogger(__name__)

_JSON = JsonFormat()
_MAX_WAIT_S = 0.5

#: One unit of work: opens an object (or a merged partition) and yields its records.
Work = Callable[[], Iterator[SourceRecord]]


class S3SourceTask(SourceTask):
    """Replays objects; see the module docstring. :meth:`stop` may come from any thread."""

    version = "0.1.0"

    #: Builds the storage from the configuration; tests replace it with an in-memory bucket.
    storage_factory: ClassVar[Callable[[S3SourceConfig], ObjectStorage] | None] = None

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._work: deque[Work] = deque()
        self._stream: Iterator[SourceRecord] | None = None
        self._seen: set[str] = set()
        self._all_keys: set[str] = set()
        self._resume: dict[tuple[str, int], tuple[int, str, int, int]] = {}
        self._next_listing = 0.0
        self._topics: list[str] = []
        self._layout = ObjectLayout()
        self._format: RecordFormat = _JSON
        self._keys_format: RecordFormat = _JSON
        self._bucket = ""
        self._batch = 2_000
        self._interval_s = 60.0
        self._generic: GenericScan | None = None
        self.storage: ObjectStorage | None = None

    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        """Parse the configuration and connect. Thread: the task thread."""
        self.context = context
        cfg = S3SourceConfig.from_task_config(config)
        assigned = str(config.get(TASK_TOPICS_KEY) or "")
        self._topics = [t for t in assigned.split(",") if t] or list(cfg.topics)
        self._layout = cfg.layout()
        self._format = make_format(cfg.format_settings())
        self._keys_format = make_format(
            FormatSettings(format=cfg.keys_format_class, compression=cfg.s3_compression_type)
        )
        self._bucket = cfg.s3_bucket_name
        self._batch = cfg.record_batch_max_size
        self._interval_s = cfg.s3_poll_interval_ms / 1000
        factory = type(self).storage_factory
        self.storage = factory(cfg) if factory is not None else S3Storage(cfg.connection())
        self._stopping.clear()
        self._work.clear()
        self._stream = None
        self._seen.clear()
        self._next_listing = 0.0
        self._resume = {}
        if cfg.mode == "GENERIC":
            self._generic = GenericScan(
                self._bucket,
                cfg.generic_prefix(),
                parse_topic_regex_list(cfg.topic_regex_list),
                self._format,
                int(config.get(TASK_INDEX_KEY) or 0),
                int(config.get(TASK_COUNT_KEY) or 1),
            )
            log.info("Reading objects under %r of bucket %s into topics", cfg.generic_prefix(), self._bucket)
        else:
            self._generic = None
            log.info("Restoring topics %s from bucket %s", ", ".join(self._topics) or "(none)", self._bucket)

    def poll(self) -> list[SourceRecord] | None:
        """The next records, or ``None`` while there is nothing new. Thread: the task thread."""
        deadline = time.monotonic() + _MAX_WAIT_S
        while not self._stopping.is_set():
            if self._stream is not None:
                batch = list(islice(self._stream, self._batch))
                if batch:
                    return batch
                self._stream = None
                continue
            if self._work:
                self._stream = self._work.popleft()()
                continue
            now = time.monotonic()
            if now >= self._next_listing:
                self._list()
                self._next_listing = now + self._interval_s
                continue
            remaining = min(self._next_listing, deadline) - now
            if remaining <= 0:
                return None
            self._stopping.wait(remaining)
        return None

    def stop(self) -> None:
        """Make a waiting :meth:`poll` return. Thread: any."""
        self._stopping.set()

    # -- listing ----------------------------------------------------------------------------------

    def _list(self) -> None:
        assert self.storage is not None
        storage = self.storage
        if self._generic is not None:
            scan = self._generic
            reader = self.context.offset_reader if self.context else None
            for key, topic, skip in scan.discover(storage, reader):
                self._work.append(lambda k=key, t=topic, s=skip: scan.records(storage, k, t, s))  # type: ignore[misc]
            return
        found: list[ParsedKey] = []
        for topic in self._topics:
            for key in storage.list_keys(self._layout.topic_prefix(topic)):
                self._all_keys.add(key)
                if key in self._seen:
                    continue
                parsed = self._layout.parse(key)
                if parsed is None or parsed.topic != topic or parsed.extension != self._format.extension:
                    continue
                self._seen.add(key)
                found.append(parsed)
        found.sort(key=lambda p: (p.topic, p.kafka_partition, p.start_offset, p.key))
        groups: dict[tuple[str, int], list[ParsedKey]] = {}
        for parsed in found:
            groups.setdefault((parsed.topic, parsed.kafka_partition), []).append(parsed)
        for tp, group in groups.items():
            if all(p.sidecar("offsets", _JSON.extension) in self._all_keys for p in group):
                self._work.append(lambda tp=tp, g=group: self._merged(tp, g))  # type: ignore[misc]
                continue
            for parsed in group:
                if not self._before_resume_point(parsed):
                    self._work.append(lambda p=parsed: self._object_records(p))  # type: ignore[misc]

    def _stored(self, tp: tuple[str, int]) -> tuple[int, str, int, int]:
        """The stored position of a Kafka partition: (start, object, position, Kafka offset)."""
        if tp not in self._resume:
            stored = self.context.offset_reader.offset(self._source_partition(*tp)) if self.context else None
            if stored and "object" in stored:
                self._resume[tp] = (
                    int(stored.get("start", 0)),
                    str(stored["object"]),
                    int(stored.get("position", 0)),
                    int(stored.get("offset", -1)),
                )
            else:
                self._resume[tp] = (-1, "", 0, -1)
        return self._resume[tp]

    def _before_resume_point(self, parsed: ParsedKey) -> bool:
        start, key, _, _ = self._stored((parsed.topic, parsed.kafka_partition))
        return (parsed.start_offset, parsed.key) < (start, key)

    def _source_partition(self, topic: str, partition: int) -> dict[str, Any]:
        return {"bucket": self._bucket, "topic": topic, "partition": partition}

    # -- reading ----------------------------------------------------------------------------------

    def _merged(self, tp: tuple[str, int], group: list[ParsedKey]) -> Iterator[SourceRecord]:
        """The records of one Kafka partition's objects (start-offset order) merged by offset."""
        after = self._stored(tp)[3]
        queue = deque(group)
        heap: list[tuple[int, int, SourceRecord, Iterator[tuple[int, SourceRecord]]]] = []
        seq = 0
        while queue or heap:
            # An object holds only offsets from its start on: open it once the merge gets there.
            while queue and (not heap or queue[0].start_offset <= heap[0][0]):
                it = self._offset_records(queue.popleft(), after)
                first = next(it, None)
                if first is not None:
                    heapq.heappush(heap, (first[0], seq, first[1], it))
                    seq += 1
            _, _, record, it = heapq.heappop(heap)
            yield record
            following = next(it, None)
            if following is not None:
                heapq.heappush(heap, (following[0], seq, following[1], it))
                seq += 1

    def _offset_records(self, parsed: ParsedKey, after: int) -> Iterator[tuple[int, SourceRecord]]:
        offsets = self._sidecar(parsed, "offsets", _JSON, None)
        records = self._object_records(parsed, offsets, resume=False)
        for offset, record in zip(offsets or (), records):
            if offset > after:
                yield offset, record

    def _object_records(
        self, parsed: ParsedKey, offsets: list[Any] | None = None, *, resume: bool = True
    ) -> Iterator[SourceRecord]:
        assert self.storage is not None
        values = list(self._format.read(self.storage.get_object(parsed.key)))
        n = len(values)
        keys = self._sidecar(parsed, "keys", self._keys_format, n)
        headers = self._sidecar(parsed, "headers", _JSON, n)
        timestamps = self._sidecar(parsed, "timestamps", _JSON, n)
        if offsets is not None and len(offsets) != n:
            log.warning("Ignoring the offsets of %s: %d entries for %d records", parsed.key, len(offsets), n)
            offsets = None
        tp = (parsed.topic, parsed.kafka_partition)
        skip = 0
        if resume:
            _, key, position, _ = self._stored(tp)
            if key == parsed.key:
                skip = position
        source_partition = self._source_partition(*tp)
        for i in range(skip, n):
            offset: dict[str, Any] = {"object": parsed.key, "start": parsed.start_offset, "position": i + 1}
            if offsets is not None:
                offset["offset"] = offsets[i]
            value = values[i]
            values[i] = None  # released as the stream goes
            yield SourceRecord(
                topic=parsed.topic,
                value=value,
                key=keys[i] if keys else None,
                partition=parsed.kafka_partition,
                timestamp=timestamps[i] if timestamps else None,
                headers=decode_headers(headers[i]) if headers else None,
                source_partition=source_partition,
                source_offset=offset,
            )

    def _sidecar(self, parsed: ParsedKey, kind: str, fmt: RecordFormat, count: int | None) -> list[Any] | None:
        assert self.storage is not None
        key = parsed.sidecar(kind, fmt.extension)
        if key not in self._all_keys:
            return None
        items = list(fmt.read(self.storage.get_object(key)))
        if count is not None and len(items) != count:
            log.warning("Ignoring %s: %d entries for %d records", key, len(items), count)
            return None
        return items


def decode_headers(encoded: Any) -> tuple[tuple[str, Any], ...] | None:
    """The sink's ``[[name, value], ...]`` back into headers (``{"$bytes": base64}`` → bytes)."""
    if not encoded:
        return None
    out = []
    for name, value in encoded:
        if isinstance(value, dict) and set(value) == {"$bytes"}:
            value = base64.b64decode(value["$bytes"])
        out.append((str(name), value))
    return tuple(out)
