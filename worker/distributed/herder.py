"""The distributed herder: one member of a cluster of workers coordinated through Kafka.

Three threads matter:

* the **tick** thread (:meth:`DistributedHerder._tick`) — the only one that starts and stops
  connector instances and tasks on this worker. Every half second, or as soon as the config
  topic or the group changes, it (1) stops everything if the worker lost contact with the group,
  (2) if this worker is the leader, plans the assignment and writes it, (3) makes the work running
  here match the latest assignment, configs and target states, and (4) performs restart requests;
* the readers of the config, status and offset topics (:mod:`sluice.offsets.kafka_log`);
* the group membership thread (:mod:`sluice.worker.distributed.membership`).

REST calls run on the server's threads: reads come from this worker's copies of the topics;
writes are performed by the leader, so a follower forwards them (:mod:`sluice.worker.distributed.forwarding`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import orjson
from confluent_kafka.admin import AdminClient

from sluice.connectors.api import (
    ConfigError,
    ConnectError,
    Connector,
)
from sluice.offsets import StoreOffsetReader
from sluice.offsets.kafka import KafkaOffsetStore
from sluice.plugins import PluginKind
from sluice.worker.connect_task_configs import as_connect_task_configs
from sluice.worker.distributed.assignor import CONNECTOR, Item, plan
from sluice.worker.distributed.config import DistributedConfig
from sluice.worker.distributed.config_store import Assignment, ConfigSnapshot, ConfigStore
from sluice.worker.distributed.forwarding import (
    ALGORITHM,
    ALGORITHM_HEADER,
    SIGNATURE_HEADER,
    Forwarder,
    NoLeader,
    sign,
)
from sluice.worker.distributed.membership import GroupMembership
from sluice.worker.distributed.requests import ClusterRequests
from sluice.worker.distributed.status_store import KafkaStatusStore
from sluice.worker.herder import HEALTH_TIMEOUT_S, HEALTHY, STARTING, BadRequest, Health, Herder
from sluice.worker.herder_support import (
    PluginQueries,
    TaskStatusReporting,
    call_with_timeout,
    stringify,
)
from sluice.worker.log_levels import python_level
from sluice.worker.logcontext import clear_context, set_context
from sluice.worker.masking import mask_text
from sluice.worker.restarts import TaskRestarter
from sluice.worker.runners import WorkerTask
from sluice.worker.status import ConnectorTaskId, State, Status, TargetState, format_trace, scrub_secrets
from sluice.worker.worker import ValidatedConnector, Worker

log = logging.getLogger(__name__)

TICK_S = 0.5
MEMBERS_REFRESH_S = 0.5


@dataclass
class _RunningConnector:
    version: int
    target: TargetState
    validated: ValidatedConnector | None = None
    instance: Connector | None = None  # None: it failed to start (status says why)


@dataclass
class _RunningTask:
    runner: WorkerTask
    config: dict[str, Any]
    target: TargetState
    topics: set[str] = field(default_factory=set)


class _ConnectorContext:
    def __init__(self, herder: DistributedHerder, name: str) -> None:
        self._herder = herder
        self._name = name
        self.offset_reader = StoreOffsetReader(herder.worker.offset_store, name)

    def request_task_reconfiguration(self) -> None:
        self._herder._reconfigure_requested.add(self._name)
        self._herder.wakeup()

    def raise_error(self, error: BaseException) -> None:
        self._herder._connector_failed(self._name, error)


class DistributedHerder(TaskStatusReporting, PluginQueries, ClusterRequests, Herder):
    """Runs the share of the cluster's connectors and tasks that the leader assigns to this worker."""

    def __init__(self, worker: Worker, config: DistributedConfig) -> None:
        if not isinstance(worker.offset_store, KafkaOffsetStore):
            raise TypeError("A distributed worker keeps source offsets in Kafka (KafkaOffsetStore)")
        self.worker = worker
        self.config = config
        self.offset_store: KafkaOffsetStore = worker.offset_store
        self._worker_id = config.worker_id
        self.url = config.advertised_url
        client_id = config.client_id or f"sluice-{config.group_id}-{self._worker_id}"
        bootstrap = config.bootstrap_servers
        producer = config.prefixed("producer.")
        consumer = config.prefixed("consumer.")
        self.configs = ConfigStore(
            config.config_storage_topic, bootstrap, config.group_id, client_id=client_id, on_change=self.wakeup,
            producer_overrides=_security(producer), consumer_overrides=_security(consumer), sluice_topic=config.sluice_topic,
        )
        self.status: KafkaStatusStore = KafkaStatusStore(
            config.status_storage_topic, bootstrap, client_id=client_id, generation=self._generation,
            producer_overrides=_security(producer), consumer_overrides=_security(consumer),
            on_topic_reset=self._topics_reset,
        )
        self.membership = GroupMembership(
            bootstrap_servers=bootstrap,
            group_id=config.group_id,
            topic=config.config_storage_topic,
            worker_id=self._worker_id,
            url=self.url,
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            rebalance_timeout_ms=config.rebalance_timeout_ms,
            on_change=self.wakeup,
            overrides=_security(consumer),
        )
        cafile = config.raw.get("listeners.https.ssl.cafile")
        self.forwarder = Forwarder(verify_tls=str(cafile) if cafile else True)
        self.restarter = TaskRestarter(config.restart_policy)
        self._lock = threading.RLock()
        self._connectors: dict[str, _RunningConnector] = {}
        self._tasks: dict[ConnectorTaskId, _RunningTask] = {}
        self._track_topics = str(config.raw.get("topic.tracking.enable", "true")).strip().lower() != "false"
        self._topic_resets: set[str] = set()  # connectors whose topics another worker reset
        self._reset_lock = threading.Lock()
        self._pending_task_configs: dict[str, list[dict[str, Any]]] = {}
        self._reconfigure_requested: set[str] = set()
        self._handled_restarts: dict[str, int] = {}
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        self._in_contact = False
        self._members: list[Any] = []
        self._members_at = 0.0
        self._last_seen: dict[str, float] = {}  # worker → wall-clock time it was last in the group
        self._next_deadline: float | None = None  # wall clock: when the leader must plan again
        self._cluster_id: str | None = None
        #: ``GET /health``: when the tick thread last finished a tick, whether this worker has been
        #: in contact with its group yet, and how long a tick may take before the worker is unhealthy.
        self._ticked_at = time.monotonic()
        self._joined = False
        self.health_timeout_s = HEALTH_TIMEOUT_S
        #: Run once the stores are up / before they stop (the backfill manager: rest/routes/backfills.py).
        self.after_start: list[Callable[[], None]] = []
        self.before_stop: list[Callable[[], None]] = []

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        self.offset_store.start()
        self.status.start()
        self.configs.start()
        # Restart requests already in the topic were handled before this worker started.
        self._handled_restarts = {name: seq for name, (seq, _, _) in self.configs.snapshot().restarts.items()}
        self.membership.start()
        self._thread = threading.Thread(target=self._run, name="herder-tick", daemon=True)
        self._thread.start()
        self._started.set()
        for hook in self.after_start:
            try:
                hook()
            except Exception:
                log.exception("A start hook failed")
        log.info("Distributed herder started as worker %s in group %s", self._worker_id, self.config.group_id)

    def stop(self) -> None:
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._wake.set()
        for hook in self.before_stop:
            try:
                hook()
            except Exception:
                log.exception("A stop hook failed")
        if self._thread is not None:
            self._thread.join(30)
        self.restarter.close()
        with self._lock:
            self._stop_tasks(list(self._tasks), forget=False)
            for name in list(self._connectors):
                self._stop_connector(name)
        # Leave the group first, so the others rebalance at once rather than after the session timeout.
        self.membership.stop()
        self.configs.stop()
        self.status.stop()
        self.offset_store.stop()
        self.forwarder.close()
        log.info("Distributed herder stopped")

    def wakeup(self) -> None:
        self._wake.set()

    @property
    def ready(self) -> bool:
        return self._started.is_set() and not self._stopping.is_set()

    def health(self) -> Health:
        """KIP-1017: starting until the worker has first been in contact with its group; unhealthy
        when the tick thread has not finished a tick within :attr:`health_timeout_s`, or when the
        worker has lost contact with the Kafka cluster (it then runs no work)."""
        if not self.ready or not self._joined:
            return STARTING
        if not self.membership.in_contact:  # first: a tick that waits for Kafka is a symptom of this
            return Health(
                "unhealthy",
                f"Worker {self._worker_id} has lost contact with the Kafka cluster at {self.config.bootstrap_servers}: "
                f"it is not an active member of group {self.config.group_id}, so it runs no connectors or tasks.",
            )
        stalled = time.monotonic() - self._ticked_at
        if stalled > self.health_timeout_s:
            return Health(
                "unhealthy",
                f"The herder thread of worker {self._worker_id} has not completed a tick for {stalled:.1f} s "
                f"(limit {self.health_timeout_s:g} s); the worker may be unable to handle other requests.",
            )
        return HEALTHY

    @property
    def worker_id(self) -> str:
        return self._worker_id

    def rebalance_metrics(self) -> dict[str, float]:
        """Connect's ``connect-worker-rebalance-metrics`` (numeric attributes) for ``GET /metrics``."""
        membership = self.membership
        assigned_at = membership.assigned_at
        return {
            "completed-rebalances-total": membership.completed_rebalances,
            "rebalancing": 0 if membership.in_contact else 1,
            "epoch": self._generation(),
            "time-since-last-rebalance-ms": -1 if assigned_at is None else max(0.0, (time.time() - assigned_at) * 1000),
        }

    def backfill_cluster(self) -> dict[str, Any]:
        """Where backfill jobs live in this cluster and who fires schedules (:meth:`BackfillManager.for_cluster`)."""
        return {
            # Not the config topic, whose unknown keys a Connect worker logs as errors (read for
            # the jobs an earlier Sluice kept there).
            "topic": self.config.sluice_topic,
            "legacy_topic": self.config.config_storage_topic,
            "bootstrap_servers": self.config.bootstrap_servers,
            "client_id": self.config.client_id or f"sluice-{self.config.group_id}-{self._worker_id}",
            "worker_id": self._worker_id,
            "is_leader": lambda: self.membership.is_leader,
            "producer_overrides": _security(self.config.prefixed("producer.")),
            "consumer_overrides": _security(self.config.prefixed("consumer.")),
        }

    def kafka_cluster_id(self) -> str | None:
        if self._cluster_id is None:
            try:
                admin = AdminClient({"bootstrap.servers": self.config.bootstrap_servers, **_security(self.config.prefixed("admin."))})
                self._cluster_id = admin.list_topics(timeout=5).cluster_id
            except Exception as exc:
                log.debug("Cannot read the Kafka cluster id: %s", exc)
        return self._cluster_id

    def set_cluster_logger_level(self, name: str, level: str) -> None:
        """KIP-976: a ``logger-cluster-<name>`` record in the config topic, which every worker
        (this one included, before this returns) applies as it reads it."""
        if python_level(level) is None:
            raise BadRequest(f"Invalid log level '{level}'.")
        self.configs.put_logger_level(name, level.strip().upper(), timeout=self.config.worker_sync_timeout_ms / 1000 + 10)

    # -- the tick thread ---------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            wait = TICK_S
            if self._next_deadline is not None:
                wait = max(0.01, min(wait, self._next_deadline - time.time()))
            self._wake.wait(wait)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                clear_context()
                self._tick()
            except Exception:
                log.exception("Herder tick failed; retrying")
                time.sleep(TICK_S)
            self._ticked_at = time.monotonic()

    def _tick(self) -> None:
        if not self.membership.in_contact:
            if self._in_contact:
                log.warning("Lost contact with group %s: stopping the work of this worker until it rejoins", self.config.group_id)
            self._in_contact = False
            self.configs.resign()
            with self._lock:
                if self._tasks or self._connectors:
                    self._stop_tasks(list(self._tasks), forget=False)
                    for name in list(self._connectors):
                        self._stop_connector(name)
            return
        if not self._in_contact:
            # (Re)joined: catch up before acting, so we never act on an assignment older than the group's.
            self.configs.read_to_end(self.config.worker_sync_timeout_ms / 1000)
            self._in_contact = True
            self._joined = True
            log.info("In contact with group %s", self.config.group_id)
        if self.membership.is_leader:
            self._lead()
        else:
            # What this worker saw of the group as an earlier leader is stale by its next term:
            # a departed worker's delay must not run from a sighting made before.
            self._last_seen.clear()
            if self.configs.is_writer:
                self.configs.resign()
        snapshot = self.configs.snapshot()
        with self._lock:
            self._apply(snapshot)
            self._apply_topic_resets()
            self._publish_topics(self._tasks.items())
        self._retry_task_configs(snapshot)

    def _publish_topics(self, tasks: Iterable[tuple[ConnectorTaskId, _RunningTask]]) -> None:
        """Record the topics the tasks have started to use in the status topic, for every worker to answer with."""
        if not self._track_topics or not self._may_report():
            return
        for task_id, running in tasks:
            for topic in list(running.runner.active_topics):
                self.status.put_topic(task_id.connector, topic, task_id.task)

    def _topics_reset(self, connector: str) -> None:
        """A worker reset the connector's topics (or deleted it): tasks here start recording afresh.
        Runs on the status reader, which must not wait for the herder: the next tick does it."""
        with self._reset_lock:
            self._topic_resets.add(connector)
        self.wakeup()

    def _apply_topic_resets(self) -> None:
        with self._reset_lock:
            connectors, self._topic_resets = self._topic_resets, set()
        for task_id, running in self._tasks.items():
            if task_id.connector in connectors:
                running.runner.reset_active_topics()

    # -- leader work ---------------------------------------------------------------------------------------

    def _ensure_writer(self) -> bool:
        if not self.membership.is_leader:
            return False
        if not self.configs.is_writer:
            self.configs.become_leader(self.config.worker_sync_timeout_ms / 1000 + 10)
            log.info("Became the leader of group %s", self.config.group_id)
        return True

    def _lead(self) -> None:
        if not self._ensure_writer():
            return
        now = time.monotonic()
        if now - self._members_at >= MEMBERS_REFRESH_S or not self._members:
            self._members = self.membership.members()
            self._members_at = now
        live = {m.worker_id: m.url for m in self._members}
        live.setdefault(self._worker_id, self.url)
        snapshot = self.configs.snapshot()
        previous = snapshot.assignment
        wall = time.time()
        for worker in live:
            self._last_seen[worker] = wall
        # The delay of a departed worker runs from the last time the group had it, not from when
        # this leader noticed (or took over): a leader that never saw it (the departed worker
        # was the leader) knows it was there until the rebalance that made this worker leader.
        departed = dict(previous.departed) if previous else {}
        joined = self.membership.assigned_at
        for worker in previous.owners if previous else {}:
            if worker not in live and worker not in departed:
                seen = self._last_seen.get(worker, joined)
                if seen is not None:
                    departed[worker] = min(seen, wall)
        result = plan(
            previous.owners if previous else {},
            live,
            snapshot.wanted_items(),
            now=wall,
            delay_s=self.config.scheduled_rebalance_max_delay_ms / 1000,
            departed=departed,
            revoking=previous.revoking if previous else {},
            revocation_done=self._revocation_done,
            revocation_timeout_s=self.config.rebalance_timeout_ms / 1000,
        )
        self._next_deadline = result.next_deadline
        urls = {w: u for w, u in (previous.urls if previous else {}).items() if w in result.owners}
        urls.update(live)
        proposed = Assignment(
            generation=previous.generation if previous else 0,
            leader=self._worker_id,
            leader_url=self.url,
            owners=result.owners,
            revoking=result.revoking,
            departed=result.departed,
            urls=urls,
        )
        if previous is not None and _same(previous, proposed):
            return
        proposed.generation += 1
        self.configs.write_assignment(proposed)
        log.info(
            "Assignment generation %d: %s",
            proposed.generation,
            ", ".join(f"{w}={len(i)}" for w, i in sorted(proposed.owners.items())) or "no workers",
        )

    def _revocation_done(self, item: Item, worker: str) -> bool:
        name, task = item
        status = self.status.connector(name) if task == CONNECTOR else self.status.task(ConnectorTaskId(name, task))
        return status is None or status.worker_id != worker or status.state in (State.UNASSIGNED, State.FAILED, State.STOPPED)

    # -- making this worker's work match the assignment --------------------------------------------------

    def _generation(self) -> int:
        assignment = self.configs.snapshot().assignment
        return assignment.generation if assignment else 0

    def _apply(self, snapshot: ConfigSnapshot) -> None:
        assignment = snapshot.assignment
        mine = assignment.items_of(self._worker_id) if assignment else set()

        # 1. Stop what is no longer ours, deleted, stopped, or reconfigured.
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
            ):
                obsolete.append(task_id)
        if obsolete:
            self._stop_tasks(obsolete, forget=True)
        for name in {t.connector for t in obsolete} | set(self._connectors):
            if name not in snapshot.connectors:
                self.status.forget(name)

        # 2. Start what is ours and not running; follow target-state changes.
        for name in sorted(c for c, t in mine if t == CONNECTOR):
            if name not in snapshot.connectors:
                continue
            target = snapshot.target_state(name)
            if target is TargetState.STOPPED:
                current = self.status.connector(name)
                if current is None or current.state is not State.STOPPED or current.worker_id != self._worker_id:
                    self.status.put_connector(name, Status(State.STOPPED, self._worker_id))
                continue
            live = self._connectors.get(name)
            if live is None:
                self._start_connector(name, snapshot)
            elif live.target is not target and live.instance is not None:
                live.target = target
                state = State.PAUSED if target is TargetState.PAUSED else State.RUNNING
                self.status.put_connector(name, Status(state, self._worker_id))
            if name in self._reconfigure_requested:
                self._reconfigure_requested.discard(name)
                self._generate_task_configs(name, snapshot)
        for name, task in sorted(i for i in mine if i[1] != CONNECTOR):
            task_id = ConnectorTaskId(name, task)
            target = snapshot.target_state(name)
            if name not in snapshot.connectors or target is TargetState.STOPPED:
                continue
            configs = snapshot.task_configs.get(name, [])
            if task >= len(configs):
                continue
            live_task = self._tasks.get(task_id)
            if live_task is None:
                self._start_task(task_id, snapshot)
            elif live_task.target is not target:
                live_task.target = target
                live_task.runner.transition_to(TargetState.PAUSED if target is TargetState.PAUSED else TargetState.STARTED)

        # 3. Restart requests (restart-connector-<c> records), performed by the owners.
        for name, (sequence, only_failed, include_tasks) in snapshot.restarts.items():
            if self._handled_restarts.get(name, 0) >= sequence:
                continue
            self._handled_restarts[name] = sequence
            self._perform_restart(name, only_failed, include_tasks, mine, snapshot)

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
            running.validated = self.worker.validate(snapshot.connectors[name])
            instance = self.worker.new_connector(running.validated)
            instance.initialize(_ConnectorContext(self, name))
            validated = running.validated
            call_with_timeout(lambda: instance.start(validated.own), f"start connector {name}", name)  # type: ignore[union-attr]
        except Exception as exc:
            log.error("Connector %s failed to start: %s", name, exc, exc_info=exc)
            self.worker.startups.connector_failures += 1
            if instance is not None:
                self._stop_instance(name, instance)
            self.status.put_connector(name, Status(State.FAILED, self._worker_id, trace=self._trace(name, exc)))
            return
        running.instance = instance
        state = State.PAUSED if target is TargetState.PAUSED else State.RUNNING
        self.status.put_connector(name, Status(state, self._worker_id))
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
        except Exception as exc:
            self._connector_failed(name, exc)
            return
        generated = self.worker.reverse_transform(validated, [{str(k): stringify(v) for k, v in c.items()} for c in configs])
        # Stored with the keys a Connect worker adds, so a Connect cluster can take these tasks over.
        stored = as_connect_task_configs(validated.plugin, validated.raw, generated)
        if stored != snapshot.task_configs.get(name):
            self._submit_task_configs(name, stored, snapshot)

    def _submit_task_configs(self, name: str, configs: list[dict[str, Any]], snapshot: ConfigSnapshot) -> None:
        """Hand new task configs to the leader (or write them, as the leader)."""
        self._pending_task_configs.pop(name, None)
        try:
            if self._ensure_writer():
                self.configs.write(ConfigStore.task_records(name, configs), wait_visible=False)
                log.info("Wrote %d task config(s) of %s", len(configs), name)
                return
            assignment = snapshot.assignment
            key = snapshot.session_key
            if assignment is None or key is None or assignment.leader == self._worker_id:
                raise NoLeader()
            body = orjson.dumps(configs)
            self.forwarder.send(
                assignment.leader_url,
                "POST",
                f"/connectors/{quote(name, safe='')}/tasks",
                body=body,
                extra_headers={SIGNATURE_HEADER: sign(key, body), ALGORITHM_HEADER: ALGORITHM},
            )
            log.info("Sent %d task config(s) of %s to the leader", len(configs), name)
        except (ConnectError, OSError) as exc:
            log.info("Could not hand the task configs of %s to the leader yet (%s); retrying", name, exc)
            self._pending_task_configs[name] = configs

    def _retry_task_configs(self, snapshot: ConfigSnapshot) -> None:
        with self._lock:
            pending = dict(self._pending_task_configs)
        for name, configs in pending.items():
            running = self._connectors.get(name)
            if running is None or running.instance is None:
                self._pending_task_configs.pop(name, None)
                continue
            if snapshot.task_configs.get(name) == configs:
                self._pending_task_configs.pop(name, None)
                continue
            with self._lock:
                self._submit_task_configs(name, configs, snapshot)

    def _stop_connector(self, name: str) -> None:
        running = self._connectors.pop(name, None)
        self._pending_task_configs.pop(name, None)
        if running is None:
            return
        if running.instance is not None:
            self._stop_instance(name, running.instance)
        current = self.status.connector(name)
        if self._in_contact and current is not None and current.worker_id == self._worker_id and current.state is not State.FAILED:
            self.status.put_connector(name, Status(State.UNASSIGNED, self._worker_id))

    def _stop_instance(self, name: str, instance: Connector) -> None:
        try:
            call_with_timeout(instance.stop, f"stop connector {name}", name)
        except Exception:
            log.exception("Error stopping connector %s", name)

    def _start_task(self, task_id: ConnectorTaskId, snapshot: ConfigSnapshot) -> None:
        set_context(task_id.connector, task_id.task)
        name = task_id.connector
        target = snapshot.target_state(name)
        config = snapshot.task_configs[name][task_id.task]
        try:
            validated = self._validated(name, snapshot)
            if validated.plugin.kind is PluginKind.SOURCE:
                # The previous owner's last offsets must be in memory before the task reads them.
                self.offset_store.read_to_end(self.config.worker_sync_timeout_ms / 1000 + 10)
            runner = self.worker.build_task(
                task_id, validated, config, self, TargetState.PAUSED if target is TargetState.PAUSED else TargetState.STARTED
            )
        except Exception as exc:
            log.error("Cannot create task %s: %s", task_id, exc, exc_info=exc)
            self.on_failure(task_id, exc)
            return
        runner.fence = self._fence
        self._tasks[task_id] = _RunningTask(runner, config, target)
        self.status.put_task(task_id, Status(State.UNASSIGNED, self._worker_id))
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
            self._publish_topics([(task_id, r)])
            current = self.status.task(task_id)
            if r.runner.failed and current is not None and current.worker_id == self._worker_id and self._in_contact:
                # A failed run never reports its shutdown: say it is not running here any more.
                self.status.put_task(task_id, Status(State.UNASSIGNED, self._worker_id))
            log.info("Stopped task %s", task_id)

    def _fence(self) -> bool:
        """Whether tasks may keep writing: only while this worker is in contact with its group."""
        return self.membership.in_contact

    def _auto_restart(self, task_id: ConnectorTaskId, failed: WorkerTask | None) -> None:
        set_context(task_id.connector, task_id.task)
        with self._lock:
            if self._stopping.is_set():
                return
            current = self._tasks.get(task_id)
            if (current.runner if current else None) is not failed:
                return  # restarted, moved or reconfigured meanwhile
            snapshot = self.configs.snapshot()
            assignment = snapshot.assignment
            if assignment is None or (task_id.connector, task_id.task) not in assignment.items_of(self._worker_id):
                return
            self._stop_tasks([task_id], forget=False)
            log.info("Restarting failed task %s automatically", task_id)
            self._start_task(task_id, snapshot)

    def _connector_failed(self, name: str, error: BaseException) -> None:
        log.error("Connector %s raised an error: %s", name, error)
        self.status.put_connector(name, Status(State.FAILED, self._worker_id, trace=self._trace(name, error)))

    def _trace(self, name: str, error: BaseException) -> str:
        raw = self.configs.snapshot().connectors.get(name, {})
        return mask_text(scrub_secrets(format_trace(error), raw, self._secret_keys(raw)))

    # -- TaskStatusListener (TaskStatusReporting) ----------------------------------------------------

    def _live_runner(self, task_id: ConnectorTaskId) -> WorkerTask | None:
        running = self._tasks.get(task_id)
        return running.runner if running else None

    def _restarts_allowed(self, task_id: ConnectorTaskId) -> bool:
        return not self._stopping.is_set()

    def _may_report(self) -> bool:
        # Out of contact our view is stale: the task's new owner reports its status.
        return self.membership.in_contact


def _same(a: Assignment, b: Assignment) -> bool:
    def owners(x: Assignment) -> dict[str, set[Item]]:
        return {w: set(i) for w, i in x.owners.items() if i}

    return (
        a.leader == b.leader
        and a.leader_url == b.leader_url
        and owners(a) == owners(b)
        and set(a.owners) == set(b.owners)
        and {i: w for i, (w, _) in a.revoking.items()} == {i: w for i, (w, _) in b.revoking.items()}
        and set(a.departed) == set(b.departed)
        and a.urls == b.urls
    )


def _security(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The security settings of the worker's clients (``producer.``/``consumer.`` keys) for internal clients."""
    return {k: v for k, v in overrides.items() if k.startswith(("security.", "ssl.", "sasl."))}
