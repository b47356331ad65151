"""S3 sink: topics archived to S3-compatible object storage with an exactly-once object layout."""

from __future__ import annotations

# The task is in ``task`` and is not re-exported: the worker imports this package to list and
# validate the connector, and the task's drivers load only where tasks run (``Deferred``).
from sluice.connectors.sink.s3.config import S3SinkConfig
from sluice.connectors.sink.s3.connector import S3SinkConnector

__all__ = ["S3SinkConfig", "S3SinkConnector"]
