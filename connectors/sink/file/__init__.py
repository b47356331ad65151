"""FileStream sink: record values appended to a file (or standard output), like Kafka Connect's."""

from __future__ import annotations

from sluice.connectors.sink.file.config import FileStreamSinkConfig
from sluice.connectors.sink.file.connector import FileStreamSinkConnector
from sluice.connectors.sink.file.task import FileStreamSinkTask

__all__ = ["FileStreamSinkConfig", "FileStreamSinkConnector", "FileStreamSinkTask"]
