"""The S3 source task (restore mode): objects written by the S3 sink → records in their original partitions.

For each topic it lists ``<topics.dir>/<topic>/``, keeps the objects the sink named
(``<topic>+<partition>+<start offset>.<ext>``, sidecars aside), and replays each Kafka partition's
objects in start-offset order. Each record goes back to the partition in its object's name, with
its key, headers and timestamp when the sink stored them (``.keys``, ``.headers.json``,
``.timestamps.json`` sidecars).

Offsets: source partition ``{"bucket", "topic", "partition"}``, offset ``{"object", "start",
"position"}`` = how many records of that object were delivered. A restart skips the objects before
the stored one and the first ``position`` records of it, so it resumes mid-object. Order is the
original offset order when a partition's objects do not interleave (the default partitioner, or
any layout with flush.size-only rotation per directory); otherwise it is object by object.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from connectors.api import SourceRecord, SourceTask, SourceTaskContext
from connectors.s3_common.formats import FormatSettings, JsonFormat, RecordFormat, make_format
from connectors.s3_common.layout import ObjectLayout, ParsedKey
from connectors.s3_common.storage import ObjectStorage, S3Storage
from connectors.source.s3.config import TASK_TOPICS_KEY, S3SourceConfig

logger = logging.getLogger(__name__)

_JSON = JsonFormat()
_MAX_WAIT_S = 0.5


class S3SourceTask(SourceTask):
    """Replays archived objects; see the module docstring. :meth:`stop` may come from any thread."""

    version = "0.1.0"

    #: Builds the storage from the configuration; tests replace it with an in-memory bucket.
    storage_factory: ClassVar[Callable[[S3SourceConfig], ObjectStorage] | None] = None

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._queue: deque[ParsedKey] = deque()
        self._seen: set[str] = set()
        self._all_keys: set[str] = set()
        self._resume: dict[tuple[str, int], tuple[int, str, int]] = {}
        self._pending: list[SourceRecord] = []
        self._next_listing = 0.0
        self._topics: list[str] = []
        self._layout = ObjectLayout()
        self._format: RecordFormat = _JSON
        self._keys_format: RecordFormat = _JSON
        self._bucket = ""
        self._batch = 2_000
        self._interval_s = 60.0
        self.storage: ObjectStorage | None = None

    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        """Parse the configuration and read the stored positions. Thread: the task thread."""
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
        self._queue.clear()
        self._seen.clear()
        self._pending = []
        self._next_listing = 0.0
        self._resume = {}
        logger.info("Restoring topics %s from bucket %s", ", ".join(self._topics) or "(none)", self._bucket)

    def poll(self) -> list[SourceRecord] | None:
        """The next records of the current object, or ``None`` while there is nothing new. Thread: the task thread."""
        deadline = time.monotonic() + _MAX_WAIT_S
        while not self._stopping.is_set():
            if self._pending:
                batch, self._pending = self._pending[: self._batch], self._pending[self._batch :]
                return batch
            if self._queue:
                self._pending = self._load(self._queue.popleft())
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

    # -- listing and reading ----------------------------------------------------------------------

    def _list(self) -> None:
        assert self.storage is not None
        found: list[ParsedKey] = []
        for topic in self._topics:
            for key in self.storage.list_keys(self._layout.topic_prefix(topic)):
                self._all_keys.add(key)
                if key in self._seen:
                    continue
                parsed = self._layout.parse(key)
                if parsed is None or parsed.topic != topic or not key.endswith(self._format.extension):
                    continue
                if parsed.extension != self._format.extension:
                    continue
                found.append(parsed)
        found.sort(key=lambda p: (p.topic, p.kafka_partition, p.start_offset, p.key))
        for parsed in found:
            if self._before_resume_point(parsed):
                self._seen.add(parsed.key)
                continue
            self._seen.add(parsed.key)
            self._queue.append(parsed)

    def _before_resume_point(self, parsed: ParsedKey) -> bool:
        tp = (parsed.topic, parsed.kafka_partition)
        if tp not in self._resume:
            stored = self.context.offset_reader.offset(self._source_partition(*tp)) if self.context else None
            if stored and "object" in stored:
                self._resume[tp] = (int(stored.get("start", 0)), str(stored["object"]), int(stored.get("position", 0)))
            else:
                self._resume[tp] = (-1, "", 0)
        start, key, _ = self._resume[tp]
        return (parsed.start_offset, parsed.key) < (start, key)

    def _source_partition(self, topic: str, partition: int) -> dict[str, Any]:
        return {"bucket": self._bucket, "topic": topic, "partition": partition}

    def _load(self, parsed: ParsedKey) -> list[SourceRecord]:
        assert self.storage is not None
        values = list(self._format.read(self.storage.get_object(parsed.key)))
        n = len(values)
        keys = self._sidecar(parsed, "keys", self._keys_format, n)
        headers = self._sidecar(parsed, "headers", _JSON, n)
        timestamps = self._sidecar(parsed, "timestamps", _JSON, n)
        tp = (parsed.topic, parsed.kafka_partition)
        skip = 0
        start, key, position = self._resume.get(tp, (-1, "", 0))
        if key == parsed.key:
            skip = position
        source_partition = self._source_partition(*tp)
        records = []
        for i in range(skip, n):
            records.append(
                SourceRecord(
                    topic=parsed.topic,
                    value=values[i],
                    key=keys[i] if keys else None,
                    partition=parsed.kafka_partition,
                    timestamp=timestamps[i] if timestamps else None,
                    headers=decode_headers(headers[i]) if headers else None,
                    source_partition=source_partition,
                    source_offset={"object": parsed.key, "start": parsed.start_offset, "position": i + 1},
                )
            )
        return records

    def _sidecar(self, parsed: ParsedKey, kind: str, fmt: RecordFormat, count: int) -> list[Any] | None:
        assert self.storage is not None
        key = parsed.sidecar(kind, fmt.extension)
        if key not in self._all_keys:
            return None
        items = list(fmt.read(self.storage.get_object(key)))
        if len(items) != count:
            logger.warning("Ignoring %s: %d entries for %d records", key, len(items), count)
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
