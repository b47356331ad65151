"""The standalone herder: one process, connector configs from files and REST, offsets in a file."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka.admin import AdminClient

from sluice.connectors.api import (
    AlreadyExistsError,
    ConfigError,
    ConnectError,
    Connector,
    NotFoundError,
    SinkConnector,
    SourceConnector,
)
from sluice.offsets import StoreOffsetReader
from sluice.plugins import PluginKind
from sluice.worker.connect_task_configs import as_connect_task_configs
from sluice.worker.connector_offsets import SinkOffsets, SourceOffsets, parse_changes, sink_changes
from sluice.worker.herder import (
    HEALTH_TIMEOUT_S,
    HEALTHY,
    STARTING,
    BadRequest,
    ConnectorInfo,
    ConnectorStateInfo,
    Health,
    Herder,
    TaskInfo,
)
from sluice.worker.herder_support import (
    NOT_STOPPED_MESSAGE,
    PluginQueries,
    TaskStatusReporting,
    call_with_timeout,
    offsets_message,
    request_config,
    restore_masked_secrets,
    stringify,
)
from sluice.worker.logcontext import set_context
from sluice.worker.masking import mask_config, mask_text
from sluice.worker.restarts import TaskRestarter
from sluice.worker.runners import WorkerTask
from sluice.worker.status import ConnectorTaskId, State, Status, StatusStore, TargetState, format_trace, scrub_secrets
from sluice.worker.worker import ValidatedConnector, Worker

log = logging.getLogger(__name__)

T = TypeVar("T")

@dataclass
class _ConnectorHandle:
    validated: ValidatedConnector
    target: TargetState
    instance: Connector | None = None
    task_configs: list[dict[str, Any]] = field(default_factory=list)
    runners: dict[int, WorkerTask] = field(default_factory=dict)
    # Topics of runners that have ended since creation or the last reset (KIP-558); live runners
    # keep their own set, merged in when they stop.
    topics: set[str] = field(default_factory=set)

    @property
    def secret_keys(self) -> set[str]:
        return self.validated.connector_class.Config.secret_keys()


class _ConnectorContext:
    def __init__(self, herder: StandaloneHerder, name: str) -> None:
        self._herder = herder
        self._name = name
        self.offset_reader = StoreOffsetReader(herder.worker.offset_store, name)

    def request_task_reconfiguration(self) -> None:
        threading.Thread(
            target=self._herder._reconfigure, args=(self._name,), name=f"reconfigure-{self._name}", daemon=True
        ).start()

    def raise_error(self, error: BaseException) -> None:
        self._herder._connector_failed(self._name, error)


class StandaloneHerder(TaskStatusReporting, PluginQueries, Herder):
    """Runs every connector in this process."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.status = StatusStore()
        self._lock = threading.RLock()
        self._connectors: dict[str, _ConnectorHandle] = {}
        self._cluster_id: str | None = None
        self._started = threading.Event()
        self._stopped = False
        self.restarter = TaskRestarter(worker.config.restart_policy)
        #: How long ``GET /health`` waits for the herder's lock before calling the worker unhealthy.
        self.health_timeout_s = HEALTH_TIMEOUT_S

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        self.worker.offset_store.start()
        self._started.set()
        log.info("Standalone herder started as worker %s", self.worker_id)

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            names = list(self._connectors)
        self.restarter.close()
        log.info("Stopping %d connector(s)", len(names))
        for name in names:
            with self._lock:
                handle = self._connectors.get(name)
                if handle is not None:
                    self._stop_tasks(name, handle)
                    self._stop_instance(name, handle)
        self.worker.offset_store.stop()
        log.info("Herder stopped")

    @property
    def ready(self) -> bool:
        return self._started.is_set() and not self._stopped

    def health(self) -> Health:
        """KIP-1017 for a standalone worker: starting until the herder has started; unhealthy while
        an operation has held the herder for longer than :attr:`health_timeout_s` (every change
        waits behind it)."""
        if not self.ready:
            return STARTING
        if not self._lock.acquire(timeout=self.health_timeout_s):
            return Health(
                "unhealthy",
                f"Worker was unable to handle this request within {self.health_timeout_s:g} s: its herder is busy "
                "with another operation and may be unable to handle other requests.",
            )
        self._lock.release()
        return HEALTHY

    @property
    def worker_id(self) -> str:
        return self.worker.config.worker_id

    def kafka_cluster_id(self) -> str | None:
        if self._cluster_id is None:
            try:
                admin = AdminClient({"bootstrap.servers": self.worker.config.bootstrap_servers})
                self._cluster_id = admin.list_topics(timeout=5).cluster_id
            except Exception as exc:
                log.debug("Cannot read the Kafka cluster id: %s", exc)
        return self._cluster_id

    # -- queries ----------------------------------------------------------------------------------

    def _handle(self, name: str) -> _ConnectorHandle:
        handle = self._connectors.get(name)
        if handle is None:
            raise NotFoundError(f"Connector {name} not found")
        return handle

    def connectors(self) -> list[str]:
        with self._lock:
            return sorted(self._connectors)

    def connector_info(self, name: str) -> ConnectorInfo:
        with self._lock:
            handle = self._handle(name)
            tasks = sorted(handle.runners) or list(range(len(handle.task_configs)))
            return ConnectorInfo(name, mask_config(handle.validated.raw, handle.secret_keys), tasks, handle.validated.type)

    def connector_config(self, name: str) -> dict[str, Any]:
        with self._lock:
            handle = self._handle(name)
            return mask_config(handle.validated.raw, handle.secret_keys)

    def task_configs(self, name: str) -> list[TaskInfo]:
        with self._lock:
            handle = self._handle(name)
            # As a cluster stores them (with task.class), so both modes answer in Connect's shape.
            shown = as_connect_task_configs(handle.validated.plugin, handle.validated.raw, handle.task_configs)
            return [TaskInfo(name, i, mask_config(c, handle.secret_keys)) for i, c in enumerate(shown)]

    def connector_topics(self, name: str) -> list[str]:
        self._check_topic_tracking("topic.tracking.enable", "Topic tracking is disabled.")
        with self._lock:
            handle = self._handle(name)
            topics = set(handle.topics)
            for runner in handle.runners.values():
                topics.update(runner.active_topics)
            return sorted(topics)

    def reset_connector_topics(self, name: str) -> None:
        self._check_topic_tracking("topic.tracking.enable", "Topic tracking is disabled.")
        self._check_topic_tracking("topic.tracking.allow.reset", "Topic tracking reset is disabled.")
        with self._lock:
            handle = self._handle(name)
            handle.topics.clear()
            for runner in handle.runners.values():
                runner.reset_active_topics()

    def connector_status(self, name: str) -> ConnectorStateInfo:
        with self._lock:
            handle = self._handle(name)
            conn = self.status.connector(name) or Status(State.UNASSIGNED, self.worker_id)
            tasks = []
            for tid, st in sorted(self.status.tasks(name).items()):
                tasks.append({"id": tid.task, **st.to_json()})
            return ConnectorStateInfo(name, conn.to_json(), tasks, handle.validated.type)

    def task_status(self, name: str, task: int) -> dict[str, Any]:
        with self._lock:
            self._handle(name)
            st = self.status.task(ConnectorTaskId(name, task))
            if st is None:
                raise NotFoundError(f"Task {name}-{task} not found")
            return {"id": task, **st.to_json()}

    # -- changes ----------------------------------------------------------------------------------

    def put_connector_config(
        self,
        name: str,
        config: Mapping[str, Any],
        *,
        allow_replace: bool,
        initial_state: TargetState = TargetState.STARTED,
    ) -> tuple[bool, ConnectorInfo]:
        if not self.ready:
            raise ConnectError("The worker is not running")
        raw = request_config(name, config)
        with self._lock:
            current = self._connectors.get(name)
            if current is not None:
                restore_masked_secrets(raw, current.validated.raw, current.secret_keys)
        validated = self.worker.validate(raw)
        with self._lock:
            existing = self._connectors.get(name)
            if existing is not None and not allow_replace:
                raise AlreadyExistsError(f"Connector {name} already exists")
            if existing is not None:
                self.restarter.reset_connector(name)
                target = existing.target
                self._stop_tasks(name, existing)
                self._stop_instance(name, existing)
                self.status.forget(name)
            else:
                target = initial_state
            handle = _ConnectorHandle(validated, target)
            self._connectors[name] = handle
            self._start_connector(name, handle)
            info = ConnectorInfo(name, mask_config(raw, handle.secret_keys), sorted(handle.runners), validated.type)
        log.info("%s connector %s (%s)", "Updated" if existing else "Created", name, validated.plugin.class_name)
        self.worker.warn_ignored_keys(validated)
        return existing is None, info

    def delete_connector(self, name: str) -> None:
        with self._lock:
            handle = self._handle(name)
            self._stop_tasks(name, handle)
            self._stop_instance(name, handle)
            del self._connectors[name]
            self.status.forget(name)
            self.restarter.reset_connector(name)
        log.info("Deleted connector %s", name)

    def set_target_state(self, name: str, state: TargetState) -> None:
        with self._lock:
            handle = self._handle(name)
            if handle.target is state:
                return
            previous = handle.target
            handle.target = state
            if state is TargetState.STOPPED:
                self._stop_tasks(name, handle)
                self._stop_instance(name, handle)
                handle.task_configs = []
                self.status.put_connector(name, Status(State.STOPPED, self.worker_id))
                return
            if previous is TargetState.STOPPED:
                self._start_connector(name, handle)
                return
            for runner in handle.runners.values():
                runner.transition_to(state)
            self.status.put_connector(
                name, Status(State.PAUSED if state is TargetState.PAUSED else State.RUNNING, self.worker_id)
            )

    def restart_connector(self, name: str) -> None:
        with self._lock:
            handle = self._handle(name)
            if handle.target is TargetState.STOPPED:
                return
            self._stop_instance(name, handle)
            old = list(handle.task_configs)
            self._start_instance(name, handle)
            if handle.task_configs != old:
                self._restart_tasks(name, handle)

    def restart_task(self, name: str, task: int) -> None:
        with self._lock:
            handle = self._handle(name)
            if task not in handle.runners and not 0 <= task < len(handle.task_configs):
                raise NotFoundError(f"Task {name}-{task} not found")
            self.restarter.reset(ConnectorTaskId(name, task))
            runner = handle.runners.pop(task, None)
            if runner is not None:
                self._stop_runner(runner)
                handle.topics.update(runner.active_topics)
            self._start_task(name, handle, task)

    def _auto_restart(self, task_id: ConnectorTaskId, failed: WorkerTask | None) -> None:
        """Timer callback of :class:`TaskRestarter`: restart the task if it is still the failed run."""
        set_context(task_id.connector, task_id.task)
        with self._lock:
            handle = self._connectors.get(task_id.connector)
            if handle is None or handle.target is TargetState.STOPPED or self._stopped:
                return
            current = handle.runners.get(task_id.task)
            if current is not failed or task_id.task >= len(handle.task_configs):
                return  # restarted, reconfigured or removed meanwhile
            if current is not None:
                handle.runners.pop(task_id.task, None)
                self._stop_runner(current)
                handle.topics.update(current.active_topics)
            log.info("Restarting failed task %s automatically", task_id)
            self._start_task(task_id.connector, handle, task_id.task)

    def patch_connector_config(self, name: str, patch: Mapping[str, Any]) -> ConnectorInfo:
        with self._lock:
            merged = dict(self._handle(name).validated.raw)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        _, info = self.put_connector_config(name, merged, allow_replace=True)
        return info

    def restart_connector_and_tasks(self, name: str, *, include_tasks: bool, only_failed: bool) -> ConnectorStateInfo:
        with self._lock:
            handle = self._handle(name)
            if handle.target is TargetState.STOPPED:
                return self.connector_status(name)
            current = self.status.connector(name)
            restart_instance = not only_failed or (current is not None and current.state is State.FAILED)
            tasks = sorted(
                tid.task
                for tid, st in self.status.tasks(name).items()
                if include_tasks and (not only_failed or st.state is State.FAILED)
            )
            if restart_instance:
                self.status.put_connector(name, Status(State.RESTARTING, self.worker_id))
            for task in tasks:
                self.status.put_task(ConnectorTaskId(name, task), Status(State.RESTARTING, self.worker_id))
            planned = self.connector_status(name)
        threading.Thread(
            target=self._execute_restart, args=(name, restart_instance, tasks), name=f"restart-{name}", daemon=True
        ).start()
        return planned

    def _execute_restart(self, name: str, restart_instance: bool, tasks: list[int]) -> None:
        set_context(name)
        with self._lock:
            handle = self._connectors.get(name)
            if handle is None or handle.target is TargetState.STOPPED:
                return
            if restart_instance:
                self._stop_instance(name, handle)
                old = list(handle.task_configs)
                if not self._start_instance(name, handle):
                    self._stop_tasks(name, handle)
                    return
                if handle.task_configs != old:
                    self._restart_tasks(name, handle)
                    return
            for task in tasks:
                self.restarter.reset(ConnectorTaskId(name, task))
                runner = handle.runners.pop(task, None)
                if runner is not None:
                    self._stop_runner(runner)
                    handle.topics.update(runner.active_topics)
                if task < len(handle.task_configs):
                    self._start_task(name, handle, task)

    # -- offsets (KIP-875) --------------------------------------------------------------------------

    def _sink_offsets(self) -> SinkOffsets:
        return SinkOffsets({"bootstrap.servers": self.worker.config.bootstrap_servers, **self.worker.config.prefixed("admin.")})

    @staticmethod
    def _group(handle: _ConnectorHandle) -> str:
        return str(handle.validated.raw.get("consumer.override.group.id") or f"connect-{handle.validated.common.name}")

    def connector_offsets(self, name: str) -> list[dict[str, Any]]:
        with self._lock:
            handle = self._handle(name)
        if handle.validated.plugin.kind is PluginKind.SINK:
            return self._sink_offsets().get(self._group(handle))
        return SourceOffsets(self.worker.offset_store).get(name)

    def alter_connector_offsets(self, name: str, entries: list[dict[str, Any]]) -> str:
        changes = parse_changes(entries)
        with self._lock:
            handle = self._stopped_handle(name)
            if handle.validated.plugin.kind is PluginKind.SINK:
                by_partition = sink_changes(changes)
                checked = self._ask_connector(handle, by_partition)
                self._sink_offsets().alter(self._group(handle), by_partition)
            else:
                checked = self._ask_connector(handle, changes)
                SourceOffsets(self.worker.offset_store).alter(name, changes)
        log.info("Altered the offsets of %d partition(s) of connector %s", len(changes), name)
        return offsets_message("altered", checked)

    def reset_connector_offsets(self, name: str) -> str:
        with self._lock:
            handle = self._stopped_handle(name)
            if handle.validated.plugin.kind is PluginKind.SINK:
                sink = self._sink_offsets()
                group = self._group(handle)
                current = sink_changes([(e["partition"], None) for e in sink.get(group)])
                checked = self._ask_connector(handle, current)
                sink.reset(group)
            else:
                source = SourceOffsets(self.worker.offset_store)
                checked = self._ask_connector(handle, [(e["partition"], None) for e in source.get(name)])
                source.reset(name)
        log.info("Reset the offsets of connector %s", name)
        return offsets_message("reset", checked)

    def _stopped_handle(self, name: str) -> _ConnectorHandle:
        handle = self._handle(name)
        if handle.target is not TargetState.STOPPED:
            raise BadRequest(NOT_STOPPED_MESSAGE.format(name=name))
        return handle

    def _ask_connector(self, handle: _ConnectorHandle, offsets: Any) -> bool:
        """The connector's ``alter_offsets`` veto; a ``ConfigError`` from it is the user's 400."""
        connector = self.worker.new_connector(handle.validated)
        assert isinstance(connector, (SourceConnector, SinkConnector))
        name = handle.validated.common.name
        try:
            return bool(
                call_with_timeout(
                    lambda: connector.alter_offsets(handle.validated.raw, offsets), f"alter offsets of {name}", name
                )
            )
        except ConfigError as exc:
            raise BadRequest(f"The connector {name} refused the offsets: {exc}") from exc

    # -- internals (called with the lock held) ------------------------------------------------------

    def _start_connector(self, name: str, handle: _ConnectorHandle) -> None:
        if handle.target is TargetState.STOPPED:
            self.status.put_connector(name, Status(State.STOPPED, self.worker_id))
            return
        if self._start_instance(name, handle):
            self._restart_tasks(name, handle)

    def _start_instance(self, name: str, handle: _ConnectorHandle) -> bool:
        self.worker.startups.connector_attempts += 1
        instance = self.worker.new_connector(handle.validated)
        try:
            instance.initialize(_ConnectorContext(self, name))
            call_with_timeout(lambda: instance.start(handle.validated.own), f"start connector {name}", name)
            max_tasks = handle.validated.common.tasks_max
            configs = call_with_timeout(lambda: instance.task_configs(max_tasks), f"compute task configs of {name}", name)
            if len(configs) > max_tasks and handle.validated.common.tasks_max_enforce:
                raise ConfigError(
                    f"Connector {name} generated {len(configs)} task configs, more than tasks.max={max_tasks}",
                    key="tasks.max",
                )
        except Exception as exc:
            log.error("Connector %s failed to start: %s", name, exc, exc_info=exc)
            self.worker.startups.connector_failures += 1
            handle.instance = instance
            handle.task_configs = []
            self._stop_instance(name, handle)
            self.status.put_connector(name, Status(State.FAILED, self.worker_id, trace=self._trace(name, exc)))
            return False
        handle.instance = instance
        # Stored and returned with the connector's placeholders, resolved again at task start.
        handle.task_configs = self.worker.reverse_transform(
            handle.validated, [{str(k): stringify(v) for k, v in c.items()} for c in configs]
        )
        state = State.PAUSED if handle.target is TargetState.PAUSED else State.RUNNING
        self.status.put_connector(name, Status(state, self.worker_id))
        return True

    def _stop_instance(self, name: str, handle: _ConnectorHandle) -> None:
        instance, handle.instance = handle.instance, None
        if instance is not None:
            try:
                call_with_timeout(instance.stop, f"stop connector {name}", name)
            except Exception:
                log.exception("Error stopping connector %s", name)

    def _restart_tasks(self, name: str, handle: _ConnectorHandle) -> None:
        self._stop_tasks(name, handle)
        for index in range(len(handle.task_configs)):
            self._start_task(name, handle, index)

    def _start_task(self, name: str, handle: _ConnectorHandle, index: int) -> None:
        task_id = ConnectorTaskId(name, index)
        target = TargetState.PAUSED if handle.target is TargetState.PAUSED else TargetState.STARTED
        try:
            runner = self.worker.build_task(task_id, handle.validated, handle.task_configs[index], self, target)
        except Exception as exc:
            log.error("Cannot create task %s: %s", task_id, exc, exc_info=exc)
            self.on_failure(task_id, exc)
            return
        handle.runners[index] = runner
        self.status.put_task(task_id, Status(State.UNASSIGNED, self.worker_id))
        runner.start()

    def _stop_tasks(self, name: str, handle: _ConnectorHandle) -> None:
        runners = list(handle.runners.values())
        handle.runners.clear()
        for runner in runners:
            runner.stop()
        deadline = time.monotonic() + self.worker.config.task_shutdown_graceful_timeout_ms / 1000
        for runner in runners:
            if not runner.await_stop(max(0.0, deadline - time.monotonic())):
                log.error("Graceful stop of task %s failed; abandoning it", runner.id)
        for runner in runners:
            self.status.forget_task(runner.id)
            handle.topics.update(runner.active_topics)

    def _stop_runner(self, runner: WorkerTask) -> None:
        runner.stop()
        if not runner.await_stop(self.worker.config.task_shutdown_graceful_timeout_ms / 1000):
            log.error("Graceful stop of task %s failed; abandoning it", runner.id)

    def _reconfigure(self, name: str) -> None:
        set_context(name)
        with self._lock:
            handle = self._connectors.get(name)
            if handle is None or handle.instance is None or handle.target is TargetState.STOPPED:
                return
            instance = handle.instance
            try:
                configs = instance.task_configs(handle.validated.common.tasks_max)
            except Exception as exc:
                self._connector_failed(name, exc)
                return
            new = self.worker.reverse_transform(
                handle.validated, [{str(k): stringify(v) for k, v in c.items()} for c in configs]
            )
            if new != handle.task_configs:
                log.info("Task configs of %s changed; restarting its tasks", name)
                handle.task_configs = new
                self._restart_tasks(name, handle)

    def _connector_failed(self, name: str, error: BaseException) -> None:
        log.error("Connector %s raised an error: %s", name, error)
        self.status.put_connector(name, Status(State.FAILED, self.worker_id, trace=self._trace(name, error)))

    def _trace(self, name: str, error: BaseException) -> str:
        """The status trace of ``error`` with the connector's secret values blanked out."""
        handle = self._connectors.get(name)
        raw = handle.validated.raw if handle is not None else {}
        keys = handle.secret_keys if handle is not None else set()
        return mask_text(scrub_secrets(format_trace(error), raw, keys))

    # -- TaskStatusListener (TaskStatusReporting) ----------------------------------------------------

    def _live_runner(self, task_id: ConnectorTaskId) -> WorkerTask | None:
        handle = self._connectors.get(task_id.connector)
        return handle.runners.get(task_id.task) if handle is not None else None

    def _restarts_allowed(self, task_id: ConnectorTaskId) -> bool:
        return not self._stopped and task_id.connector in self._connectors
