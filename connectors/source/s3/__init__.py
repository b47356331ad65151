"""S3 source: replays what the S3 sink archived into the original topic partitions."""

from __future__ import annotations

# The task is in ``task`` and is not re-exported: the worker imports this package to list and
# validate the connector, and the task's drivers load only where tasks run (``Deferred``).
from sluice.connectors.source.s3.config import S3SourceConfig
from sluice.connectors.source.s3.connector import S3SourceConnector

__all__ = ["S3SourceConfig", "S3SourceConnector"]
