"""The sequence source: each task counts upward from 0 and writes one record per number.

What Kafka Connect users reach for the Datagen connector for, without the randomness: task ``t``
writes records keyed ``"<t>-<n>"`` with the struct value ``{"task": t, "seq": n, "payload": …}``
for ``n = 0, 1, …`` up to ``sequence.count`` (or forever), at up to ``sequence.rate`` records/s.
Because every record is predictable, a consumer can prove that nothing was lost or reordered
across restarts, rebalances and failovers: the offset of task ``t``'s partition
``{"task": t}`` is ``{"seq": n}`` of the last record delivered, and a task that moves to another
worker continues from there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic import Field

from sluice.connectors.api import (
    INT32_SCHEMA,
    INT64_SCHEMA,
    STRING_SCHEMA,
    ExactlyOnceSupport,
    PluginConfig,
    Schema,
    SourceConnector,
    SourceRecordBatch,
    SourceTask,
    SourceTaskContext,
)

VALUE_SCHEMA = Schema.struct(
    [("task", INT32_SCHEMA), ("seq", INT64_SCHEMA), ("payload", STRING_SCHEMA)], name="sluice.sequence.Value"
)


class SequenceSourceConfig(PluginConfig):
    """Keys of the sequence source."""

    topic: str = Field(description="Topic to write to")
    sequence_count: int = Field(0, ge=0, description="Records per task; 0 counts forever")
    sequence_rate: float = Field(0, ge=0, description="Records per second per task; 0 is as fast as possible")
    sequence_batch_size: int = Field(1000, ge=1, le=100_000, description="Records per poll")
    payload_bytes: int = Field(0, ge=0, le=1_000_000, description="Size of the filler 'payload' field")


class SequenceSourceTask(SourceTask):
    """Counts from the stored offset + 1 (or 0)."""

    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        self.cfg = SequenceSourceConfig.parse(config, ignore={"name", "task.id"})
        self.task = int(config.get("task.id", 0))
        self.partition = {"task": self.task}
        stored = context.offset_reader.offset(self.partition)
        self.next = int(stored["seq"]) + 1 if stored else 0
        self.payload = "x" * self.cfg.payload_bytes
        self.stopped = threading.Event()
        self.started_at = time.monotonic()
        self.emitted = 0

    def poll(self) -> SourceRecordBatch | None:
        cfg = self.cfg
        size = cfg.sequence_batch_size
        if cfg.sequence_count:
            size = min(size, cfg.sequence_count - self.next)
            if size <= 0:
                self.stopped.wait(0.5)  # done: idle until stopped
                return None
        if cfg.sequence_rate:
            # Pace against the start: a slow poll catches up instead of losing throughput.
            due = self.started_at + (self.emitted + size) / cfg.sequence_rate
            if self.stopped.wait(max(0.0, due - time.monotonic())):
                return None
        first, task, payload = self.next, self.task, self.payload
        numbers = range(first, first + size)
        values = [{"task": task, "seq": n, "payload": payload} for n in numbers]
        keys = [f"{task}-{n}" for n in numbers]
        partition = self.partition
        self.next += size
        self.emitted += size
        return SourceRecordBatch(
            cfg.topic,
            values,
            value_schema=VALUE_SCHEMA,
            keys=keys,
            key_schema=STRING_SCHEMA,
            source_partition=partition,
            offsets_loader=lambda: [{"seq": n} for n in numbers],
            last_offset={"seq": first + size - 1},
        )

    def stop(self) -> None:
        self.stopped.set()


class SequenceSourceConnector(SourceConnector):
    """``tasks.max`` counting tasks."""

    Config = SequenceSourceConfig
    task_class = SequenceSourceTask
    version = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = ("SequenceSource", "SequenceSourceConnector")

    def exactly_once_support(self, config: Mapping[str, Any]) -> ExactlyOnceSupport:
        """Supported: a task counts on from its stored offset. Thread: the REST request thread that validates."""
        return ExactlyOnceSupport.SUPPORTED

    def start(self, config: Any) -> None:
        self.config = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        base = self.config.model_dump(by_alias=True, exclude_none=True)
        return [{**{k: str(v) for k, v in base.items()}, "task.id": str(i)} for i in range(max_tasks)]
