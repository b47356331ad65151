"""From a connector config to a task runner in this process: validation and runner building.

Both executors use it: the worker process builds a thread runner with it (``task.executor=thread``,
through :class:`~sluice.worker.worker.Worker`), and each task host process builds the runners of
the tasks it hosts (``task.executor=process``, :mod:`sluice.worker.execution.task_host`). It imports neither
of those, so neither imports the other.

Configs arrive *raw*: they may hold config-provider placeholders (``${env:DB_PASSWORD}``). They are
resolved here exactly where values are handed over — to validation, the connector, the task, its
converters and its Kafka client — and resolved secrets are registered as the connector's, so that
its log lines, messages and traces mask them (and other connectors' do not).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sluice.connectors.api import (
    ConfigError,
    Connector,
    Converter,
    HeaderConverter,
    PluginConfig,
    SinkConnector,
    SourceConnector,
)
from sluice.offsets import OffsetStore
from sluice.plugins import PluginInfo, PluginKind, PluginRegistry
from sluice.worker.config.client_policy import ClientOverridePolicy, override_policy
from sluice.worker.config.connector_keys import split_own_keys
from sluice.worker.config.connector_scope import (
    SCOPE_KEYS,
    ConnectorScope,
    ReservedTopics,
    TopicScope,
    TopicsUsed,
    check_config_scope,
    check_offsets_topic,
    check_reserved_topics,
)
from sluice.worker.config.local_paths import PathGrant
from sluice.worker.config.masking import mask_text, register_config_secrets
from sluice.worker.config.models import ConnectorConfig, WorkerConfig, split_connector_config, sub_config
from sluice.worker.config.providers import ConfigProviders, has_placeholder
from sluice.worker.errors import DeadLetterQueue, ErrorHandlingConfig
from sluice.worker.execution.clients import SINK_CONSUMER_DEFAULTS, SOURCE_PRODUCER_DEFAULTS, client_config
from sluice.worker.execution.transform_chain import build_chain
from sluice.worker.runners import SinkTaskRunner, SourceTaskRunner, TaskStatusListener, WorkerTask
from sluice.worker.runners.source_transactions import ExactlyOnce, fence, transactional_id
from sluice.worker.status import ConnectorTaskId, TargetState
from sluice.worker.topic_creation import TopicCreationConfig, TopicCreator

#: Keys stored with task configs only because a Kafka Connect worker needs them (see
#: worker/config/connect_task_configs.py); tasks never see them.
CONNECT_ONLY_TASK_KEYS = frozenset({"task.class"})


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


@dataclass(frozen=True)
class _TaskParts:
    """What every runner of one task is built from (resolved, secrets registered)."""

    task_id: ConnectorTaskId
    validated: ValidatedConnector
    resolved: dict[str, Any]
    task_config: dict[str, Any]
    listener: TaskStatusListener
    initial_state: TargetState


class TaskBuilder:
    """Validates connector configs and builds in-process task runners for one worker config."""

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
            config_providers
            if config_providers is not None
            else ConfigProviders.from_worker_config(config.raw, plugins)
        )
        if any(has_placeholder(v) for v in config.raw.values()):
            # connector=None: what the worker's own config resolves to is hidden everywhere.
            # Same class: a distributed worker's config keeps its own keys (exactly.once.source.support).
            config = type(config).from_mapping(self.config_providers.resolve(config.raw, connector=None))
        self.config = config
        #: The topics no connector reads or writes (the worker's own, Kafka's internal ones).
        self.reserved_topics = ReservedTopics.of(config.worker_topics(), config.offsets_topic())
        self.client_policy: ClientOverridePolicy = override_policy(config.raw)
        # Parsed once: a relative entry or an overlap with the worker's own files stops the worker at
        # startup instead of failing every create. Tasks open their files through it (context.local_files).
        self.path_grant = PathGrant.from_worker_config(config)
        # The worker's own client secrets (producer.sasl.jaas.config, ssl.key.password, …).
        register_config_secrets(config.raw)

    def resolve(self, raw: Mapping[str, Any], connector: str | None = None) -> dict[str, Any]:
        """``raw`` with every ``${provider:path:key}`` placeholder replaced by its current value,
        registered as a secret of ``connector`` (by default the ``name`` in ``raw``; with neither,
        the value is hidden everywhere, as the worker's own secrets are)."""
        return self.config_providers.resolve(raw, connector if connector is not None else _name_of(raw))

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
            message = mask_text(str(exc), _name_of(raw))
            if message == str(exc):
                raise
            raise ConfigError(message, key=exc.key) from None

    def _validate(self, raw: Mapping[str, Any], resolved: Mapping[str, Any]) -> ValidatedConnector:
        # The scope keys are the worker's (stamped by the REST layer), never the connector's.
        common_raw, own_raw = split_connector_config({k: v for k, v in resolved.items() if k not in SCOPE_KEYS})
        common = ConnectorConfig.parse(common_raw)
        plugin = self.plugins.connector(common.connector_class)
        connector_cls: Any = plugin.cls
        # A connector may declare common keys in its own model too (a sink's topics/topics.regex).
        declared = {info.alias for info in connector_cls.Config.model_fields.values() if info.alias}
        own_raw.update({k: v for k, v in common_raw.items() if k in declared})
        register_config_secrets(resolved, connector_cls.Config.secret_keys(), _name_of(raw))
        # Keys the connector does not define are kept and ignored, as Connect does (connector_keys).
        own_raw, ignored = split_own_keys(connector_cls.Config, own_raw, common_raw)
        self.path_grant.check(own_raw, connector_cls.Config.path_keys())
        own = connector_cls.validate(own_raw)
        # Files named inside other values (a SQLite URL, a libpq sslkey=) as the connector reports them.
        if isinstance(own, PluginConfig):
            for key, paths in own.local_paths().items():
                for path in (paths,) if isinstance(paths, str) else paths:
                    self.path_grant.check({key: path}, (key,))
        ErrorHandlingConfig.parse(common_raw)
        if plugin.kind is PluginKind.SOURCE:
            TopicCreationConfig.parse(common_raw)  # KIP-158 keys: numbers and regexes, checked even when disabled
        self.client_policy.check_config(resolved)
        if plugin.kind is PluginKind.SINK:
            if not common.topic_list and not common.topics_regex:
                raise ConfigError("Must configure one of topics or topics.regex for a sink connector", key="topics")
        # Build the transform chain once so a bad alias or setting fails the create call.
        chain = build_chain(resolved, self.plugins)
        try:
            used = TopicsUsed(
                is_source=plugin.kind is PluginKind.SOURCE,
                topics=tuple(common.topic_list),
                topics_regex=common.topics_regex,
                dlq_topic=ErrorHandlingConfig.parse(common_raw).dlq_topic,
                transforms=tuple((step.alias, step.transform) for step in chain.steps) if chain is not None else (),
            )
            check_reserved_topics(used, resolved, self.reserved_topics)
            check_config_scope(used, resolved, ConnectorScope.of(resolved))
            if used.is_source and common.offsets_storage_topic:
                check_offsets_topic(
                    common.offsets_storage_topic,
                    self.config.offsets_topic(),
                    self.config.worker_topics(),
                    ConnectorScope.of(resolved),
                )
        finally:
            if chain is not None:
                chain.close()
        # Resolve converters now so a typo fails the create call, not the task start.
        self.converters(common, resolved)
        return ValidatedConnector(dict(raw), common, plugin, own, tuple(sorted(ignored)))

    def converters(
        self, common: ConnectorConfig, raw: Mapping[str, Any]
    ) -> tuple[Converter, Converter, HeaderConverter]:
        """The key, value and header converters of a connector, configured."""
        key_cls = self.plugins.converter(common.key_converter or self.config.key_converter, "key.converter")
        value_cls = self.plugins.converter(common.value_converter or self.config.value_converter, "value.converter")
        header_cls = self.plugins.header_converter(
            common.header_converter or self.config.header_converter, "header.converter"
        )
        # A connector-level converter takes its settings only from the connector; the worker's
        # key.converter.* apply to the worker's default converter (as in Connect).
        key_settings = (
            sub_config(raw, "key.converter.") if common.key_converter else self.config.prefixed("key.converter.")
        )
        value_settings = (
            sub_config(raw, "value.converter.") if common.value_converter else self.config.prefixed("value.converter.")
        )
        header_settings = (
            sub_config(raw, "header.converter.")
            if common.header_converter
            else self.config.prefixed("header.converter.")
        )
        key, value, header = key_cls(), value_cls(), header_cls()
        try:
            key.configure(key_settings, True)
            value.configure(value_settings, False)
            header.configure(header_settings)
        except ConfigError as exc:
            raise ConfigError(f"Invalid converter configuration: {exc}", key=exc.key) from exc
        return key, value, header

    # -- runners ----------------------------------------------------------------------------------

    def build(
        self,
        task_id: ConnectorTaskId,
        validated: ValidatedConnector,
        task_config: Mapping[str, Any],
        listener: TaskStatusListener,
        initial_state: TargetState,
    ) -> WorkerTask:
        """A thread runner for one task of ``validated``, not yet started.

        Placeholders in the connector config (converter and client settings) and in
        ``task_config`` are resolved now, so a task starts with current secret values. The keys
        stored with task configs only for Kafka Connect (``task.class``) do not reach the task,
        so a task config model that refuses unknown keys works in every mode.
        """
        connector_cls = validated.connector_class
        own = {k: v for k, v in task_config.items() if k not in CONNECT_ONLY_TASK_KEYS}
        task_config = self.resolve(own, task_id.connector)
        register_config_secrets(task_config, connector_cls.Config.secret_keys(), task_id.connector)
        resolved = self.resolve(validated.raw, task_id.connector)
        parts = _TaskParts(task_id, validated, resolved, task_config, listener, initial_state)
        if issubclass(connector_cls, SourceConnector):
            return self._source_runner(parts)
        if issubclass(connector_cls, SinkConnector):
            return self._sink_runner(parts)
        raise ConfigError(f"{connector_cls.__name__} is neither a source nor a sink connector", key="connector.class")

    def _source_runner(self, parts: _TaskParts) -> SourceTaskRunner:
        task_id, resolved = parts.task_id, parts.resolved
        scope = ConnectorScope.of(resolved)
        producer = client_config(
            self.config.bootstrap_servers,
            {**SOURCE_PRODUCER_DEFAULTS, "client.id": f"connector-producer-{task_id}"},
            self.config.prefixed("producer."),
            sub_config(resolved, "producer.override."),
            self.client_policy,
            what="producer",
            scope=scope,
            connector=task_id.connector,
        )
        exactly_once = self._exactly_once(task_id, parts.validated.common)
        if exactly_once is not None:
            overridden = frozenset(sub_config(resolved, "producer.override."))
            if producer.get("bootstrap.servers") != self.config.bootstrap_servers:
                # Its transactions would write its offsets in the other cluster, where this worker
                # (which reads them at the task's start) never looks.
                raise ConfigError(
                    "producer.override.bootstrap.servers: a source task cannot deliver exactly once to "
                    "another Kafka cluster than the worker's (its offsets would be committed there)",
                    key="producer.override.bootstrap.servers",
                )
            producer = exactly_once.producer_config(producer, overridden=overridden)
        key, value, header = self.converters(parts.validated.common, resolved)
        errors = ErrorHandlingConfig.parse(resolved)
        return SourceTaskRunner(
            task_id,
            parts.validated.connector_class.task_class(),  # type: ignore[arg-type]
            parts.task_config,
            listener=parts.listener,
            initial_state=parts.initial_state,
            producer_config=producer,
            offset_store=self.offset_store,
            key_converter=key,
            value_converter=value,
            header_converter=header,
            transform=build_chain(resolved, self.plugins),
            offset_flush_interval_ms=self.config.offset_flush_interval_ms,
            offset_flush_timeout_ms=self.config.offset_flush_timeout_ms,
            errors=errors,
            dlq=self._dead_letter_queue(task_id, errors, resolved) if errors.dlq_topic else None,
            degraded_after_ms=self.config.task_degraded_after_ms,
            topic_creator=self._topic_creator(task_id, resolved),
            topic_scope=TopicScope(scope, self.reserved_topics),
            local_files=self.path_grant,
            exactly_once=exactly_once,
        )

    def fence_source_tasks(self, connector: str, tasks: int, timeout_s: float = 30.0) -> None:
        """Fence every instance of tasks ``0 … tasks-1`` of source ``connector`` (a zombie on a frozen
        worker included): none can commit a transaction again. Nothing to do unless this worker's
        source tasks deliver exactly once."""
        if self.config.source_transactions_topic() is None or tasks <= 0:
            return
        producer = client_config(
            self.config.bootstrap_servers,
            {"client.id": f"connector-fencer-{connector}"},
            self.config.prefixed("producer."),
            {},
            self.client_policy,
            what="producer",
        )
        fence(producer, [transactional_id(str(self.config.group_id), connector, t) for t in range(tasks)], timeout_s)

    def _exactly_once(self, task_id: ConnectorTaskId, common: ConnectorConfig) -> ExactlyOnce | None:
        """How the task delivers exactly once, on a worker whose source tasks do (KIP-618)."""
        topic = self.config.source_transactions_topic()
        if topic is None:
            return None
        return ExactlyOnce(
            transactional_id=transactional_id(str(self.config.group_id), task_id.connector, task_id.task),
            # The connector's own offsets topic when it names one: the worker reads it (OffsetTopics).
            offsets_topic=common.offsets_storage_topic or topic,
            boundary=common.transaction_boundary,
            interval_ms=common.transaction_interval_ms(self.config),
        )

    def _sink_runner(self, parts: _TaskParts) -> SinkTaskRunner:
        task_id, resolved, common = parts.task_id, parts.resolved, parts.validated.common
        consumer = client_config(
            self.config.bootstrap_servers,
            {
                **SINK_CONSUMER_DEFAULTS,
                "group.id": f"connect-{common.name}",
                "client.id": f"connector-consumer-{task_id}",
            },
            self.config.prefixed("consumer."),
            sub_config(resolved, "consumer.override."),
            self.client_policy,
            what="consumer",
            scope=ConnectorScope.of(resolved),
            connector=task_id.connector,
        )
        if common.topics_regex:
            # The regex was tried (in Python's syntax) against the reserved names at create; librdkafka
            # matches it in POSIX syntax and sees '__' topics that list lacks, so it hides them all.
            consumer["topic.blacklist"] = self.reserved_topics.blacklist(consumer.get("topic.blacklist"))
        key, value, header = self.converters(common, resolved)
        errors = ErrorHandlingConfig.parse(resolved)
        return SinkTaskRunner(
            task_id,
            parts.validated.connector_class.task_class(),  # type: ignore[arg-type]
            parts.task_config,
            listener=parts.listener,
            initial_state=parts.initial_state,
            consumer_config=consumer,
            topics=common.topic_list,
            topics_regex=common.topics_regex,
            key_converter=key,
            value_converter=value,
            header_converter=header,
            transform=build_chain(resolved, self.plugins),
            offset_flush_interval_ms=self.config.offset_flush_interval_ms,
            errors=errors,
            dlq=self._dead_letter_queue(task_id, errors, resolved) if errors.dlq_topic else None,
            batch_size=max_poll_records(resolved, self.config.prefixed("consumer.")),
            degraded_after_ms=self.config.task_degraded_after_ms,
            local_files=self.path_grant,
        )

    def _topic_creator(self, task_id: ConnectorTaskId, resolved: Mapping[str, Any]) -> TopicCreator | None:
        """What creates a source task's topics per ``topic.creation.*`` (KIP-158), with an admin
        client of the worker's ``admin.*`` settings and the connector's ``admin.override.*``."""
        creation = TopicCreationConfig.parse(resolved) if self.config.topic_creation_enable else None
        if creation is None:
            return None
        return TopicCreator(creation, self._admin_config(f"connector-admin-{task_id}", resolved))

    def _dead_letter_queue(
        self, task_id: ConnectorTaskId, errors: ErrorHandlingConfig, resolved: Mapping[str, Any]
    ) -> DeadLetterQueue:
        """A task's own DLQ producer (and the admin client that creates the topic if missing)."""
        producer = client_config(
            self.config.bootstrap_servers,
            {"acks": "all", "linger.ms": 5, "client.id": f"connector-dlq-producer-{task_id}"},
            self.config.prefixed("producer."),
            sub_config(resolved, "producer.override."),
            self.client_policy,
            what="producer",
            scope=ConnectorScope.of(resolved),
            connector=task_id.connector,
        )
        return DeadLetterQueue(errors, producer, self._admin_config(f"connector-dlq-admin-{task_id}", resolved))

    def client_for(self, connector: str, resolved: Mapping[str, Any], what: str) -> dict[str, Any]:
        """The settings of ``connector``'s ``what`` client (``producer`` or ``consumer``): the
        worker's merged with its ``<what>.override.*``, as its tasks' (for reading its dead letter
        queue on the cluster its tasks write it to, and sending records back where they read)."""
        return client_config(
            self.config.bootstrap_servers,
            {"client.id": f"connector-{what}-{connector}"},
            self.config.prefixed(f"{what}."),
            sub_config(resolved, f"{what}.override."),
            self.client_policy,
            what=what,
            scope=ConnectorScope.of(resolved),
        )

    def _admin_config(self, client_id: str, resolved: Mapping[str, Any]) -> dict[str, Any]:
        return client_config(
            self.config.bootstrap_servers,
            {"client.id": client_id},
            self.config.prefixed("admin."),
            sub_config(resolved, "admin.override."),
            self.client_policy,
            what="admin",
            scope=ConnectorScope.of(resolved),
        )


def _name_of(config: Mapping[str, Any]) -> str | None:
    """The connector a config belongs to, whose secrets its resolved values are (``None``: unknown)."""
    name = config.get("name")
    return name if isinstance(name, str) and name else None


def max_poll_records(connector: Mapping[str, Any], worker_consumer: Mapping[str, Any], default: int = 2_000) -> int:
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
