"""The JSON-lines sink: each record becomes one line ``{"topic", "partition", "offset", "key",
"value"}`` of a file.

Written against the simplest SPI: ``put`` only iterates its argument, so it takes the runtime's
``SinkRecordBatch`` as well as a plain list. A record whose value is not an object with an ``id``
is refused with :class:`UnwritableRecordError` before anything of the batch is written; the worker
then applies ``errors.*`` to it (a dead-letter queue with ``errors.tolerance=all``) and offers the
rest of the batch again.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any

from pydantic import Field

from sluice.connectors.api import (
    ConnectError,
    LocalPath,
    PluginConfig,
    SinkConnector,
    SinkRecord,
    SinkTask,
    SinkTaskContext,
    TopicPartition,
    UnwritableRecordError,
)
from sluice_example_connector.settings import task_settings

log = logging.getLogger(__name__)


class JsonLinesSinkConfig(PluginConfig):
    """Keys of the JSON-lines sink (the runtime reads ``topics`` itself)."""

    file: LocalPath = Field(min_length=1, description="The file to append the records to (created if missing).")


class JsonLinesSinkTask(SinkTask):
    """Appends records to the file; :meth:`flush` fsyncs, so what ``pre_commit`` returns is on disk."""

    version = "0.1.0"

    def __init__(self) -> None:
        self._lock = threading.Lock()  # stop() may come from a control thread during put()
        self._out: IO[str] | None = None

    def start(self, config: Mapping[str, Any], context: SinkTaskContext) -> None:
        """Open the file for appending. Thread: the task thread."""
        self.context = context
        self.settings = task_settings(JsonLinesSinkConfig, config)
        try:
            # Through the worker's grant: the path is checked again as it is opened.
            self._out = context.local_files.open(self.settings.file, "a", key="file", encoding="utf-8")
        except OSError as exc:
            raise ConnectError(f"Cannot open {self.settings.file}: {exc}") from exc

    def put(self, records: Sequence[SinkRecord]) -> None:
        """Write one line per record, or refuse the batch naming its first unusable record.
        Thread: the task thread."""
        lines = []
        for record in records:
            if not isinstance(record.value, dict) or "id" not in record.value:
                raise UnwritableRecordError(f"value is not an object with an 'id': {record.value!r}", record)
            line = {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.kafka_offset,
                "key": record.key,
                "value": record.value,
            }
            lines.append(json.dumps(line, default=str) + "\n")
        with self._lock:
            self._live().writelines(lines)

    def flush(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Make every line written so far durable. Thread: the task thread."""
        with self._lock:
            out = self._live()
            out.flush()
            os.fsync(out.fileno())

    def stop(self) -> None:
        """Close the file. Thread: any; never raises."""
        with self._lock:
            out, self._out = self._out, None
        if out is not None:
            try:
                out.close()
            except OSError:
                log.warning("Closing %s failed", self.settings.file, exc_info=True)

    def _live(self) -> IO[str]:
        if self._out is None:
            raise ConnectError("The JSON-lines sink task is stopped")
        return self._out


class JsonLinesSinkConnector(SinkConnector):
    """``tasks.max`` tasks appending to the same file (whole batches interleave)."""

    Config = JsonLinesSinkConfig
    task_class = JsonLinesSinkTask
    version = "0.1.0"

    def start(self, config: Any) -> None:
        """Keep the validated configuration (a :class:`JsonLinesSinkConfig`)."""
        self.settings = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [self.settings.model_dump(by_alias=True) for _ in range(max_tasks)]
