"""The one herder core: every rule of the :class:`~sluice.worker.herder.api.Herder` façade, once.

:class:`HerderCore` is both herders. It holds the rules — validation of a config before it is
stored, what a create, update, pause, stop or delete writes, which instances a restart restarts and
what it answers, that offsets change only while a connector is STOPPED, how statuses and tracked
topics are read — over three parts that differ between the modes:

* a :class:`~sluice.worker.herder.stores.config_store.ConfigStore` (memory in standalone, the config topic in a
  cluster), the only place a change is written;
* a :class:`~sluice.worker.herder.stores.status_store.StatusStore` (memory, or the status topic);
* an :class:`~sluice.worker.herder.strategy.AssignmentStrategy`: what runs here, and who writes.

The work running here follows the store (:class:`~sluice.worker.herder.work.HostedWork`), on the
herder's tick thread and, when the strategy says writes are ``inline`` (standalone), right after
the write on the caller's thread, so the answer already shows the change. Parts of the worker that
live as long as the herder (:class:`HerderPart`: the backfill manager) start once the stores are up
and stop before them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol
from urllib.parse import quote

from confluent_kafka.admin import AdminClient

from sluice.connectors.api import AlreadyExistsError, ConfigError, NotFoundError
from sluice.plugins import PluginInfo, PluginKind
from sluice.worker.config.connector_scope import check_group_unique
from sluice.worker.config.infos import check_connectivity
from sluice.worker.config.masking import mask_config, mask_text, secret_values
from sluice.worker.herder.api import (
    HEALTH_TIMEOUT_S,
    ClusterView,
    ConnectorInfo,
    ConnectorStateInfo,
    Forbidden,
    Health,
    Herder,
    TaskInfo,
)
from sluice.worker.herder.calls import merge_patch, request_config, restore_masked_secrets
from sluice.worker.herder.cluster_probe import PEER_TIMEOUT_S, PeerAnswer, ask_peers, health_of, own_health
from sluice.worker.herder.dead_letters import DeadLetters
from sluice.worker.herder.live_tap import LiveTap
from sluice.worker.herder.metrics_history import HistoryRequests
from sluice.worker.herder.offsets import OffsetRequests
from sluice.worker.herder.plugins import PluginCatalog
from sluice.worker.herder.stores.config_store import CONNECTOR, ConfigSnapshot, ConfigStore, Item
from sluice.worker.herder.stores.status_store import StatusStore
from sluice.worker.herder.strategy import AssignmentStrategy
from sluice.worker.herder.work import HostedWork
from sluice.worker.observability.history import ConnectorHistory
from sluice.worker.observability.logcontext import clear_context
from sluice.worker.restarts import TaskRestarter
from sluice.worker.status import ConnectorTaskId, State, Status, TargetState
from sluice.worker.worker import Worker

log = logging.getLogger(__name__)

#: The tick thread's pause after a tick that failed.
TICK_S = 0.5

_VERBS = {TargetState.STARTED: "resume", TargetState.PAUSED: "pause", TargetState.STOPPED: "stop"}


def _path(name: str, suffix: str = "") -> str:
    return f"/connectors/{quote(name, safe='')}{suffix}"


class HerderPart(Protocol):
    """A part of the worker that lives as long as its herder: started once the herder's stores are
    up, stopped before they stop (the backfill manager, whose jobs may live in the cluster's topic)."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


def security_settings(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The security settings among a client's ``producer.``/``consumer.``/``admin.`` keys."""
    return {k: v for k, v in overrides.items() if k.startswith(("security.", "ssl.", "sasl."))}


class HerderCore(Herder):
    """The herder of either mode: see the module's docstring."""

    def __init__(
        self,
        worker: Worker,
        store: ConfigStore,
        status: StatusStore,
        strategy: AssignmentStrategy,
        parts: Sequence[HerderPart] = (),
    ) -> None:
        self.worker = worker
        self.configs = store
        self.status = status
        self.strategy = strategy
        self.restarter = TaskRestarter(worker.config.restart_policy)
        self.catalog = PluginCatalog(worker)
        self._wake = threading.Event()
        self.work = HostedWork(worker, store, status, strategy, self.restarter, self.catalog, self.wakeup)
        self.offsets = OffsetRequests(worker, store, strategy, self.catalog)
        self.dead_letter_queues = DeadLetters(worker, store)
        self.live_tap = LiveTap(worker, store, strategy)
        config = worker.config
        self.history = ConnectorHistory(config.metrics_history_interval_ms, config.metrics_history_span_ms)
        self.history_requests = HistoryRequests(self.history, store, strategy)
        self._lock = self.work.lock
        self._started = threading.Event()
        self._stop_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._cluster_id: str | None = None
        #: When the tick thread last finished a tick, and how long a tick (or, standalone, an
        #: operation holding the herder) may take before ``GET /health`` calls the worker unhealthy.
        self._ticked_at = time.monotonic()
        self.health_timeout_s = HEALTH_TIMEOUT_S
        self._parts = (*parts, self.history)

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> None:
        self.worker.offset_store.start()
        self.status.start()
        self.configs.start()
        self.work.skip_past_restarts(self.configs.snapshot())
        self.strategy.start()
        self._thread = threading.Thread(target=self._run, name="herder-tick", daemon=True)
        self._thread.start()
        self._started.set()
        for part in self._parts:
            try:
                part.start()
            except Exception:  # the connectors run on without it; its own API reports what is missing
                log.exception("Could not start %s", type(part).__name__)
        log.info("Herder started as worker %s", self.worker_id)

    def stop(self) -> None:
        # Not the herder's lock: a tick may hold it for as long as a connector takes to start.
        with self._stop_lock:
            if self.work.stopping.is_set():
                return
            self.work.stopping.set()
        self._wake.set()
        for part in self._parts:
            try:
                part.stop()
            except Exception:
                log.exception("Could not stop %s", type(part).__name__)
        if self._thread is not None:
            self._thread.join(30)
        self.restarter.close()
        self.work.stop_all()
        # Leave the group first, so the others rebalance at once rather than after the session timeout.
        self.strategy.stop()
        self.configs.stop()
        self.status.stop()
        self.worker.offset_store.stop()
        log.info("Herder stopped")

    def wakeup(self) -> None:
        """Have the tick thread tick now."""
        self._wake.set()

    @property
    def ready(self) -> bool:
        return self._started.is_set() and not self.work.stopping.is_set()

    @property
    def lock(self) -> threading.RLock:
        """Held while the herder changes the work running here."""
        return self._lock

    @property
    def ticked_at(self) -> float:
        return self._ticked_at

    def health(self) -> Health:
        return replace(self.strategy.health(self), details={"sandbox": self.worker.sandbox.describe()})

    @property
    def worker_id(self) -> str:
        return self.strategy.worker_id

    def worker_settings(self) -> Mapping[str, Any]:
        return dict(self.worker.config.raw)

    def kafka_cluster_id(self) -> str | None:
        if self._cluster_id is None:
            config = self.worker.config
            try:
                admin = AdminClient(
                    {"bootstrap.servers": config.bootstrap_servers, **security_settings(config.prefixed("admin."))}
                )
                self._cluster_id = admin.list_topics(timeout=5).cluster_id
            except Exception as exc:  # noqa: BLE001 - the cluster id is optional; logged
                log.debug("Cannot read the Kafka cluster id: %s", exc)
        return self._cluster_id

    def set_cluster_logger_level(self, name: str, level: str) -> None:
        self.strategy.set_cluster_logger_level(name, level)

    def rebalance_metrics(self) -> Mapping[str, float]:
        return self.strategy.rebalance_metrics()

    def cluster_view(self) -> ClusterView:
        return self.strategy.cluster_view()

    def connector_history(self, name: str, span_ms: int | None = None) -> dict[str, Any]:
        return self.history_requests.of(name, span_ms)

    def cluster_health(self, view: ClusterView) -> dict[str, dict[str, str]]:
        healths = {view.worker_id: own_health(self.health())}
        for answer in self.ask_workers(view, "/health", PEER_TIMEOUT_S):
            healths[answer.worker.id] = health_of(answer)
        return healths

    def ask_workers(self, view: ClusterView, path: str, timeout_s: float) -> list[PeerAnswer]:
        return ask_peers(self.strategy, [w for w in view.workers if w.id != view.worker_id], path, timeout_s)

    def _run(self) -> None:
        while not self.work.stopping.is_set():
            self._wake.wait(self.strategy.next_tick_s())
            self._wake.clear()
            if self.work.stopping.is_set():
                return
            try:
                clear_context()
                self._tick()
            except Exception:
                log.exception("Herder tick failed; retrying")
                time.sleep(TICK_S)
            self._ticked_at = time.monotonic()

    def _tick(self) -> None:
        if not self.strategy.tick():
            if self.work.has_work():
                self.work.stop_all()
            return
        self.work.tick()

    def _written(self) -> None:
        """A change is in the store: apply it here now if the strategy says writes are inline."""
        if self.strategy.inline:
            self.work.settle()

    # -- reads ---------------------------------------------------------------------------------------------

    @staticmethod
    def _config_of(snapshot: ConfigSnapshot, name: str) -> dict[str, Any]:
        raw = snapshot.connectors.get(name)
        if raw is None:
            raise NotFoundError(f"Connector {name} not found")
        return raw

    def connectors(self) -> list[str]:
        return sorted(self.configs.snapshot().connectors)

    def connector_info(self, name: str) -> ConnectorInfo:
        snapshot = self.configs.snapshot()
        raw = self._config_of(snapshot, name)
        tasks = list(range(len(snapshot.task_configs.get(name, ()))))
        return ConnectorInfo(
            name,
            mask_config(raw, self.catalog.secret_keys(raw), connector=name),
            tasks,
            self.catalog.connector_type(raw),
        )

    def connector_config(self, name: str) -> dict[str, Any]:
        raw = self._config_of(self.configs.snapshot(), name)
        return mask_config(raw, self.catalog.secret_keys(raw), connector=name)

    def task_configs(self, name: str) -> list[TaskInfo]:
        snapshot = self.configs.snapshot()
        raw = self._config_of(snapshot, name)
        keys = self.catalog.secret_keys(raw)
        # A task config may quote the connector's secrets under keys of its own (a URL it built).
        known = secret_values(raw, keys)
        return [
            TaskInfo(name, i, mask_config(c, keys, connector=name, known=known))
            for i, c in enumerate(snapshot.task_configs.get(name, ()))
        ]

    def _status_of(self, snapshot: ConfigSnapshot, item: Item) -> Status:
        name, task = item
        status = self.status.connector(name) if task == CONNECTOR else self.status.task(ConnectorTaskId(name, task))
        return status or Status(State.UNASSIGNED, self.strategy.owner(snapshot, item))

    def connector_status(self, name: str) -> ConnectorStateInfo:
        snapshot = self.configs.snapshot()
        raw = self._config_of(snapshot, name)
        connector = self._status_of(snapshot, (name, CONNECTOR))
        tasks = [
            {"id": n, **self._status_of(snapshot, (name, n)).to_json()}
            for n in range(len(snapshot.task_configs.get(name, ())))
        ]
        return ConnectorStateInfo(name, connector.to_json(), tasks, self.catalog.connector_type(raw))

    def _check_task(self, snapshot: ConfigSnapshot, name: str, task: int) -> None:
        self._config_of(snapshot, name)
        if not 0 <= task < len(snapshot.task_configs.get(name, ())):
            raise NotFoundError(f"Task {name}-{task} not found")

    def task_status(self, name: str, task: int) -> dict[str, Any]:
        snapshot = self.configs.snapshot()
        self._check_task(snapshot, name, task)
        return {"id": task, **self._status_of(snapshot, (name, task)).to_json()}

    def _check_topic_tracking(self, key: str, message: str) -> None:
        if str(self.worker.config.raw.get(key, "true")).strip().lower() == "false":
            raise Forbidden(message)

    def connector_topics(self, name: str) -> list[str]:
        self._check_topic_tracking("topic.tracking.enable", "Topic tracking is disabled.")
        self._config_of(self.configs.snapshot(), name)
        # Every worker's (published to the status store), and what tasks here used since.
        return sorted(self.status.topics(name) | self.work.live_topics(name))

    def reset_connector_topics(self, name: str) -> None:
        self._check_topic_tracking("topic.tracking.enable", "Topic tracking is disabled.")
        self._check_topic_tracking("topic.tracking.allow.reset", "Topic tracking reset is disabled.")
        self._config_of(self.configs.snapshot(), name)
        self.work.reset_live_topics(name)
        self.status.reset_topics(name)

    # -- writes (performed by the worker the strategy names; others forward them) ------------------------------

    def put_connector_config(
        self,
        name: str,
        config: Mapping[str, Any],
        *,
        allow_replace: bool,
        initial_state: TargetState = TargetState.STARTED,
    ) -> tuple[bool, ConnectorInfo]:
        raw = request_config(name, config)
        leader = self.strategy.leader_url()
        if leader is not None:
            if allow_replace:
                status, body = self.strategy.forward(leader, "PUT", _path(name, "/config"), body=raw, want_object=True)
            else:
                state = {TargetState.STARTED: "RUNNING"}.get(initial_state, initial_state.value)
                request = {"name": name, "config": raw, "initial_state": state}
                status, body = self.strategy.forward(leader, "POST", "/connectors", body=request, want_object=True)
            return status == 201, _info_from_json(body)
        current = self.configs.snapshot().connectors.get(name)
        if current is not None:
            restore_masked_secrets(raw, current, self.catalog.secret_keys(current))
        validated = self.worker.validate(raw)
        if current is not None and not allow_replace:
            raise AlreadyExistsError(f"Connector {name} already exists")
        if validated.plugin.kind is PluginKind.SINK:
            check_group_unique(name, raw, self.configs.snapshot().connectors)
        _check_on_create(validated, self.worker.exactly_once_problems(validated))
        self.configs.put_connector_config(name, raw, initial_state=initial_state if current is None else None)
        self._written()
        tasks = list(range(len(self.configs.snapshot().task_configs.get(name, ()))))
        log.info("%s connector %s (%s)", "Updated" if current else "Created", name, validated.plugin.class_name)
        self.worker.warn_ignored_keys(validated)
        return current is None, ConnectorInfo(
            name, mask_config(raw, self.catalog.secret_keys(raw), connector=name), tasks, validated.type
        )

    def patch_connector_config(self, name: str, patch: Mapping[str, Any]) -> ConnectorInfo:
        leader = self.strategy.leader_url()
        if leader is not None:
            _, body = self.strategy.forward(leader, "PATCH", _path(name, "/config"), body=dict(patch), want_object=True)
            return _info_from_json(body)
        merged = merge_patch(self._config_of(self.configs.snapshot(), name), patch)
        _, info = self.put_connector_config(name, merged, allow_replace=True)
        return info

    def delete_connector(self, name: str) -> None:
        leader = self.strategy.leader_url()
        if leader is not None:
            self.strategy.forward(leader, "DELETE", _path(name))
            return
        self._config_of(self.configs.snapshot(), name)
        self.configs.remove_connector_config(name)
        self._written()
        log.info("Deleted connector %s", name)

    def set_target_state(self, name: str, state: TargetState) -> None:
        leader = self.strategy.leader_url()
        if leader is not None:
            self.strategy.forward(leader, "PUT", _path(name, f"/{_VERBS[state]}"))
            return
        snapshot = self.configs.snapshot()
        self._config_of(snapshot, name)
        if snapshot.target_state(name) is state:
            return
        # As Connect: a stopped connector has no tasks; they are generated again when it resumes.
        self.configs.put_target_state(name, state, task_configs=[] if state is TargetState.STOPPED else None)
        self._written()

    def restart_connector(self, name: str) -> None:
        leader = self.strategy.leader_url()
        if leader is not None:
            self.strategy.forward(leader, "POST", _path(name, "/restart"))
            return
        self._config_of(self.configs.snapshot(), name)
        self.configs.put_restart_request(name, only_failed=False, include_tasks=False)
        self._written()

    def restart_connector_and_tasks(self, name: str, *, include_tasks: bool, only_failed: bool) -> ConnectorStateInfo:
        """KIP-745: the answer shows what the restart restarts as ``RESTARTING``; the owners of those
        instances perform it on their tick threads (this call does not wait)."""
        leader = self.strategy.leader_url()
        if leader is not None:
            params = {"includeTasks": str(include_tasks).lower(), "onlyFailed": str(only_failed).lower()}
            _, body = self.strategy.forward(leader, "POST", _path(name, "/restart"), params=params, want_object=True)
            return ConnectorStateInfo(body["name"], body["connector"], body["tasks"], body["type"])
        snapshot = self.configs.snapshot()
        self._config_of(snapshot, name)
        planned = self.connector_status(name)
        if snapshot.target_state(name) is TargetState.STOPPED:
            return planned
        if not only_failed or planned.connector.get("state") == State.FAILED.value:
            planned.connector = {**planned.connector, "state": State.RESTARTING.value}
        if include_tasks:
            planned.tasks = [
                {**t, "state": State.RESTARTING.value} if not only_failed or t.get("state") == State.FAILED.value else t
                for t in planned.tasks
            ]
        self.configs.put_restart_request(name, only_failed=only_failed, include_tasks=include_tasks)
        return planned

    def restart_task(self, name: str, task: int) -> None:
        snapshot = self.configs.snapshot()
        self._check_task(snapshot, name, task)
        owner = self.strategy.owner(snapshot, (name, task))
        if owner == self.worker_id:
            self.work.restart_task(ConnectorTaskId(name, task))
            return
        self.strategy.forward_to_owner(snapshot, owner, "POST", _path(name, f"/tasks/{task}/restart"))

    def put_task_configs(self, name: str, body: bytes, signature: str | None, algorithm: str | None) -> None:
        """Internal (a cluster): the worker running connector ``name`` hands its task configs to the leader."""
        self.strategy.accept_task_configs(name, body, signature, algorithm)

    # -- offsets (KIP-875) and plugins ---------------------------------------------------------------------------

    def connector_offsets(self, name: str) -> list[dict[str, Any]]:
        return self.offsets.get(name)

    def alter_connector_offsets(self, name: str, entries: list[dict[str, Any]]) -> str:
        return self.offsets.alter(name, entries)

    def reset_connector_offsets(self, name: str) -> str:
        return self.offsets.reset(name)

    def dead_letters(self, name: str, partition: int, offset: int | None, limit: int) -> dict[str, Any]:
        return self.dead_letter_queues.page(name, partition, offset, limit)

    def redrive_dead_letters(self, name: str, partition: int, first: int, last: int, max_redrives: int) -> dict[str, Any]:
        return self.dead_letter_queues.redrive(name, partition, first, last, max_redrives)

    def tap(self, name: str, count: int, timeout_s: float) -> dict[str, Any]:
        return self.live_tap.sample(name, count, timeout_s)

    def fence_zombies(self, name: str) -> None:
        """Fence every instance of the source connector's tasks — a zombie on a frozen or cut-off
        worker included — so none can commit a transaction again, then restart the live ones (they
        come back with a new epoch and read the committed offsets). Any worker can: fencing is a
        Kafka call, not a write to the config topic."""
        info = self.connector_info(name)
        if info.type != "source":
            raise ConfigError(
                f"Connector {name} is a {info.type} connector: only source tasks have transactional producers to fence"
            )
        if self.worker.config.source_transactions_topic() is None:
            raise ConfigError(
                "Exactly-once source support is not enabled on this worker (exactly.once.source.support=enabled "
                "on a distributed worker): its source tasks have no transactional producers to fence",
                key="exactly.once.source.support",
            )
        self.worker.builder.fence_source_tasks(name, len(info.tasks))
        if info.tasks:
            self.restart_connector_and_tasks(name, include_tasks=True, only_failed=False)

    def plugins(self) -> list[PluginInfo]:
        return self.catalog.plugins()

    def connector_plugin_config(self, plugin: str) -> list[dict[str, Any]]:
        return self.catalog.connector_plugin_config(plugin)

    def validate_connector_config(self, plugin: str, config: Mapping[str, Any]) -> dict[str, Any]:
        return self.catalog.validate_connector_config(plugin, config)


def _info_from_json(body: Any) -> ConnectorInfo:
    return ConnectorInfo(
        str(body.get("name")),
        dict(body.get("config") or {}),
        [int(t["task"]) for t in body.get("tasks") or []],
        str(body.get("type")),
    )


def _check_on_create(validated: Any, exactly_once: Mapping[str, list[str]]) -> None:
    """Refuse the config when the worker or the connector refuses its exactly-once keys
    (``exactly_once``) or the connector's ``validate_on_create`` names problems (Debezium's database
    checks), as Connect refuses a config whose validation found errors: nothing is stored, and the
    answer lists every problem."""
    name = str(validated.raw.get("name", ""))
    errors = [(key, mask_text(message, name)) for key, messages in exactly_once.items() for message in messages]
    errors += check_connectivity(validated.plugin.cls, validated.own, on_create=True).items()
    if errors:
        listed = "\n".join(f"{key}: {message}" for key, message in errors)
        problems: dict[str, str] = {}
        for key, message in errors:
            problems[key] = f"{problems[key]} {message}" if key in problems else message
        raise ConfigError(
            f"Connector configuration is invalid and contains the following {len(errors)} error(s):\n{listed}\n"
            "You can also find the above list of errors at the endpoint "
            "`/connector-plugins/{connectorType}/config/validate`",
            key=errors[0][0],
            problems=problems,
        )
