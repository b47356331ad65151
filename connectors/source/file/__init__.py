"""FileStream source: lines of a file (or standard input) into a topic, like Kafka Connect's."""

from __future__ import annotations

from sluice.connectors.source.file.config import FileStreamSourceConfig
from sluice.connectors.source.file.connector import FileStreamSourceConnector
from sluice.connectors.source.file.task import FileStreamSourceTask

__all__ = ["FileStreamSourceConfig", "FileStreamSourceConnector", "FileStreamSourceTask"]
