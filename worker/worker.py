"""The worker: turns validated connector configs into connector instances and task runners.

Configs arrive *raw*: they may hold config-provider placeholders (``${env:DB_PASSWORD}``), which
the herder stores and returns as they are. The worker resolves them (:meth:`Worker.resolve`)
exactly where values are handed over — to validation, the connector, the task, its converters and
its Kafka client — and registers secret values so that log lines and traces mask them.

Validation and building an in-process runner live in :mod:`sluice.worker.execution.task_builder`, which a
task host process uses too; the worker adds where a task runs (``task.executor``): a thread of
this process, or a thread of a task host process (:mod:`sluice.worker.execution.process_executor`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from sluice.connectors.api import ConfigError, Connector, Converter, HeaderConverter, split_list
from sluice.offsets import OffsetStore
from sluice.offsets.connector_topics import OffsetTopics
from sluice.plugins import PluginInfo, PluginKind, PluginRegistry
from sluice.worker.config.connector_keys import ignored_key_warnings
from sluice.worker.config.exactly_once import exactly_once_problems, exactly_once_warnings
from sluice.worker.config.local_paths import warn_if_unconfined
from sluice.worker.config.models import ConnectorConfig, WorkerConfig
from sluice.worker.config.providers import ConfigProviders, reverse_transform
from sluice.worker.execution.process_executor import ProcessTaskRunner, TaskHostPool
from sluice.worker.execution.sandbox import SANDBOX_KEY
from sluice.worker.execution.sandbox import probe as probe_sandbox
from sluice.worker.execution.task_builder import CONNECT_ONLY_TASK_KEYS, TaskBuilder
from sluice.worker.execution.task_builder import (
    ValidatedConnector as ValidatedConnector,  # re-exported: the herders' import
)
from sluice.worker.observability.tap import TAPS, Collector, Tapped
from sluice.worker.observability.task_metrics import StartupCounters
from sluice.worker.runners import TaskRunner, TaskStatusListener
from sluice.worker.status import ConnectorTaskId, TargetState
from sluice.worker.topic_creation import has_topic_creation_keys

log = logging.getLogger(__name__)


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
        #: Whether this worker has exactly-once source support enabled (a distributed worker's
        #: ``exactly.once.source.support=enabled``). Read from the config as given: the builder's copy
        #: may be re-parsed as a plain :class:`WorkerConfig`.
        self.exactly_once_source_enabled = config.exactly_once_source_enabled
        self.builder = TaskBuilder(config, plugins, offset_store, config_providers)
        self.plugins = plugins
        self.offset_store = offset_store
        self.config_providers = self.builder.config_providers
        self.config = self.builder.config  # placeholders resolved
        self.client_policy = self.builder.client_policy
        self.path_grant = self.builder.path_grant
        warn_if_unconfined(self.config, self.path_grant)
        #: Whether task hosts run confined (``GET /health`` details); see :mod:`sluice.worker.execution.sandbox`.
        self.sandbox = probe_sandbox(self.config.task_host_sandbox, self.config.task_executor)
        unconfined = self.config.task_host_sandbox != "none" and not self.sandbox.enforced
        if self.config.task_executor == "process" and unconfined:
            log.warning(
                "Task host processes run without a sandbox (%s=%s): Landlock is %s. A connector's code can "
                "read and write any file this worker's user can.",
                SANDBOX_KEY,
                self.config.task_host_sandbox,
                self.sandbox.describe(),
            )
        #: Connector and task startups for ``GET /metrics`` (``connect-worker-metrics``).
        self.startups = StartupCounters()
        #: ``task.host.preload``: the task modules the hosts' fork server imports before forking.
        self.preloaded_task_modules = self._preloaded_task_modules()
        # task.executor=process: the host processes, started with the first task.
        self._hosts: TaskHostPool | None = None
        self._hosts_lock = threading.Lock()

    # -- config providers -------------------------------------------------------------------------

    def resolve(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """``raw`` with every ``${provider:path:key}`` placeholder replaced by its current value.

        Raises :class:`ConfigError` naming the key and the placeholder (never the value) when one
        cannot be resolved. Resolved values are registered as secrets of the connector ``raw`` names.
        """
        return self.builder.resolve(raw)

    def reverse_transform(
        self, validated: ValidatedConnector, task_configs: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Task configs as they may be stored and returned: every key the connector config set
        with a placeholder carries that placeholder again instead of its resolved value."""
        return reverse_transform(validated.raw, task_configs)

    # -- validation -------------------------------------------------------------------------------

    def validate(self, raw: Mapping[str, Any]) -> ValidatedConnector:
        """Check a connector config completely; raise :class:`ConfigError` naming the bad key
        (see :meth:`TaskBuilder.validate <sluice.worker.execution.task_builder.TaskBuilder.validate>`)."""
        return self.builder.validate(raw)

    def exactly_once_problems(self, validated: ValidatedConnector) -> dict[str, list[str]]:
        """What this worker or the connector refuses in a source connector's exactly-once keys
        (:mod:`sluice.worker.config.exactly_once`), ``{key: [messages]}``; asked when a connector is
        created or updated, not when a stored one starts. Thread: the caller's (a REST request's)."""
        return exactly_once_problems(
            validated.connector_class, self.resolve(validated.raw), worker_enabled=self.exactly_once_source_enabled
        )

    def warn_ignored_keys(self, validated: ValidatedConnector) -> None:
        """Log once, when a connector is created or updated, the keys it ignores and why."""
        warnings = {
            **ignored_key_warnings(validated.connector_class, validated.ignored),
            **exactly_once_warnings(
                validated.connector_class, validated.raw, offsets_topics=self.honours_offsets_topics
            ),
        }
        if warnings:
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

    def _converters(
        self, common: ConnectorConfig, raw: Mapping[str, Any]
    ) -> tuple[Converter, Converter, HeaderConverter]:
        # Kept for the backfill's sink runner and the offline pipeline, which call it.
        return self.builder.converters(common, raw)

    # -- instances --------------------------------------------------------------------------------

    def new_connector(self, validated: ValidatedConnector) -> Connector:
        return validated.connector_class()

    @property
    def honours_offsets_topics(self) -> bool:
        """Whether a source connector's ``offsets.storage.topic`` is honoured: on a distributed
        worker; a standalone worker keeps every offset in its file."""
        return isinstance(self.offset_store, OffsetTopics)

    def use_offsets_topic(self, validated: ValidatedConnector) -> None:
        """Point the offset store at the topic the source connector keeps its offsets in (its own
        ``offsets.storage.topic`` on a distributed worker, else the worker's), before anything of it
        reads or writes offsets. Raises :class:`~offsets.OffsetStoreError` naming a topic that
        cannot be created or read."""
        store = self.offset_store
        if isinstance(store, OffsetTopics) and validated.plugin.kind is PluginKind.SOURCE:
            store.use(validated.common.name, validated.common.offsets_storage_topic)

    def build_task(
        self,
        task_id: ConnectorTaskId,
        validated: ValidatedConnector,
        task_config: Mapping[str, Any],
        listener: TaskStatusListener,
        initial_state: TargetState,
    ) -> TaskRunner:
        """A runner for one task of ``validated``, not yet started: a thread of this process, or
        (``task.executor=process``) a thread of a task host process, behind the same interface.

        Placeholders are resolved where the runner is built, so a task starts with current secret
        values; ``task.class`` (stored for Kafka Connect only) never reaches the task.
        """
        task_config = {k: v for k, v in task_config.items() if k not in CONNECT_ONLY_TASK_KEYS}
        self.startups.task_attempt(task_id)
        self.use_offsets_topic(validated)
        if self.config.task_executor == "process":
            return ProcessTaskRunner(task_id, self._task_hosts(), validated.raw, task_config, listener, initial_state)
        return self.builder.build(task_id, validated, task_config, listener, initial_state)

    def tap(self, connector: str, count: int, timeout_s: float) -> list[Tapped]:
        """Up to ``count`` records ``connector``'s tasks here move within ``timeout_s`` (the live
        tap: its tasks on this process's threads and in its task hosts)."""
        collector = Collector(count)
        token = TAPS.subscribe(connector, count, collector.add)
        with self._hosts_lock:
            hosts = self._hosts
        tap_id = hosts.tap(connector, count, collector.add) if hosts is not None else None
        try:
            return collector.wait(timeout_s)
        finally:
            TAPS.unsubscribe(token)
            if hosts is not None and tap_id is not None:
                hosts.untap(tap_id)

    def _task_hosts(self) -> TaskHostPool:
        with self._hosts_lock:
            if self._hosts is None:
                self._hosts = TaskHostPool(
                    type(self.config),
                    self.config.raw,
                    self.offset_store,
                    size=self.config.task_host_processes,
                    graceful_timeout_s=self.config.task_shutdown_graceful_timeout_ms / 1000,
                    plugin_modules=self.plugins.imported_path_modules,
                    preload_modules=self.preloaded_task_modules,
                )
            return self._hosts

    def _preloaded_task_modules(self) -> list[str]:
        """The modules of the tasks of ``task.host.preload``'s connectors (named, not imported here).
        Raises :class:`ConfigError` on ``task.host.preload`` for a name that is no connector."""
        modules: list[str] = []
        for name in split_list(self.config.task_host_preload):
            try:
                connector = self.plugins.connector(name).cls
            except ConfigError as exc:
                raise ConfigError(f"task.host.preload: {exc}", key="task.host.preload") from None
            if issubclass(connector, Connector):
                modules.append(connector.task_class_name().rpartition(".")[0])
        return modules

    def refresh_plugins(self) -> list[PluginInfo]:
        """Scan ``plugin.path`` again (the operator's SIGHUP) and hand what it imported to the task
        hosts; returns the plugins added."""
        added = self.plugins.refresh()
        with self._hosts_lock:
            hosts = self._hosts
        if hosts is not None:
            hosts.adopt_plugin_modules(self.plugins.imported_path_modules)
        return added

    def close(self) -> None:
        """End the task host processes (``task.executor=process``), once the herder stopped its tasks."""
        with self._hosts_lock:
            hosts, self._hosts = self._hosts, None
        if hosts is not None:
            hosts.close()
