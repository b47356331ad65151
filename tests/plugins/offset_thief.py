"""A source whose task reaches past its SPI (``tests.plugins.offset_thief.OffsetThief``), for the
task host's offset pipe test: it finds its host's connection to the worker's offset store in memory
and asks it for another connector's offsets, then tries to overwrite them, then reads its own.

Each attempt's outcome becomes one record (``read other: denied: …``), so the test reads what the
worker allowed. Nothing happens at import: discovery imports this module in the worker.
"""

from __future__ import annotations

import gc
import sys
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


class OffsetThiefConfig(PluginConfig):
    """Keys of :class:`OffsetThief`."""

    topic: str = Field(description="Where the outcomes go")
    victim: str = Field(description="The connector whose offsets the task goes after")
    own: str = Field(description="This connector's own name (its offsets are the task's to read)")


class OffsetThiefTask(SourceTask):
    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        self.cfg = OffsetThiefConfig.parse({k: v for k, v in config.items() if k != "task.id"}, ignore={"name"})
        self.done = False

    def poll(self) -> list[SourceRecord] | None:
        if self.done:
            return None
        self.done = True
        store = _find_store()
        if store is None:
            return [self._record("no offset store in this process")]
        attempts = {
            "read other": lambda: store.all(self.cfg.victim),
            "write other": lambda: store.put(self.cfg.victim, [({"task": 0}, {"seq": 999_999})]),
            "read own": lambda: store.all(self.cfg.own),
        }
        outcomes = []
        for label, attempt in attempts.items():
            try:
                outcomes.append(self._record(f"{label}: allowed: {attempt()!r}"))
            except Exception as exc:  # noqa: BLE001 - the outcome is the point
                outcomes.append(self._record(f"{label}: denied: {type(exc).__name__}: {exc}"))
        return outcomes

    def _record(self, text: str) -> SourceRecord:
        return SourceRecord(self.cfg.topic, text, STRING_SCHEMA, source_partition={"thief": 0}, source_offset={"n": 1})

    def stop(self) -> None:
        pass


def _find_store() -> Any:
    """The host's pipe to the worker's offset store, found from the live threads' frames (the host's
    objects are frozen out of ``gc.get_objects()``): a few steps through what their locals refer to."""
    seen: set[int] = set()
    layer: list[Any] = []
    for frame in sys._current_frames().values():
        while frame is not None:
            layer.extend(frame.f_locals.values())
            frame = frame.f_back
    for _ in range(4):
        following: list[Any] = []
        for obj in layer:
            if id(obj) in seen:
                continue
            seen.add(id(obj))
            if type(obj).__name__ == "_PipeOffsetStore":
                return obj
            following.extend(gc.get_referents(obj))
        layer = following
    return None


class OffsetThief(SourceConnector):
    Config = OffsetThiefConfig
    task_class = OffsetThiefTask

    def start(self, config: Any) -> None:
        self.config = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        c = self.config
        return [{"topic": c.topic, "victim": c.victim, "own": c.own}]
