"""The worker: turns validated connector configs into connector instances and task runners."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from connectors.api import (
    ConfigError,
    Connector,
    Converter,
    HeaderConverter,
    SinkConnector,
    SourceConnector,
)
from offsets import OffsetStore
from plugins import PluginInfo, PluginKind, PluginRegistry
from worker.clients import SINK_CONSUMER_DEFAULTS, SOURCE_PRODUCER_DEFAULTS, client_config
from worker.config import ConnectorConfig, WorkerConfig, split_connector_config, sub_config
from worker.runners import SinkTaskRunner, SourceTaskRunner, TaskStatusListener, WorkerTask
from worker.status import ConnectorTaskId, TargetState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ValidatedConnector:
    """A connector config that passed validation, with what it resolved to."""

    raw: dict[str, Any]
    common: ConnectorConfig
    plugin: PluginInfo
    own: Any

    @property
    def type(self) -> str:
        return self.plugin.kind.value

    @property
    def connector_class(self) -> type[Connector]:
        return self.plugin.cls


class Worker:
    """Builds what runs; the herder decides when."""

    def __init__(self, config: WorkerConfig, plugins: PluginRegistry, offset_store: OffsetStore) -> None:
        self.config = config
        self.plugins = plugins
        self.offset_store = offset_store

    # -- validation -------------------------------------------------------------------------------

    def validate(self, raw: Mapping[str, Any]) -> ValidatedConnector:
        """Check a connector config completely; raise :class:`ConfigError` naming the bad key."""
        common_raw, own_raw = split_connector_config(raw)
        common = ConnectorConfig.parse(common_raw)
        plugin = self.plugins.connector(common.connector_class)
        # A connector may declare common keys in its own model too (a sink's topics/topics.regex).
        declared = {info.alias for info in plugin.cls.Config.model_fields.values() if info.alias}
        own_raw.update({k: v for k, v in common_raw.items() if k in declared})
        own = plugin.cls.validate(own_raw)
        if plugin.kind is PluginKind.SINK:
            if not common.topic_list and not common.topics_regex:
                raise ConfigError(
                    "Must configure one of topics or topics.regex for a sink connector", key="topics"
                )
        if common.transforms.strip():
            raise ConfigError(
                "Single message transforms are not available in this version of Sluice", key="transforms"
            )
        # Resolve converters now so a typo fails the create call, not the task start.
        self._converters(common, raw)
        return ValidatedConnector(dict(raw), common, plugin, own)

    def _converters(self, common: ConnectorConfig, raw: Mapping[str, Any]) -> tuple[Converter, Converter, HeaderConverter]:
        key_name = common.key_converter or self.config.key_converter
        value_name = common.value_converter or self.config.value_converter
        header_name = common.header_converter or self.config.header_converter
        key_cls = self.plugins.converter(key_name, "key.converter")
        value_cls = self.plugins.converter(value_name, "value.converter")
        header_cls = self.plugins.header_converter(header_name, "header.converter")
        # A connector-level converter takes its settings only from the connector; the worker's
        # key.converter.* apply to the worker's default converter (as in Connect).
        key_settings = sub_config(raw, "key.converter.") if common.key_converter else self.config.prefixed("key.converter.")
        value_settings = (
            sub_config(raw, "value.converter.") if common.value_converter else self.config.prefixed("value.converter.")
        )
        header_settings = (
            sub_config(raw, "header.converter.") if common.header_converter else self.config.prefixed("header.converter.")
        )
        key, value, header = key_cls(), value_cls(), header_cls()
        try:
            key.configure(key_settings, True)
            value.configure(value_settings, False)
            header.configure(header_settings)
        except ConfigError as exc:
            raise ConfigError(f"Invalid converter configuration: {exc}", key=exc.key) from exc
        return key, value, header

    # -- instances --------------------------------------------------------------------------------

    def new_connector(self, validated: ValidatedConnector) -> Connector:
        return validated.connector_class()

    def build_task(
        self,
        task_id: ConnectorTaskId,
        validated: ValidatedConnector,
        task_config: Mapping[str, Any],
        listener: TaskStatusListener,
        initial_state: TargetState,
    ) -> WorkerTask:
        """A runner for one task of ``validated``, not yet started."""
        connector_cls = validated.connector_class
        task = connector_cls.task_class()
        key, value, header = self._converters(validated.common, validated.raw)
        policy = self.config.connector_client_config_override_policy
        if issubclass(connector_cls, SourceConnector):
            producer = client_config(
                self.config.bootstrap_servers,
                {**SOURCE_PRODUCER_DEFAULTS, "client.id": f"connector-producer-{task_id}"},
                self.config.prefixed("producer."),
                sub_config(validated.raw, "producer.override."),
                policy,
                what="producer",
            )
            return SourceTaskRunner(
                task_id,
                task,  # type: ignore[arg-type]
                task_config,
                listener=listener,
                initial_state=initial_state,
                producer_config=producer,
                offset_store=self.offset_store,
                key_converter=key,
                value_converter=value,
                header_converter=header,
                offset_flush_interval_ms=self.config.offset_flush_interval_ms,
                offset_flush_timeout_ms=self.config.offset_flush_timeout_ms,
            )
        if issubclass(connector_cls, SinkConnector):
            consumer = client_config(
                self.config.bootstrap_servers,
                {
                    **SINK_CONSUMER_DEFAULTS,
                    "group.id": f"connect-{validated.common.name}",
                    "client.id": f"connector-consumer-{task_id}",
                },
                self.config.prefixed("consumer."),
                sub_config(validated.raw, "consumer.override."),
                policy,
                what="consumer",
            )
            return SinkTaskRunner(
                task_id,
                task,  # type: ignore[arg-type]
                task_config,
                listener=listener,
                initial_state=initial_state,
                consumer_config=consumer,
                topics=validated.common.topic_list,
                topics_regex=validated.common.topics_regex,
                key_converter=key,
                value_converter=value,
                header_converter=header,
                offset_flush_interval_ms=self.config.offset_flush_interval_ms,
            )
        raise ConfigError(f"{connector_cls.__name__} is neither a source nor a sink connector", key="connector.class")
