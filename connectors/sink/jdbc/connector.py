"""The JDBC sink connector (Confluent's ``io.confluent.connect.jdbc.JdbcSinkConnector``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from sluice.connectors.api import ConfigError, Deferred, SinkConnector, SinkTask
from sluice.connectors.jdbc_common.config import JDBC_SINK_UNIMPLEMENTED_KEYS
from sluice.connectors.jdbc_common.connection import connectivity_problems, to_sqlalchemy_url
from sluice.connectors.sink.jdbc.config import JdbcSinkConfig


class JdbcSinkConnector(SinkConnector):
    """Writes topics into database tables; ``tasks.max`` identical tasks share the partitions."""

    Config = JdbcSinkConfig
    task_class = Deferred[SinkTask]("sluice.connectors.sink.jdbc.task:JdbcSinkTask")
    version = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = (
        "io.confluent.connect.jdbc.JdbcSinkConnector",
        "JdbcSinkConnector",
        "JdbcSink",
    )
    unimplemented_keys = JDBC_SINK_UNIMPLEMENTED_KEYS

    def __init__(self) -> None:
        self._config: JdbcSinkConfig | None = None

    @classmethod
    def validate(cls, raw: Mapping[str, Any]) -> Any:
        """Check the keys, and that ``connection.url`` names a database Sluice can reach."""
        config: JdbcSinkConfig = super().validate(raw)
        to_sqlalchemy_url(config.connection_url, config.connection_user, config.password)
        return config

    @classmethod
    def validate_connectivity(cls, config: Any, timeout_s: float) -> dict[str, str]:
        """Open one connection: ``connection.url`` when the database cannot be reached,
        ``connection.user``/``connection.password`` when it refuses the credentials."""
        url = to_sqlalchemy_url(config.connection_url, config.connection_user, config.password)
        return connectivity_problems(url, timeout_s)

    def start(self, config: Any) -> None:
        """Keep the validated configuration. Thread: the connector thread."""
        self._config = config if isinstance(config, JdbcSinkConfig) else JdbcSinkConfig.parse(config)

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        """``max_tasks`` copies of the configuration. Thread: the connector thread."""
        if self._config is None:
            raise ConfigError("task_configs() called before start()")
        return [self._config.to_task_config() for _ in range(max_tasks)]

    def alter_offsets(self, config: Mapping[str, Any], offsets: Mapping[Any, Any]) -> bool:
        """Any consumer offsets may be set: the tables hold no offsets of their own."""
        return True
