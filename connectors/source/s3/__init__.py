"""S3 source: replays what the S3 sink archived into the original topic partitions."""

from __future__ import annotations

from connectors.source.s3.config import S3SourceConfig
from connectors.source.s3.connector import S3SourceConnector
from connectors.source.s3.task import S3SourceTask

__all__ = ["S3SourceConfig", "S3SourceConnector", "S3SourceTask"]
