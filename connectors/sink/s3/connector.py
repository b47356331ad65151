"""The S3 sink connector (Confluent's ``io.confluent.connect.s3.S3SinkConnector``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from sluice.connectors.api import ConfigError, Deferred, SinkConnector, SinkTask
from sluice.connectors.s3_common.formats import make_format
from sluice.connectors.s3_common.partitioners import make_partitioner
from sluice.connectors.s3_common.storage import bucket_problems
from sluice.connectors.sink.s3.config import S3_SINK_UNIMPLEMENTED_KEYS, S3SinkConfig


class S3SinkConnector(SinkConnector):
    """Archives topics to an S3 bucket; see :mod:`sluice.connectors.sink.s3.task` for the guarantees.

    Every task gets the same configuration; Kafka's consumer group spreads the partitions over
    them, and each partition's objects are written by the one task that owns it.
    """

    Config = S3SinkConfig
    task_class = Deferred[SinkTask]("sluice.connectors.sink.s3.task:S3SinkTask")
    version = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = ("io.confluent.connect.s3.S3SinkConnector", "S3SinkConnector", "S3Sink")
    unimplemented_keys = S3_SINK_UNIMPLEMENTED_KEYS

    def __init__(self) -> None:
        self._config: S3SinkConfig | None = None

    @classmethod
    def validate(cls, raw: Mapping[str, Any]) -> Any:
        """Check the keys, then build the format and partitioner so a bad combination fails now."""
        config = S3SinkConfig.parse(raw)
        make_format(config.format_settings())
        make_partitioner(config.partitioner_settings())
        return config

    @classmethod
    def validate_connectivity(cls, config: Any, timeout_s: float) -> dict[str, str]:
        """HeadBucket on ``s3.bucket.name``: the endpoint (``store.url``), credentials and bucket."""
        return bucket_problems(config.connection(), timeout_s)

    def start(self, config: Any) -> None:
        """Keep the validated configuration. Thread: the connector thread."""
        self._config = config if isinstance(config, S3SinkConfig) else self.validate(config)

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        """``max_tasks`` identical configurations. Thread: the connector thread."""
        if self._config is None:
            raise ConfigError("task_configs() called before start()")
        return [self._config.to_task_config() for _ in range(max_tasks)]

    def alter_offsets(self, config: Mapping[str, Any], offsets: Mapping[Any, Any]) -> bool:
        """Consumer offsets may be reset: objects are named by offset, so a rewind rewrites them."""
        return True
