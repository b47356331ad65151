"""FileStream sink: record values appended to a file (or standard output), like Kafka Connect's."""

from __future__ import annotations

from connectors.sink.file.config import FileStreamSinkConfig
from connectors.sink.file.connector import FileStreamSinkConnector
from connectors.sink.file.task import FileStreamSinkTask

__all__ = ["FileStreamSinkConfig", "FileStreamSinkConnector", "FileStreamSinkTask"]
