"""The inbox source: each JSON line appended to a file becomes one record.

Written against the simplest SPI: ``poll`` returns a ``list`` of :class:`SourceRecord`. Each
record's source partition is ``{"inbox": <file>}`` and its offset ``{"position": <byte after the
line>}``; on a restart :meth:`InboxSourceTask.start` reads the stored offset and goes on after the
last line Kafka acknowledged.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from sluice.connectors.api import (
    ConnectError,
    LocalPath,
    PluginConfig,
    SourceConnector,
    SourceRecord,
    SourceTask,
    SourceTaskContext,
)
from sluice_example_connector.settings import task_settings

log = logging.getLogger(__name__)


class InboxSourceConfig(PluginConfig):
    """Keys of the inbox source."""

    file: LocalPath = Field(
        description="The inbox: a file of JSON lines, read from the start and followed as it grows."
    )
    topic: str = Field(min_length=1, description="The topic to write the records to.")
    batch_size: int = Field(100, ge=1, description="The most records one poll returns.")
    poll_interval_ms: int = Field(200, ge=10, le=1000, description="How long a poll waits for new lines.")


class InboxSourceTask(SourceTask):
    """Follows one inbox file. ``poll`` runs on the task thread; ``stop`` on a control thread."""

    version = "0.1.0"

    def __init__(self) -> None:
        self._stopped = threading.Event()

    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        """Parse the configuration and find where to go on from. Thread: the task thread."""
        self.context = context
        self.settings = task_settings(InboxSourceConfig, config)
        self.partition = {"inbox": self.settings.file}
        stored = context.offset_reader.offset(self.partition)
        self.position = int(stored["position"]) if stored else 0
        log.info("Following %s from byte %d", self.settings.file, self.position)

    def poll(self) -> list[SourceRecord]:
        """The complete lines added since the last poll, after a short wait if there are none.

        Thread: the task thread; returns within ``poll.interval.ms`` of ``stop()``.
        """
        records = self._read_lines()
        if not records:
            self._stopped.wait(self.settings.poll_interval_ms / 1000)
        return records

    def _read_lines(self) -> list[SourceRecord]:
        try:
            # Through the worker's grant: the path is checked again at every open.
            with self.context.local_files.open(self.settings.file, "rb", key="file") as inbox:
                inbox.seek(self.position)
                lines = inbox.readlines()
        except FileNotFoundError:
            return []  # not created yet
        except OSError as exc:
            raise ConnectError(f"Cannot read {self.settings.file}: {exc}") from exc
        records = []
        for line in lines[: self.settings.batch_size]:
            if not line.endswith(b"\n"):
                break  # the writer is still writing this line
            self.position += len(line)
            records.append(self._record(line.decode("utf-8", "replace").rstrip("\r\n")))
        return records

    def _record(self, text: str) -> SourceRecord:
        # A line that is not JSON travels as a string: deciding what to do with it is the sink's job.
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        key = str(value["id"]) if isinstance(value, dict) and "id" in value else None
        return SourceRecord(
            self.settings.topic,
            value,
            key=key,
            source_partition=self.partition,
            source_offset={"position": self.position},
        )

    def stop(self) -> None:
        """Make a waiting poll return. Thread: a control thread."""
        self._stopped.set()


class InboxSourceConnector(SourceConnector):
    """One task per inbox file (there is one)."""

    Config = InboxSourceConfig
    task_class = InboxSourceTask
    version = "0.1.0"

    def start(self, config: Any) -> None:
        """Keep the validated configuration (an :class:`InboxSourceConfig`)."""
        self.settings = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [self.settings.model_dump(by_alias=True)]
