"""S3 source: replays what the S3 sink archived into the original topic partitions."""

from __future__ import annotations

from sluice.connectors.source.s3.config import S3SourceConfig
from sluice.connectors.source.s3.connector import S3SourceConnector
from sluice.connectors.source.s3.task import S3SourceTask

__all__ = ["S3SourceConfig", "S3SourceConnector", "S3SourceTask"]
