"""The FileStream sink connector: records' values appended to a file (Kafka Connect's ``FileStreamSinkConnector``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from sluice.connectors.api import ConfigError, SinkConnector
from sluice.connectors.sink.file.config import FileStreamSinkConfig
from sluice.connectors.sink.file.task import FileStreamSinkTask


class FileStreamSinkConnector(SinkConnector):
    """Appends the value of every consumed record, one per line, to a file or standard output.

    Returns ``tasks.max`` identical task configurations, as Connect does; several tasks appending
    to the same file interleave whole batches. A demo and test fixture, like Connect's.
    """

    Config = FileStreamSinkConfig
    task_class = FileStreamSinkTask
    version = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = (
        "org.apache.kafka.connect.file.FileStreamSinkConnector",
        "FileStreamSinkConnector",
        "FileStreamSink",
    )

    def __init__(self) -> None:
        self._config: FileStreamSinkConfig | None = None

    def start(self, config: Any) -> None:
        """Keep the validated configuration. Thread: the connector thread."""
        self._config = config if isinstance(config, FileStreamSinkConfig) else FileStreamSinkConfig.parse(config)

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        """``max_tasks`` copies of the configuration. Thread: the connector thread."""
        if self._config is None:
            raise ConfigError("task_configs() called before start()")
        return [self._config.to_task_config() for _ in range(max_tasks)]

    def alter_offsets(self, config: Mapping[str, Any], offsets: Mapping[Any, Any]) -> bool:
        """Any consumer offsets may be set: the sink keeps no state of its own (as in Connect)."""
        return True
