"""S3 sink: topics archived to S3-compatible object storage with an exactly-once object layout."""

from __future__ import annotations

from sluice.connectors.sink.s3.config import S3SinkConfig
from sluice.connectors.sink.s3.connector import S3SinkConnector
from sluice.connectors.sink.s3.task import S3SinkTask

__all__ = ["S3SinkConfig", "S3SinkConnector", "S3SinkTask"]
