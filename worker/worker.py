"""The worker: turns validated connector configs into connector instances and task runners.

Configs arrive *raw*: they may hold config-provider placeholders (``${env:DB_PASSWORD}``), which
the herder stores and returns as they are. The worker resolves them (:meth:`Worker.resolve`)
exactly where values are handed over — to validation, the connector, the task, its converters and
its Kafka client — and registers secret values so that log lines and traces mask them.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.connectors.api import (
    ConfigError,
    Connector,
    Converter,
    HeaderConverter,
    SinkConnector,
    SourceConnector,
)
from sluice.offsets import OffsetStore
from sluice.plugins import PluginInfo, PluginKind, PluginRegistry
from sluice.worker.client_policy import ClientOverridePolicy, override_policy
from sluice.worker.clients import SINK_CONSUMER_DEFAULTS, SOURCE_PRODUCER_DEFAULTS, client_config
from sluice.worker.config import ConnectorConfig, WorkerConfig, split_connector_config, sub_config
from sluice.worker.config_providers import ConfigProviders, has_placeholder, reverse_transform
from sluice.worker.connector_keys import ignored_key_warnings, split_own_keys
from sluice.worker.errors import DeadLetterQueue, ErrorHandlingConfig
from sluice.worker.local_paths import allowed_roots, check_local_paths, warn_if_unconfined
from sluice.worker.masking import mask_text, register_config_secrets
from sluice.worker.runners import SinkTaskRunner, SourceTaskRunner, TaskStatusListener, WorkerTask
from sluice.worker.status import ConnectorTaskId, TargetState
from sluice.worker.task_metrics import StartupCounters
from sluice.worker.topic_creation import TopicCreationConfig, TopicCreator, has_topic_creation_keys
from sluice.worker.transform_chain import build_chain

log = logging.getLogger(__name__)

#: Keys stored with task configs only because a Kafka Connect worker needs them (see
#: worker/connect_task_configs.py); tasks never see them.
_CONNECT_ONLY_TASK_KEYS = frozenset({"task.class"})


@dataclass(frozen=True)
class ValidatedConnector:
    """A connector config that passed validation, with what it resolved to.

    ``raw`` is the config as the user gave it, placeholders included: the only form to store or
    return. ``common`` and ``own`` were validated from the resolved values and may hold secrets.
    """

    raw: dict[str, Any]
    common: ConnectorConfig
    plugin: PluginInfo
    own: Any
    #: Keys the connector does not define (kept in ``raw``, never handed to it), sorted.
    ignored: tuple[str, ...] = ()

    @property
    def type(self) -> str:
        return self.plugin.kind.value

    @property
    def connector_class(self) -> builtins.type[Connector]:  # builtins: the property above shadows type
        return self.plugin.cls


class Worker:
    """Builds what runs; the herder decides when."""

    def __init__(
        self,
        config: WorkerConfig,
        plugins: PluginRegistry,
        offset_store: OffsetStore,
        config_providers: ConfigProviders | None = None,
    ) -> None:
        """Raises :class:`ConfigError` naming the worker key when a config provider is misconfigured
        or a placeholder in the worker config (``producer.sasl.jaas.config=${file:…}``) cannot be resolved."""
        self.plugins = plugins
        self.offset_store = offset_store
        self.config_providers = (
            config_providers if config_providers is not None else ConfigProviders.from_worker_config(config.raw, plugins)
        )
        if any(has_placeholder(v) for v in config.raw.values()):
            config = WorkerConfig.from_mapping(self.config_providers.resolve(config.raw))
        self.config = config
        self.client_policy: ClientOverridePolicy = override_policy(config.raw)
        # Parsed once: a relative entry stops the worker at startup instead of failing every create.
        self.connector_path_roots = allowed_roots(config.connector_allowed_paths)
        warn_if_unconfined(config, self.connector_path_roots)
        # The worker's own client secrets (producer.sasl.jaas.config, ssl.key.password, …).
        register_config_secrets(config.raw)
        #: Connector and task startups for ``GET /metrics`` (``connect-worker-metrics``).
        self.startups = StartupCounters()

    # -- config providers -------------------------------------------------------------------------

    def resolve(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """``raw`` with every ``${provider:path:key}`` placeholder replaced by its current value.

        Raises :class:`ConfigError` naming the key and the placeholder (never the value) when one
        cannot be resolved. Resolved values are registered as secrets for log masking.
        """
        return self.config_providers.resolve(raw)

    def reverse_transform(self, validated: ValidatedConnector, task_configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Task configs as they may be stored and returned: every key the connector config set
        with a placeholder carries that placeholder again instead of its resolved value."""
        return reverse_transform(validated.raw, task_configs)

    # -- validation -------------------------------------------------------------------------------

    def validate(self, raw: Mapping[str, Any]) -> ValidatedConnector:
        """Check a connector config completely; raise :class:`ConfigError` naming the bad key.

        The values checked are the resolved ones (a placeholder must resolve, and to a valid value);
        the result keeps ``raw`` unresolved for storage. Error messages quote values, so a resolved
        secret in one is masked.
        """
        resolved = self.resolve(raw)
        try:
            return self._validate(raw, resolved)
        except ConfigError as exc:
            message = mask_text(str(exc))
            if message == str(exc):
                raise
            raise ConfigError(message, key=exc.key) from None

    def _validate(self, raw: Mapping[str, Any], resolved: Mapping[str, Any]) -> ValidatedConnector:
        common_raw, own_raw = split_connector_config(resolved)
        common = ConnectorConfig.parse(common_raw)
        plugin = self.plugins.connector(common.connector_class)
        connector_cls: Any = plugin.cls
        # A connector may declare common keys in its own model too (a sink's topics/topics.regex).
        declared = {info.alias for info in connector_cls.Config.model_fields.values() if info.alias}
        own_raw.update({k: v for k, v in common_raw.items() if k in declared})
        register_config_secrets(resolved, connector_cls.Config.secret_keys())
        # Keys the connector does not define are kept and ignored, as Connect does (connector_keys).
        own_raw, ignored = split_own_keys(connector_cls.Config, own_raw, common_raw)
        check_local_paths(own_raw, connector_cls.Config.path_keys(), self.connector_path_roots)
        own = connector_cls.validate(own_raw)
        ErrorHandlingConfig.parse(common_raw)
        if plugin.kind is PluginKind.SOURCE:
            TopicCreationConfig.parse(common_raw)  # KIP-158 keys: numbers and regexes, checked even when disabled
        self.client_policy.check_config(resolved)
        if plugin.kind is PluginKind.SINK:
            if not common.topic_list and not common.topics_regex:
                raise ConfigError(
                    "Must configure one of topics or topics.regex for a sink connector", key="topics"
                )
        # Build the transform chain once so a bad alias or setting fails the create call.
        chain = build_chain(resolved, self.plugins)
        if chain is not None:
            chain.close()
        # Resolve converters now so a typo fails the create call, not the task start.
        self._converters(common, resolved)
        return ValidatedConnector(dict(raw), common, plugin, own, tuple(sorted(ignored)))

    def warn_ignored_keys(self, validated: ValidatedConnector) -> None:
        """Log once, when a connector is created or updated, the keys it ignores and why."""
        if validated.ignored:
            warnings = ignored_key_warnings(validated.connector_class, validated.ignored)
            log.warning(
                "Connector %s ignores %d configuration key(s): %s",
                validated.common.name,
                len(warnings),
                "; ".join(warnings.values()),
            )
        if not self.config.topic_creation_enable and has_topic_creation_keys(validated.raw):
            log.warning(
                "Connector %s sets topic.creation.* keys, but this worker has topic.creation.enable=false: they are "
                "ignored and the broker decides how its topics are created",
                validated.common.name,
            )

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
        """A runner for one task of ``validated``, not yet started.

        Placeholders in the connector config (converter and client settings) and in
        ``task_config`` are resolved now, so a task starts with current secret values. The keys
        stored with task configs only for Kafka Connect (``task.class``) do not reach the task,
        so a task config model that refuses unknown keys works in every mode.
        """
        task_config = {k: v for k, v in task_config.items() if k not in _CONNECT_ONLY_TASK_KEYS}
        self.startups.task_attempt(task_id)
        if self.config.task_executor == "process":
            # Here, not at the top: process_executor imports this module (a known cycle, listed in
            # pyproject.toml's acyclic contract, to be removed).
            from sluice.worker.process_executor import ProcessTaskRunner

            return ProcessTaskRunner(  # type: ignore[return-value]  # the same interface, another process
                task_id,
                worker_config_class=type(self.config),
                worker_config=self.config.raw,
                connector_config=validated.raw,
                task_config=task_config,
                listener=listener,
                initial_state=initial_state,
                offset_store=self.offset_store,
            )
        connector_cls = validated.connector_class
        task = connector_cls.task_class()
        resolved = self.resolve(validated.raw)
        task_config = self.resolve(task_config)
        register_config_secrets(task_config, connector_cls.Config.secret_keys())
        key, value, header = self._converters(validated.common, resolved)
        transform = build_chain(resolved, self.plugins)
        policy = self.client_policy
        errors = ErrorHandlingConfig.parse(resolved)
        dlq = self._dead_letter_queue(task_id, errors, resolved) if errors.dlq_topic else None
        if issubclass(connector_cls, SourceConnector):
            producer = client_config(
                self.config.bootstrap_servers,
                {**SOURCE_PRODUCER_DEFAULTS, "client.id": f"connector-producer-{task_id}"},
                self.config.prefixed("producer."),
                sub_config(resolved, "producer.override."),
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
                transform=transform,
                offset_flush_interval_ms=self.config.offset_flush_interval_ms,
                offset_flush_timeout_ms=self.config.offset_flush_timeout_ms,
                errors=errors,
                dlq=dlq,
                degraded_after_ms=self.config.task_degraded_after_ms,
                topic_creator=self._topic_creator(task_id, resolved),
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
                sub_config(resolved, "consumer.override."),
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
                transform=transform,
                offset_flush_interval_ms=self.config.offset_flush_interval_ms,
                errors=errors,
                dlq=dlq,
                batch_size=_max_poll_records(resolved, self.config.prefixed("consumer.")),
                degraded_after_ms=self.config.task_degraded_after_ms,
            )
        raise ConfigError(f"{connector_cls.__name__} is neither a source nor a sink connector", key="connector.class")

    def _topic_creator(self, task_id: ConnectorTaskId, resolved: Mapping[str, Any]) -> TopicCreator | None:
        """What creates a source task's topics per ``topic.creation.*`` (KIP-158), with an admin
        client of the worker's ``admin.*`` settings and the connector's ``admin.override.*``."""
        creation = TopicCreationConfig.parse(resolved) if self.config.topic_creation_enable else None
        if creation is None:
            return None
        admin = client_config(
            self.config.bootstrap_servers,
            {"client.id": f"connector-admin-{task_id}"},
            self.config.prefixed("admin."),
            sub_config(resolved, "admin.override."),
            self.client_policy,
            what="admin",
        )
        return TopicCreator(creation, admin)

    def _dead_letter_queue(self, task_id: ConnectorTaskId, errors: ErrorHandlingConfig, resolved: Mapping[str, Any]) -> DeadLetterQueue:
        """A task's own DLQ producer (and the admin client that creates the topic if missing)."""
        policy = self.client_policy
        producer = client_config(
            self.config.bootstrap_servers,
            {"acks": "all", "linger.ms": 5, "client.id": f"connector-dlq-producer-{task_id}"},
            self.config.prefixed("producer."),
            sub_config(resolved, "producer.override."),
            policy,
            what="producer",
        )
        admin = client_config(
            self.config.bootstrap_servers,
            {"client.id": f"connector-dlq-admin-{task_id}"},
            self.config.prefixed("admin."),
            sub_config(resolved, "admin.override."),
            policy,
            what="admin",
        )
        return DeadLetterQueue(errors, producer, admin)


def _max_poll_records(connector: Mapping[str, Any], worker_consumer: Mapping[str, Any], default: int = 2_000) -> int:
    """Records per ``put()``: Connect's ``max.poll.records`` (``consumer.override.`` on the connector,
    else ``consumer.`` on the worker); librdkafka has no such setting, so the sink runner applies it."""
    value = connector.get("consumer.override.max.poll.records", worker_consumer.get("max.poll.records"))
    if value in (None, ""):
        return default
    try:
        records = int(value)
    except (TypeError, ValueError):
        records = 0
    if records < 1:
        raise ConfigError(f"max.poll.records must be a positive integer, got {value!r}", key="max.poll.records")
    return records
