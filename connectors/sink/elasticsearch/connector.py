"""The Elasticsearch sink connector (Confluent's ``io.confluent.connect.elasticsearch.ElasticsearchSinkConnector``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from sluice.connectors.api import ConfigError, Deferred, SinkConnector, SinkTask
from sluice.connectors.api.connectivity import ConnectFailure, FailureKind, connectivity_message, http_status_failure
from sluice.connectors.sink.elasticsearch.client import (
    SERVICE,
    FatalHttpError,
    SearchClient,
    TransientHttpError,
    node_address,
    ssl_context,
)
from sluice.connectors.sink.elasticsearch.config import ELASTICSEARCH_UNIMPLEMENTED_KEYS, ElasticsearchSinkConfig


class ElasticsearchSinkConnector(SinkConnector):
    """Indexes topics into Elasticsearch or OpenSearch; ``tasks.max`` identical tasks share the partitions."""

    Config = ElasticsearchSinkConfig
    task_class = Deferred[SinkTask]("sluice.connectors.sink.elasticsearch.task:ElasticsearchSinkTask")
    version = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = (
        "io.confluent.connect.elasticsearch.ElasticsearchSinkConnector",
        "ElasticsearchSinkConnector",
        "ElasticsearchSink",
    )
    unimplemented_keys = ELASTICSEARCH_UNIMPLEMENTED_KEYS

    def __init__(self) -> None:
        self._config: ElasticsearchSinkConfig | None = None

    @classmethod
    def validate(cls, raw: Mapping[str, Any]) -> Any:
        """Check the keys, and that the TLS files named by ``elastic.https.*`` can be loaded."""
        config: ElasticsearchSinkConfig = super().validate(raw)
        ssl_context(config)
        return config

    @classmethod
    def validate_connectivity(cls, config: Any, timeout_s: float) -> dict[str, str]:
        """``GET /`` on every node of ``connection.url``: an unreachable node, or a port that
        answers but not as a search cluster does, is ``connection.url``'s problem, refused
        credentials ``connection.password``'s. Each message is a fixed category (:mod:`~sluice.
        connectors.api.connectivity`) and the node's host and port: nothing the node answered."""
        millis = int(timeout_s * 1000 / max(1, len(config.connection_url)))
        connect_ms = min(millis, config.connection_timeout_ms)
        quick = config.model_copy(
            update={"connection_timeout_ms": connect_ms, "read_timeout_ms": min(millis, config.read_timeout_ms)}
        )
        client = SearchClient(quick)
        try:
            for url in config.connection_url:  # the client takes the nodes in turn
                failure = _node_failure(client)
                if failure is not None:
                    auth = failure.kind is FailureKind.AUTHENTICATION and config.connection_username
                    key = "connection.password" if auth else "connection.url"
                    return {key: connectivity_message(key, node_address(url), failure)}
        finally:
            client.close()
        return {}

    def start(self, config: Any) -> None:
        """Keep the validated configuration. Thread: the connector thread."""
        self._config = config if isinstance(config, ElasticsearchSinkConfig) else self.validate(config)

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        """``max_tasks`` copies of the configuration. Thread: the connector thread."""
        if self._config is None:
            raise ConfigError("task_configs() called before start()")
        return [self._config.to_task_config() for _ in range(max_tasks)]

    def alter_offsets(self, config: Mapping[str, Any], offsets: Mapping[Any, Any]) -> bool:
        """Any consumer offsets may be set: re-indexing a range rewrites the same document ids."""
        return True


def _node_failure(client: SearchClient) -> ConnectFailure | None:
    """``None`` when the next node answers ``GET /`` as a search cluster does (a ``version`` with
    a ``number``), else the category of what went wrong."""
    try:
        status, body = client.request("GET", "/")
    except (FatalHttpError, TransientHttpError) as exc:
        return exc.failure or ConnectFailure(FailureKind.UNREACHABLE)
    if status != 200:
        return http_status_failure(status)
    version = body.get("version") if isinstance(body, dict) else None
    if not isinstance(version, dict) or not isinstance(version.get("number"), str):
        return ConnectFailure(FailureKind.WRONG_SERVICE, service=SERVICE)
    return None
