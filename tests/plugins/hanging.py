"""A source whose tasks can be made to hang, and which say which process runs them.

``HangingSource`` tasks count upwards (record ``n`` with offset ``{"n": n}`` per ``interval.ms``,
resuming from the stored offset) and append ``"<task> <pid>"`` to ``pid.file`` when they start.
Once the file ``hang.flag`` exists, ``poll()`` blocks for good and ignores ``stop()``: the task a
driver stuck in C code would be, which only a process executor can end.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from sluice.connectors.api import (
    STRING_SCHEMA,
    PluginConfig,
    SourceConnector,
    SourceRecord,
    SourceTask,
    SourceTaskContext,
)


class HangingSourceConfig(PluginConfig):
    """Keys of :class:`HangingSource`."""

    topic: str = Field(description="Topic to write to")
    pid_file: str = Field(description="Gets a line '<task> <pid>' each time a task starts")
    hang_flag: str = Field(description="Once this file exists, poll() never returns")
    interval_ms: int = Field(50, ge=1, description="Pause between records")


class HangingSourceTask(SourceTask):
    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        self.task = int(config["task.id"])
        self.cfg = HangingSourceConfig.parse({k: v for k, v in config.items() if k != "task.id"}, ignore={"name"})
        self.partition = {"task": self.task}
        stored = context.offset_reader.offset(self.partition)
        self.next = stored["n"] + 1 if stored else 0
        self.stopped = threading.Event()
        with open(self.cfg.pid_file, "a") as f:
            f.write(f"{self.task} {os.getpid()}\n")

    def poll(self) -> list[SourceRecord] | None:
        while os.path.exists(self.cfg.hang_flag):
            time.sleep(0.05)  # deaf to stop(): only killing the process ends this
        if self.stopped.wait(self.cfg.interval_ms / 1000):
            return None
        record = SourceRecord(
            self.cfg.topic, f"{self.task}:{self.next}", STRING_SCHEMA,
            source_partition=self.partition, source_offset={"n": self.next},
        )
        self.next += 1
        return [record]

    def stop(self) -> None:
        self.stopped.set()


class HangingSource(SourceConnector):
    """``tasks.max`` counting tasks."""

    Config = HangingSourceConfig
    task_class = HangingSourceTask

    def start(self, config: Any) -> None:
        self.config = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        base = {k: str(v) for k, v in self.config.model_dump(by_alias=True).items()}
        return [{**base, "task.id": str(i)} for i in range(max_tasks)]
