"""A source whose task acknowledges records itself (``commit_record``), as a queue reader does:
it journals each call, so a test can check that every polled record is heard of exactly once.

Records ``0..count-1``, five per poll: the ones listed in ``tombstones`` have no value (a
``Filter`` on ``RecordIsTombstone`` drops them), the ones in ``misfits`` carry a string under an
INT32 schema (the JSON converter refuses them; ``errors.tolerance=all`` skips them), the rest
are ``v<i>`` strings.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from sluice.connectors.api import (
    INT32_SCHEMA,
    STRING_SCHEMA,
    PluginConfig,
    RecordMetadata,
    SourceConnector,
    SourceRecord,
    SourceTask,
    SourceTaskContext,
)
from tests.plugins.scripted import _journal


class AckingSourceConfig(PluginConfig):
    topic: str
    count: int = 15
    tombstones: str = ""  # comma-separated record numbers
    misfits: str = ""
    journal: str


def _numbers(text: str) -> set[int]:
    return {int(n) for n in text.split(",") if n.strip()}


class AckingSourceTask(SourceTask):
    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        self.cfg = AckingSourceConfig.parse(config, ignore={"name"})
        self.next = 0
        self.tombstones, self.misfits = _numbers(self.cfg.tombstones), _numbers(self.cfg.misfits)
        self.stopped = threading.Event()

    def poll(self) -> list[SourceRecord] | None:
        if self.next >= self.cfg.count:
            self.stopped.wait(0.1)
            return None
        records = [self._record(i) for i in range(self.next, min(self.next + 5, self.cfg.count))]
        self.next += len(records)
        return records

    def _record(self, i: int) -> SourceRecord:
        partition, offset = {"acking": "main"}, {"n": i}
        if i in self.tombstones:
            return SourceRecord(self.cfg.topic, None, STRING_SCHEMA, source_partition=partition, source_offset=offset)
        if i in self.misfits:
            return SourceRecord(self.cfg.topic, f"v{i}", INT32_SCHEMA, source_partition=partition, source_offset=offset)
        return SourceRecord(self.cfg.topic, f"v{i}", STRING_SCHEMA, source_partition=partition, source_offset=offset)

    def commit_record(self, record: SourceRecord, metadata: RecordMetadata | None) -> None:
        where = None if metadata is None else [metadata.topic, metadata.partition, metadata.offset]
        _journal(self.cfg.journal, "commit_record", n=record.source_offset["n"], metadata=where)

    def stop(self) -> None:
        self.stopped.set()


class AckingSource(SourceConnector):
    Config = AckingSourceConfig
    task_class = AckingSourceTask

    def start(self, config: Any) -> None:
        self.config = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [self.config.model_dump(by_alias=True)]
