"""Connectors used only by tests, named by their Python path (``tests.plugins.scripted.ScriptedSource``).

They record what the runtime asked of them in a JSON-lines journal file, so a test running the
worker in another process can check the order of calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from sluice.connectors.api import (
    STRING_SCHEMA,
    PluginConfig,
    SinkConnector,
    SinkRecord,
    SinkTask,
    SinkTaskContext,
    SourceConnector,
    SourceRecord,
    SourceTask,
    SourceTaskContext,
    TopicPartition,
)


def _journal(path: str, event: str, **fields: Any) -> None:
    with open(path, "ab") as f:
        f.write(orjson.dumps({"event": event, "t": time.time(), **fields}) + b"\n")


class ScriptedSourceConfig(PluginConfig):
    topic: str
    count: int = 10
    journal: str


class ScriptedSourceTask(SourceTask):
    """Emits ``count`` records ``0..count-1`` once, each with offset ``{"n": i}``."""

    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        self.cfg = ScriptedSourceConfig.parse(config, ignore={"name"})
        stored = context.offset_reader.offset({"scripted": "main"})
        self.next = stored["n"] + 1 if stored else 0
        self.stopped = threading.Event()
        _journal(self.cfg.journal, "start", stored=stored)

    def poll(self) -> list[SourceRecord] | None:
        if self.next >= self.cfg.count:
            self.stopped.wait(0.1)
            return None
        records = [
            SourceRecord(self.cfg.topic, f"v{i}", STRING_SCHEMA, source_partition={"scripted": "main"}, source_offset={"n": i})
            for i in range(self.next, self.cfg.count)
        ]
        self.next = self.cfg.count
        _journal(self.cfg.journal, "poll", count=len(records))
        return records

    def commit(self) -> None:
        _journal(self.cfg.journal, "commit")

    def stop(self) -> None:
        self.stopped.set()


class ScriptedSource(SourceConnector):
    Config = ScriptedSourceConfig
    task_class = ScriptedSourceTask

    def start(self, config: Any) -> None:
        self.config = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [self.config.model_dump(by_alias=True)]


class ScriptedSinkConfig(PluginConfig):
    topics: str
    journal: str
    durable_lag: int = 0


class ScriptedSinkTask(SinkTask):
    """Writes nothing; ``pre_commit`` claims durability ``durable.lag`` records behind what it got."""

    def start(self, config: Mapping[str, Any], context: SinkTaskContext) -> None:
        self.cfg = ScriptedSinkConfig.parse(config, ignore={"name"})
        self.context = context

    def put(self, records: Sequence[SinkRecord]) -> None:
        _journal(self.cfg.journal, "put", offsets=[r.kafka_offset for r in records])

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]:
        safe = {tp: max(0, o - self.cfg.durable_lag) for tp, o in offsets.items()}
        _journal(self.cfg.journal, "pre_commit", offered={f"{t.topic}-{t.partition}": o for t, o in offsets.items()},
                 returned={f"{t.topic}-{t.partition}": o for t, o in safe.items()})
        return safe

    def stop(self) -> None:
        _journal(self.cfg.journal, "stop")


class ScriptedSink(SinkConnector):
    Config = ScriptedSinkConfig
    task_class = ScriptedSinkTask

    def start(self, config: Any) -> None:
        self.config = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [self.config.model_dump(by_alias=True) for _ in range(max_tasks)]
