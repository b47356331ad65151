"""The S3 source connector: restores what the S3 sink archived, or reads any objects
(``io.confluent.connect.s3.source.S3SourceConnector``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from sluice.connectors.api import ConfigError, Deferred, ExactlyOnceSupport, SourceConnector, SourceTask
from sluice.connectors.s3_common.formats import make_format
from sluice.connectors.s3_common.storage import S3Storage, bucket_problems
from sluice.connectors.source.s3.config import TASK_COUNT_KEY, TASK_INDEX_KEY, TASK_TOPICS_KEY, S3SourceConfig


class S3SourceConnector(SourceConnector):
    """Restore mode splits the topics over the tasks; each task replays whole topics. Generic mode
    runs ``tasks.max`` tasks that share the objects by a hash of their keys.

    A topic is never split, because its partitions' objects are interleaved in the same
    directories (time- and field-based layouts) and one reader keeps them in offset order.
    """

    Config = S3SourceConfig
    task_class = Deferred[SourceTask]("sluice.connectors.source.s3.task:S3SourceTask")
    version = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = (
        "io.confluent.connect.s3.source.S3SourceConnector",
        "S3SourceConnector",
        "S3Source",
    )

    def __init__(self) -> None:
        self._config: S3SourceConfig | None = None

    def exactly_once_support(self, config: Mapping[str, Any]) -> ExactlyOnceSupport:
        """Supported: the objects of a bucket do not change under a restore, and a stored offset names
        the object and record to go on from. Thread: the REST request thread that validates."""
        return ExactlyOnceSupport.SUPPORTED

    @classmethod
    def validate(cls, raw: Mapping[str, Any]) -> Any:
        config = S3SourceConfig.parse(raw)
        make_format(config.format_settings())
        return config

    @classmethod
    def validate_connectivity(cls, config: Any, timeout_s: float) -> dict[str, str]:
        """HeadBucket on ``s3.bucket.name``: the endpoint (``store.url``), credentials and bucket."""
        return bucket_problems(config.connection(), timeout_s)

    def start(self, config: Any) -> None:
        """Keep the validated configuration. Thread: the connector thread."""
        self._config = config if isinstance(config, S3SourceConfig) else self.validate(config)

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        """Topics round-robin over at most ``max_tasks`` tasks. Thread: the connector thread."""
        if self._config is None:
            raise ConfigError("task_configs() called before start()")
        if self._config.mode == "GENERIC":
            # Objects are shared by a stable hash of their keys, so every task lists and filters.
            base = self._config.to_task_config()
            count = max(1, max_tasks)
            return [{**base, TASK_INDEX_KEY: str(i), TASK_COUNT_KEY: str(count)} for i in range(count)]
        topics = self._config.topics or self._discover_topics(self._config)
        if not topics:
            return []
        count = max(1, min(max_tasks, len(topics)))
        base = self._config.to_task_config()
        return [{**base, TASK_TOPICS_KEY: ",".join(topics[i::count])} for i in range(count)]

    @staticmethod
    def _discover_topics(config: S3SourceConfig) -> list[str]:
        layout = config.layout()
        delim = layout.directory_delim
        root = f"{layout.topics_dir}{delim}" if layout.topics_dir else ""
        prefixes = S3Storage(config.connection()).list_prefixes(root, delim)
        return sorted(p[len(root) : -len(delim)] for p in prefixes)
