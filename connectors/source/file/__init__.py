"""FileStream source: lines of a file (or standard input) into a topic, like Kafka Connect's."""

from __future__ import annotations

from connectors.source.file.config import FileStreamSourceConfig
from connectors.source.file.connector import FileStreamSourceConnector
from connectors.source.file.task import FileStreamSourceTask

__all__ = ["FileStreamSourceConfig", "FileStreamSourceConnector", "FileStreamSourceTask"]
