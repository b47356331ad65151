"""Generic mode of the S3 source: any objects → records, mapped to topics by key patterns.

``topic.regex.list`` is a comma-separated list of ``<topic>:<regex>`` pairs; an object whose key
(under ``topics.dir``, empty for the whole bucket) fully matches a regex goes to that topic, the
first matching pair winning. Each object is read with ``format.class`` (JSON lines, Parquet rows,
Avro records or byte lines) and every value becomes one schemaless record.

Offsets: one source partition per object, ``{"bucket", "object"}``; the offset
``{"position": n, "complete": bool}`` says how many of its records were delivered. A restart skips
complete objects without reading them and the first ``position`` records of a partly read one.
Objects are shared between tasks by a stable hash of their key.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sluice.connectors.api import ConfigError, OffsetReader, SourceRecord
from sluice.connectors.s3_common.formats import RecordFormat
from sluice.connectors.s3_common.storage import ObjectStorage


def parse_topic_regex_list(entries: list[str], key: str = "topic.regex.list") -> list[tuple[str, re.Pattern[str]]]:
    """``["orders:.*\\.json", ...]`` → ``[("orders", re.compile(...)), ...]``; a :class:`ConfigError` names the bad entry."""
    pairs = []
    for entry in entries:
        topic, sep, pattern = entry.partition(":")
        if not sep or not topic.strip() or not pattern.strip():
            raise ConfigError(f"Invalid entry {entry!r} in {key}: expected <topic>:<regex>", key=key)
        try:
            pairs.append((topic.strip(), re.compile(pattern.strip())))
        except re.error as exc:
            raise ConfigError(f"Invalid regex {pattern.strip()!r} for topic {topic.strip()!r} in {key}: {exc}", key=key) from None
    return pairs


def owner(key: str, task_count: int) -> int:
    """The task that reads object ``key`` (stable across restarts and processes)."""
    return zlib.crc32(key.encode("utf-8")) % max(1, task_count)


@dataclass
class GenericScan:
    """Finds this task's unread objects and turns one object into records."""

    bucket: str
    prefix: str
    topics: list[tuple[str, re.Pattern[str]]]
    fmt: RecordFormat
    task_index: int = 0
    task_count: int = 1

    def __post_init__(self) -> None:
        self._seen: set[str] = set()

    def topic_for(self, key: str) -> str | None:
        relative = key[len(self.prefix) :]
        for topic, pattern in self.topics:
            if pattern.fullmatch(relative):
                return topic
        return None

    def source_partition(self, key: str) -> dict[str, Any]:
        return {"bucket": self.bucket, "object": key}

    def discover(self, storage: ObjectStorage, reader: OffsetReader | None) -> list[tuple[str, str, int]]:
        """New objects of this task as ``(key, topic, records already delivered)``, in key order."""
        found = []
        for key in storage.list_keys(self.prefix):
            if key in self._seen or key.endswith("/"):
                continue
            self._seen.add(key)
            topic = self.topic_for(key)
            if topic is None or owner(key, self.task_count) != self.task_index:
                continue
            stored = reader.offset(self.source_partition(key)) if reader is not None else None
            if stored and stored.get("complete"):
                continue
            found.append((key, topic, int(stored.get("position", 0)) if stored else 0))
        return found

    def records(self, storage: ObjectStorage, key: str, topic: str, skip: int) -> Iterator[SourceRecord]:
        """The object's records after the first ``skip``, each carrying its position."""
        values = list(self.fmt.read(storage.get_object(key)))
        n = len(values)
        partition = self.source_partition(key)
        for i in range(skip, n):
            value = values[i]
            values[i] = None  # released as it goes
            yield SourceRecord(
                topic=topic,
                value=value,
                source_partition=partition,
                source_offset={"position": i + 1, "complete": i + 1 == n},
            )
