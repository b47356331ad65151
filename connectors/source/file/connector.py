"""The FileStream source connector: one task that tails one file (Kafka Connect's ``FileStreamSourceConnector``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar

from sluice.connectors.api import ConfigError, ExactlyOnceSupport, SourceConnector, offset_pairs
from sluice.connectors.source.file.config import FileStreamSourceConfig
from sluice.connectors.source.file.task import FILENAME_FIELD, POSITION_FIELD, FileStreamSourceTask

log = logging.getLogger(__name__)


class FileStreamSourceConnector(SourceConnector):
    """Streams the lines of a file (or standard input) into one topic.

    Always runs exactly one task whatever ``tasks.max`` says: a single file has a single read
    position. A demo and test fixture, like Connect's: no rotation, truncation or glob support.
    """

    Config = FileStreamSourceConfig
    task_class = FileStreamSourceTask
    version = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = (
        "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "FileStreamSourceConnector",
        "FileStreamSource",
    )

    def __init__(self) -> None:
        self._config: FileStreamSourceConfig | None = None

    def start(self, config: Any) -> None:
        """Keep the validated configuration. Thread: the connector thread."""
        self._config = config if isinstance(config, FileStreamSourceConfig) else FileStreamSourceConfig.parse(config)

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        """One task configuration, whatever ``max_tasks`` is. Thread: the connector thread."""
        if self._config is None:
            raise ConfigError("task_configs() called before start()")
        return [self._config.to_task_config()]

    def exactly_once_support(self, config: Mapping[str, Any]) -> ExactlyOnceSupport:
        """Supported for a file, whose stored position it reads on from; not for standard input
        (``file`` empty), which cannot be read again after a crash, as Connect's connector says.
        Thread: the REST request thread that validates."""
        filename = config.get("file")
        return ExactlyOnceSupport.SUPPORTED if filename and str(filename).strip() else ExactlyOnceSupport.UNSUPPORTED

    def alter_offsets(self, config: Mapping[str, Any], offsets: Mapping[Any, Any]) -> bool:
        """Accept only ``{"filename": ...}`` → ``{"position": <int ≥ 0>}`` (or ``None`` to reset).

        Standard input cannot be repositioned, so offsets cannot be altered when ``file`` is empty.
        Thread: the connector thread, while the connector is stopped.
        """
        if not (config.get("file") or ""):
            raise ConfigError(
                "Offsets cannot be modified if the 'file' configuration is unspecified, "
                "because standard input is read and it cannot be repositioned",
                key="file",
            )
        for partition, offset in offset_pairs(offsets):
            if not isinstance(partition, Mapping) or FILENAME_FIELD not in partition:
                raise ConfigError(f"Partition {partition!r} must be an object with the key '{FILENAME_FIELD}'")
            if offset is None:
                continue
            if not isinstance(offset, Mapping) or POSITION_FIELD not in offset:
                raise ConfigError(
                    f"Offset {offset!r} of partition {dict(partition)!r} must be an object with the key '{POSITION_FIELD}'"
                )
            position = offset[POSITION_FIELD]
            if isinstance(position, bool) or not isinstance(position, int) or position < 0:
                raise ConfigError(
                    f"Offset '{POSITION_FIELD}' of partition {dict(partition)!r} must be a non-negative integer, "
                    f"got {position!r}"
                )
        return True

