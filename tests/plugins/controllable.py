"""A source connector whose task fails on demand, for tests of FAILED states, restarts and secrets.

``ControllableSource`` emits one record ``n`` per ``interval.ms`` with offset ``{"n": n}``. While
the file named by ``fail.flag`` exists, ``poll()`` raises an error that quotes the connector's
``password``, so tests can check that status traces never show it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

from pydantic import Field, SecretStr

from sluice.connectors.api import (
    STRING_SCHEMA,
    PluginConfig,
    SourceConnector,
    SourceRecord,
    SourceTask,
    SourceTaskContext,
)

PARTITION = {"controllable": "main"}


class ControllableSourceConfig(PluginConfig):
    """Keys of :class:`ControllableSource`."""

    topic: str = Field(description="Topic to write to")
    fail_flag: str = Field(description="While this file exists, poll() raises")
    password: SecretStr | None = Field(None, description="A secret the failure message quotes")
    interval_ms: int = Field(100, ge=1, description="Pause between records")


class ControllableSourceTask(SourceTask):
    """Counts upwards from the stored offset; raises while the flag file exists."""

    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        self.cfg = ControllableSourceConfig.parse(config, ignore={"name"})
        stored = context.offset_reader.offset(PARTITION)
        self.next = stored["n"] + 1 if stored else 0
        self.stopped = threading.Event()

    def poll(self) -> list[SourceRecord] | None:
        if os.path.exists(self.cfg.fail_flag):
            secret = self.cfg.password.get_secret_value() if self.cfg.password else ""
            raise RuntimeError(f"poll failed: {self.cfg.fail_flag} exists (logged in with password {secret})")
        if self.stopped.wait(self.cfg.interval_ms / 1000):
            return None
        record = SourceRecord(self.cfg.topic, str(self.next), STRING_SCHEMA, source_partition=PARTITION,
                              source_offset={"n": self.next})
        self.next += 1
        return [record]

    def stop(self) -> None:
        self.stopped.set()


class ControllableSource(SourceConnector):
    """One :class:`ControllableSourceTask`."""

    Config = ControllableSourceConfig
    task_class = ControllableSourceTask

    def start(self, config: Any) -> None:
        self.config = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        task = self.config.model_dump(by_alias=True, exclude_none=True)
        if self.config.password is not None:
            task["password"] = self.config.password.get_secret_value()
        return [task]
