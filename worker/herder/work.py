"""The connectors and tasks that run on this worker, made to match the config store.

:meth:`HostedWork.apply` is the one place that starts and stops connector instances and tasks, in
both modes. Given a snapshot of the store and the share of it that is this worker's
(:meth:`AssignmentStrategy.mine <sluice.worker.herder.strategy.AssignmentStrategy.mine>`), it

1. stops what is no longer ours, deleted, stopped, reconfigured, or whose task config changed;
2. starts what is ours and not running, and follows target-state changes (a started connector
   generates its task configs, which go back to the store and start its tasks on the next pass);
3. performs restart requests (``restart-connector-<c>`` records) for what runs here.

It is called with :attr:`HostedWork.lock` held: by the herder's tick thread, and, in a standalone
worker, by the REST thread that wrote to the store (so the answer shows the change made).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sluice.connectors.api import ConfigError, ConnectError, Connector, SourceConnector
from sluice.offsets import StoreOffsetReader
from sluice.plugins import PluginKind
from sluice.worker.config.connect_task_configs import as_connect_task_configs
from sluice.worker.config.masking import mask_text, scrub_secrets
from sluice.worker.herder.calls import call_with_timeout, stringify
from sluice.worker.herder.plugins import PluginCatalog
from sluice.worker.herder.reporting import StatusReporter
from sluice.worker.herder.stores.config_store import CONNECTOR, ConfigSnapshot, ConfigStore, Item
from sluice.worker.herder.stores.status_store import StatusStore
from sluice.worker.herder.strategy import AssignmentStrategy
from sluice.worker.observability.logcontext import set_context
from sluice.worker.restarts import TaskRestarter
from sluice.worker.runners import TaskRunner
from sluice.worker.status import ConnectorTaskId, State, Status, TargetState, format_trace
from sluice.worker.worker import ValidatedConnector, Worker

log = logging.getLogger(__name__)

#: How many passes a standalone write may take to settle (config → instance → task configs → tasks).
SETTLE_PASSES = 5


@dataclass
class _RunningConnector:
    version: int
    target: TargetState
    validated: ValidatedConnector | None = None
    instance: Connector | None = None  # None: it failed to start (status says why)


@dataclass
class _RunningTask:
    runner: TaskRunner
    config: dict[str, Any]
    target: TargetState
    #: the connector config's version the task started with: a new config restarts the task even
    #: when its generated task config is unchanged (converters, transforms, error handling change)
    version: int = 0


class _ConnectorContext:
    """What a connector instance may ask of its herder."""

    def __init__(self, work: HostedWork, name: str) -> None:
        self._work = work
        self._name = name
        self.offset_reader = StoreOffsetReader(work.worker.offset_store, name)

    def request_task_reconfiguration(self) -> None:
        self._work.request_reconfiguration(self._name)

    def raise_error(self, error: BaseException) -> None:
        self._work.connector_failed(self._name, error)


class HostedWork:
    """This worker's running connector instances and tasks; see the module's docstring."""

    def __init__(
        self,
        worker: Worker,
        store: ConfigStore,
        status: StatusStore,
        strategy: AssignmentStrategy,
        restarter: TaskRestarter,
        catalog: PluginCatalog,
        wakeup: Callable[[], None],
    ) -> None:
        self.worker = worker
        self.store = store
        self.status = status
        self.strategy = strategy
        self.restarter = restarter
        self.catalog = catalog
        self._wakeup = wakeup
        self.lock = threading.RLock()
        self.stopping = threading.Event()
        self._connectors: dict[str, _RunningConnector] = {}
        self._tasks: dict[ConnectorTaskId, _RunningTask] = {}
        self._track_topics = str(worker.config.raw.get("topic.tracking.enable", "true")).strip().lower() != "false"
        self._topic_resets: set[str] = set()  # connectors whose topics another worker reset
        self._reset_lock = threading.Lock()
        self._pending_task_configs: dict[str, list[dict[str, Any]]] = {}
        #: task configs a connector here generated and the store does not show yet: its tasks here
        #: wait for them rather than start with the old ones and restart at once
        self._generated: dict[str, list[dict[str, Any]]] = {}
        self._reconfigure_requested: set[str] = set()
        self._handled_restarts: dict[str, int] = {}
        self.reporter = StatusReporter(
            worker_id=strategy.worker_id,
            status=status,
            restarter=restarter,
            startups=worker.startups,
            trace=self.trace,
            live_runner=self._live_runner,
            restarts_allowed=self._restarts_allowed,
            auto_restart=self._auto_restart,
            may_report=strategy.may_report,
        )

    @property
    def worker_id(self) -> str:
        return self.strategy.worker_id

    # -- called by the herder core ------------------------------------------------------------------------

    def skip_past_restarts(self, snapshot: ConfigSnapshot) -> None:
        """Restart requests already in the store were handled before this worker started."""
        self._handled_restarts = {name: seq for name, (seq, _, _) in snapshot.restarts.items()}

    def tick(self) -> None:
        """One pass of the tick thread."""
        with self.lock:
            # Read under the lock: a standalone write may have been applied while this waited for it.
            snapshot = self.store.snapshot()
            self.apply(snapshot)
            self._apply_topic_resets()
            self.publish_topics(self._tasks.items())
        self._retry_task_configs(snapshot)

    def settle(self) -> None:
        """Apply the store until it stops changing (a standalone write, on the caller's thread)."""
        with self.lock:
            for _ in range(SETTLE_PASSES):
                snapshot = self.store.snapshot()
                self.apply(snapshot)
                if self.store.snapshot().sequence == snapshot.sequence:
                    return

    def stop_all(self) -> None:
        with self.lock:
            self._stop_tasks(list(self._tasks), forget=False)
            for name in list(self._connectors):
                self._stop_connector(name)

    def has_work(self) -> bool:
        return bool(self._tasks or self._connectors)

    def restart_task(self, task_id: ConnectorTaskId) -> None:
        """A restart requested over REST of a task that runs here: a fresh restart budget too."""
        with self.lock:
            self.restarter.reset(task_id)
            self._stop_tasks([task_id], forget=False)
            self._start_task(task_id, self.store.snapshot())

    def live_topics(self, name: str) -> set[str]:
        """The topics the running tasks of ``name`` have used and not yet published."""
        topics: set[str] = set()
        with self.lock:
            for task_id, running in self._tasks.items():
                if task_id.connector == name:
                    topics.update(running.runner.active_topics)
        return topics

    def reset_live_topics(self, name: str) -> None:
        with self.lock:
            for task_id, running in self._tasks.items():
                if task_id.connector == name:
                    running.runner.reset_active_topics()

    def topics_reset(self, connector: str) -> None:
        """A worker reset the connector's topics (or deleted it): tasks here start recording afresh.
        Runs on the status reader, which must not wait for the herder: the next tick does it."""
        with self._reset_lock:
            self._topic_resets.add(connector)
        self._wakeup()

    def request_reconfiguration(self, name: str) -> None:
        self._reconfigure_requested.add(name)
        self._wakeup()

    def connector_failed(self, name: str, error: BaseException) -> None:
        log.error("Connector %s raised an error: %s", name, error)
        self.status.put_connector(name, Status(State.FAILED, self.worker_id, trace=self.trace(name, error)))

    def trace(self, name: str, error: BaseException) -> str:
        """The status trace of ``error`` with the connector's secret values blanked out."""
        raw = self.store.snapshot().connectors.get(name, {})
        return mask_text(scrub_secrets(format_trace(error), raw, self.catalog.secret_keys(raw)), name)

    # -- making this worker's work match the store ---------------------------------------------------------

    def apply(self, snapshot: ConfigSnapshot) -> None:
        mine = self.strategy.mine(snapshot)
        self._stop_obsolete(snapshot, mine)
        self._start_connectors(snapshot, mine)
        self._start_tasks(snapshot, mine)
        for name, (sequence, only_failed, include_tasks) in snapshot.restarts.items():
            if self._handled_restarts.get(name, 0) >= sequence:
                continue
            self._handled_restarts[name] = sequence
            self._perform_restart(name, only_failed, include_tasks, mine, snapshot)

    def _stop_obsolete(self, snapshot: ConfigSnapshot, mine: set[Item]) -> None:
        for name, running in list(self._connectors.items()):
            deleted = name not in snapshot.connectors
            if (
                deleted
                or (name, CONNECTOR) not in mine
                or snapshot.target_state(name) is TargetState.STOPPED
                or snapshot.versions.get(name) != running.version
            ):
                self._stop_connector(name)
                if deleted:
                    self.status.forget(name)
        obsolete: list[ConnectorTaskId] = []
        for task_id, running_task in self._tasks.items():
            configs = snapshot.task_configs.get(task_id.connector, [])
            if (
                (task_id.connector, task_id.task) not in mine
                or task_id.connector not in snapshot.connectors
                or task_id.task >= len(configs)
                or configs[task_id.task] != running_task.config
                or snapshot.versions.get(task_id.connector) != running_task.version
            ):
                obsolete.append(task_id)
        if obsolete:
            self._stop_tasks(obsolete, forget=True)
        for name in {t.connector for t in obsolete} | set(self._connectors):
            if name not in snapshot.connectors:
                self.status.forget(name)

    def _start_connectors(self, snapshot: ConfigSnapshot, mine: set[Item]) -> None:
        for name in sorted(c for c, t in mine if t == CONNECTOR):
            if name not in snapshot.connectors:
                continue
            target = snapshot.target_state(name)
            if target is TargetState.STOPPED:
                current = self.status.connector(name)
                if current is None or current.state is not State.STOPPED or current.worker_id != self.worker_id:
                    self.status.put_connector(name, Status(State.STOPPED, self.worker_id))
                continue
            live = self._connectors.get(name)
            if live is None:
                self._start_connector(name, snapshot)
            elif live.target is not target and live.instance is not None:
                live.target = target
                state = State.PAUSED if target is TargetState.PAUSED else State.RUNNING
                self.status.put_connector(name, Status(state, self.worker_id))
            if name in self._reconfigure_requested:
                self._reconfigure_requested.discard(name)
                self._generate_task_configs(name, snapshot)

    def _start_tasks(self, snapshot: ConfigSnapshot, mine: set[Item]) -> None:
        for name, task in sorted(i for i in mine if i[1] != CONNECTOR):
            task_id = ConnectorTaskId(name, task)
            target = snapshot.target_state(name)
            if name not in snapshot.connectors or target is TargetState.STOPPED:
                continue
            if task >= len(snapshot.task_configs.get(name, [])) or self._awaiting_configs(name, snapshot):
                continue
            live_task = self._tasks.get(task_id)
            if live_task is None:
                self._start_task(task_id, snapshot)
            elif live_task.target is not target:
                live_task.target = target
                live_task.runner.transition_to(TargetState.PAUSED if target is TargetState.PAUSED else TargetState.STARTED)

    def _awaiting_configs(self, name: str, snapshot: ConfigSnapshot) -> bool:
        generated = self._generated.get(name)
        if generated is None:
            return False
        if generated == snapshot.task_configs.get(name) or name not in self._connectors:
            del self._generated[name]
            return False
        return True

    def _perform_restart(
        self, name: str, only_failed: bool, include_tasks: bool, mine: set[Item], snapshot: ConfigSnapshot
    ) -> None:
        if name not in snapshot.connectors or snapshot.target_state(name) is TargetState.STOPPED:
            return
        if (name, CONNECTOR) in mine:
            status = self.status.connector(name)
            if not only_failed or (status is not None and status.state is State.FAILED):
                log.info("Restarting connector %s on request", name)
                self._stop_connector(name)
                self._start_connector(name, snapshot)
        if not include_tasks:
            return
        restart = []
        for task_id in [t for t in self._tasks if t.connector == name]:
            status = self.status.task(task_id)
            if not only_failed or (status is not None and status.state in (State.FAILED, State.RESTARTING)):
                restart.append(task_id)
        if restart:
            log.info("Restarting %d task(s) of %s on request", len(restart), name)
            for task_id in restart:
                self.restarter.reset(task_id)
            self._stop_tasks(restart, forget=False)
            for task_id in restart:
                self._start_task(task_id, snapshot)

    # -- connector instances ---------------------------------------------------------------------------------

    def _validated(self, name: str, snapshot: ConfigSnapshot) -> ValidatedConnector:
        running = self._connectors.get(name)
        if running is not None and running.validated is not None and running.version == snapshot.versions.get(name):
            return running.validated
        return self.worker.validate(snapshot.connectors[name])

    def _start_connector(self, name: str, snapshot: ConfigSnapshot) -> None:
        set_context(name)
        target = snapshot.target_state(name)
        running = _RunningConnector(version=snapshot.versions.get(name, 0), target=target)
        self._connectors[name] = running
        instance: Connector | None = None
        self.worker.startups.connector_attempts += 1
        try:
            running.validated = validated = self.worker.validate(snapshot.connectors[name])
            self.worker.use_offsets_topic(validated)
            instance = self.worker.new_connector(validated)
            instance.initialize(_ConnectorContext(self, name))
            started = instance
            call_with_timeout(lambda: started.start(validated.own), f"start connector {name}", name)
        except Exception as exc:
            log.error("Connector %s failed to start: %s", name, exc, exc_info=exc)
            self.worker.startups.connector_failures += 1
            if instance is not None:
                self._stop_instance(name, instance)
            self.status.put_connector(name, Status(State.FAILED, self.worker_id, trace=self.trace(name, exc)))
            return
        running.instance = instance
        state = State.PAUSED if target is TargetState.PAUSED else State.RUNNING
        self.status.put_connector(name, Status(state, self.worker_id))
        log.info("Started connector %s", name)
        self._generate_task_configs(name, snapshot)

    def _generate_task_configs(self, name: str, snapshot: ConfigSnapshot) -> None:
        running = self._connectors.get(name)
        if running is None or running.instance is None or running.validated is None:
            return
        instance, validated = running.instance, running.validated
        max_tasks = validated.common.tasks_max
        try:
            configs = call_with_timeout(lambda: instance.task_configs(max_tasks), f"compute task configs of {name}", name)
            if len(configs) > max_tasks and validated.common.tasks_max_enforce:
                raise ConfigError(
                    f"Connector {name} generated {len(configs)} task configs, more than tasks.max={max_tasks}", key="tasks.max"
                )
        except Exception as exc:  # noqa: BLE001 - a connector's bug fails that connector, not the herder
            self.connector_failed(name, exc)
            return
        # Stored with the connector's placeholders (resolved again at task start) and with the keys a
        # Connect worker adds, so both modes answer alike and a Connect cluster can take the tasks over.
        generated = self.worker.reverse_transform(validated, [{str(k): stringify(v) for k, v in c.items()} for c in configs])
        stored = as_connect_task_configs(validated.plugin, validated.raw, generated)
        if stored != snapshot.task_configs.get(name):
            self._generated[name] = stored
            self._submit_task_configs(name, stored, snapshot)

    def _submit_task_configs(self, name: str, configs: list[dict[str, Any]], snapshot: ConfigSnapshot) -> None:
        self._pending_task_configs.pop(name, None)
        try:
            self._fence_previous_tasks(name, snapshot)
            self.strategy.submit_task_configs(name, configs, snapshot)
        except (ConnectError, OSError) as exc:
            log.info("Could not hand the task configs of %s to the leader yet (%s); retrying", name, exc)
            self._pending_task_configs[name] = configs

    def _fence_previous_tasks(self, name: str, snapshot: ConfigSnapshot) -> None:
        """Exactly-once sources (KIP-618's fencing round): before new task configs of a source
        connector are written, every task of the previous generation is fenced, so none of them — a
        zombie on a frozen worker included — can commit after a task of the new one has read its
        offsets. (A new task fences its own predecessor when it starts; this covers the others.)"""
        previous = snapshot.task_configs.get(name) or []
        running = self._connectors.get(name)
        if previous and running is not None and running.validated is not None:
            if issubclass(running.validated.connector_class, SourceConnector):
                self.worker.builder.fence_source_tasks(name, len(previous))

    def _retry_task_configs(self, snapshot: ConfigSnapshot) -> None:
        with self.lock:
            pending = dict(self._pending_task_configs)
        for name, configs in pending.items():
            running = self._connectors.get(name)
            if running is None or running.instance is None or snapshot.task_configs.get(name) == configs:
                self._pending_task_configs.pop(name, None)
                continue
            with self.lock:
                self._submit_task_configs(name, configs, snapshot)

    def _stop_connector(self, name: str) -> None:
        running = self._connectors.pop(name, None)
        self._pending_task_configs.pop(name, None)
        self._generated.pop(name, None)
        if running is None:
            return
        if running.instance is not None:
            self._stop_instance(name, running.instance)
        current = self.status.connector(name)
        if (
            self.strategy.acting
            and current is not None
            and current.worker_id == self.worker_id
            and current.state is not State.FAILED
        ):
            self.status.put_connector(name, Status(State.UNASSIGNED, self.worker_id))

    @staticmethod
    def _stop_instance(name: str, instance: Connector) -> None:
        try:
            call_with_timeout(instance.stop, f"stop connector {name}", name)
        except Exception:
            log.exception("Error stopping connector %s", name)

    # -- tasks -------------------------------------------------------------------------------------------------

    def _start_task(self, task_id: ConnectorTaskId, snapshot: ConfigSnapshot) -> None:
        set_context(task_id.connector, task_id.task)
        name = task_id.connector
        target = snapshot.target_state(name)
        config = snapshot.task_configs[name][task_id.task]
        try:
            validated = self._validated(name, snapshot)
            if validated.plugin.kind is PluginKind.SOURCE:
                # The previous owner's last offsets must be in memory before the task reads them.
                self.strategy.catch_up_offsets()
            runner = self.worker.build_task(
                task_id, validated, config, self.reporter, TargetState.PAUSED if target is TargetState.PAUSED else TargetState.STARTED
            )
        except Exception as exc:
            log.error("Cannot create task %s: %s", task_id, exc, exc_info=exc)
            self.reporter.on_failure(task_id, exc)
            return
        if self.strategy.fence is not None:
            runner.fence = self.strategy.fence
        self._tasks[task_id] = _RunningTask(runner, config, target, snapshot.versions.get(name, 0))
        self.status.put_task(task_id, Status(State.UNASSIGNED, self.worker_id))
        runner.start()
        log.info("Started task %s", task_id)

    def _stop_tasks(self, task_ids: list[ConnectorTaskId], *, forget: bool) -> None:
        running = [(t, self._tasks.pop(t)) for t in task_ids if t in self._tasks]
        for task_id, r in running:
            if forget:
                self.restarter.reset(task_id)
            r.runner.stop()
        deadline = time.monotonic() + self.worker.config.task_shutdown_graceful_timeout_ms / 1000
        for task_id, r in running:
            if not r.runner.await_stop(max(0.0, deadline - time.monotonic())):
                log.error("Graceful stop of task %s failed; abandoning it", task_id)
            self.publish_topics([(task_id, r)])
            current = self.status.task(task_id)
            if r.runner.failed and current is not None and current.worker_id == self.worker_id and self.strategy.acting:
                # A failed run never reports its shutdown: say it is not running here any more.
                self.status.put_task(task_id, Status(State.UNASSIGNED, self.worker_id))
            log.info("Stopped task %s", task_id)

    def publish_topics(self, tasks: Iterable[tuple[ConnectorTaskId, _RunningTask]]) -> None:
        """Record the topics the tasks have started to use in the status store, for every worker to answer with."""
        if not self._track_topics or not self.strategy.may_report():
            return
        for task_id, running in tasks:
            for topic in list(running.runner.active_topics):
                self.status.put_topic(task_id.connector, topic, task_id.task)

    def _apply_topic_resets(self) -> None:
        with self._reset_lock:
            connectors, self._topic_resets = self._topic_resets, set()
        for task_id, running in self._tasks.items():
            if task_id.connector in connectors:
                running.runner.reset_active_topics()

    # -- automatic restarts (the status reporter's callbacks) ----------------------------------------------------

    def _live_runner(self, task_id: ConnectorTaskId) -> TaskRunner | None:
        running = self._tasks.get(task_id)
        return running.runner if running else None

    def _restarts_allowed(self, task_id: ConnectorTaskId) -> bool:
        return not self.stopping.is_set() and task_id.connector in self.store.snapshot().connectors

    def _auto_restart(self, task_id: ConnectorTaskId, failed: TaskRunner | None) -> None:
        """Timer callback of :class:`TaskRestarter`: restart the task if it is still the failed run here."""
        set_context(task_id.connector, task_id.task)
        with self.lock:
            if self.stopping.is_set():
                return
            current = self._tasks.get(task_id)
            if (current.runner if current else None) is not failed:
                return  # restarted, moved or reconfigured meanwhile
            snapshot = self.store.snapshot()
            name = task_id.connector
            if (
                name not in snapshot.connectors
                or snapshot.target_state(name) is TargetState.STOPPED
                or task_id.task >= len(snapshot.task_configs.get(name, ()))
                or (name, task_id.task) not in self.strategy.mine(snapshot)
            ):
                return
            self._stop_tasks([task_id], forget=False)
            log.info("Restarting failed task %s automatically", task_id)
            self._start_task(task_id, snapshot)
