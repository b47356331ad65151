"""The assignment strategy of a cluster: consumer-group membership, the leader's plan, forwarding.

Every worker of the group reads the config topic; one of them, the group's leader, is its only
writer. The leader plans who runs what (:mod:`sluice.worker.distributed.assignor`) and writes the
plan; every worker runs the share the plan gives it. A REST write reaching a follower is forwarded
to the leader with the caller's credentials, and a follower hands the task configs its connectors
generate to the leader in a request signed with the cluster's session key
(:mod:`sluice.worker.distributed.forwarding`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import orjson

from sluice.connectors.api import NotFoundError
from sluice.offsets.connector_topics import OffsetTopics
from sluice.worker.distributed.assignor import CONNECTOR, Item, plan
from sluice.worker.distributed.config import DistributedConfig
from sluice.worker.distributed.forwarding import (
    ALGORITHM,
    ALGORITHM_HEADER,
    SIGNATURE_HEADER,
    ForwardedError,
    Forwarder,
    is_forwarded,
    sign,
    verify,
)
from sluice.worker.distributed.membership import GroupMembership
from sluice.worker.herder.api import (
    HEALTHY,
    STARTING,
    BadRequest,
    ClusterView,
    ClusterWorker,
    Forbidden,
    Health,
    NoLeader,
)
from sluice.worker.herder.stores.config_store import ConfigSnapshot
from sluice.worker.herder.stores.kafka_config_store import Assignment, ClusterSnapshot, KafkaConfigStore
from sluice.worker.herder.stores.status_store import StatusStore
from sluice.worker.herder.strategy import HerderState
from sluice.worker.observability.log_levels import python_level
from sluice.worker.status import ConnectorTaskId, State

log = logging.getLogger(__name__)

TICK_S = 0.5
MEMBERS_REFRESH_S = 0.5


def assignment_of(snapshot: ConfigSnapshot) -> Assignment | None:
    """The leader's assignment as of ``snapshot`` (a cluster's store keeps it beside the configs)."""
    return snapshot.assignment if isinstance(snapshot, ClusterSnapshot) else None


class ClusterAssignment:
    """A cluster member's :class:`~sluice.worker.herder.strategy.AssignmentStrategy`."""

    inline = False

    def __init__(
        self,
        config: DistributedConfig,
        configs: KafkaConfigStore,
        status: StatusStore,
        membership: GroupMembership,
        offset_store: OffsetTopics,
        running: Callable[[], bool],
    ) -> None:
        self.config = config
        self.configs = configs
        self.status = status
        self.membership = membership
        self.offset_store = offset_store
        self._running = running
        self._worker_id = config.worker_id
        self.url = config.advertised_url
        cafile = config.raw.get("listeners.https.ssl.cafile")
        self.forwarder = Forwarder(verify_tls=str(cafile) if cafile else True)
        self.fence: Callable[[], bool] | None = self._in_contact_now
        self._acting = False
        #: Whether this worker has been in contact with its group yet (``GET /health``).
        self.joined = False
        self._members: list[Any] = []
        self._members_at = 0.0
        self._last_seen: dict[str, float] = {}  # worker → wall-clock time it was last in the group
        self._next_deadline: float | None = None  # wall clock: when the leader must plan again

    @property
    def worker_id(self) -> str:
        return self._worker_id

    @property
    def acting(self) -> bool:
        return self._acting

    def start(self) -> None:
        self.membership.start()

    def stop(self) -> None:
        self.membership.stop()
        self.forwarder.close()

    def generation(self) -> int:
        assignment = self.configs.snapshot().assignment
        return assignment.generation if assignment else 0

    def _in_contact_now(self) -> bool:
        """Whether tasks may keep writing: only while this worker is in contact with its group."""
        return self.membership.in_contact

    def may_report(self) -> bool:
        # Out of contact our view is stale: the task's new owner reports its status.
        return self.membership.in_contact

    # -- the tick ------------------------------------------------------------------------------------------

    def next_tick_s(self) -> float:
        if self._next_deadline is None:
            return TICK_S
        return max(0.01, min(TICK_S, self._next_deadline - time.time()))

    def tick(self) -> bool:
        if not self.membership.in_contact:
            if self._acting:
                log.warning("Lost contact with group %s: stopping the work of this worker until it rejoins", self.config.group_id)
            self._acting = False
            self.configs.resign()
            return False
        if not self._acting:
            # (Re)joined: catch up before acting, so we never act on an assignment older than the group's.
            self.configs.read_to_end(self.config.worker_sync_timeout_ms / 1000)
            self._acting = True
            self.joined = True
            log.info("In contact with group %s", self.config.group_id)
        if self.membership.is_leader:
            self._lead()
        else:
            # What this worker saw of the group as an earlier leader is stale by its next term:
            # a departed worker's delay must not run from a sighting made before.
            self._last_seen.clear()
            if self.configs.is_writer:
                self.configs.resign()
        return True

    def _ensure_writer(self) -> bool:
        if not self.membership.is_leader:
            return False
        if not self.configs.is_writer:
            self.configs.become_leader(self.config.worker_sync_timeout_ms / 1000 + 10)
            log.info("Became the leader of group %s", self.config.group_id)
        return True

    def _live_members(self) -> dict[str, str] | None:
        """The live workers, ``None`` when the group's membership is not known now (no plan then)."""
        now = time.monotonic()
        if now - self._members_at >= MEMBERS_REFRESH_S or not self._members:
            members = self.membership.members()
            if members is None:
                return None
            self._members = members
            self._members_at = now
        live = {m.worker_id: m.url for m in self._members}
        live.setdefault(self._worker_id, self.url)
        return live

    def _lead(self) -> None:
        if not self._ensure_writer():
            return
        live = self._live_members()
        if live is None:
            # Contact with the coordinator is not steady (or a request is still out): as when the
            # request fails, no plan from what may be stale. The deadline comes back with the next
            # plan; kept, a past one would have the herder tick every 10 ms meanwhile.
            self._next_deadline = None
            return
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

    # -- who runs what ---------------------------------------------------------------------------------------

    def mine(self, snapshot: ConfigSnapshot) -> set[Item]:
        assignment = assignment_of(snapshot)
        return assignment.items_of(self._worker_id) if assignment else set()

    def owner(self, snapshot: ConfigSnapshot, item: Item) -> str:
        assignment = assignment_of(snapshot)
        owner = None
        if assignment is not None:
            owner = next((w for w, items in assignment.owners.items() if item in items), None)
        return owner or ""

    def peer_urls(self, snapshot: ConfigSnapshot, name: str) -> list[str]:
        assignment = assignment_of(snapshot)
        if assignment is None or is_forwarded():
            return []
        return sorted(
            assignment.urls[worker]
            for worker, items in assignment.owners.items()
            if worker != self._worker_id and worker in assignment.urls and any(c == name and t >= 0 for c, t in items)
        )

    def cluster_view(self) -> ClusterView:
        """From the leader's latest assignment, which every member reads from the config topic, so
        any worker answers alike once it has caught up: the workers the plan counts live (a
        departed worker whose work is held for its return is left out) and the leader that wrote
        it. No request to the group coordinator: a REST call must not wait on it."""
        assignment = self.configs.snapshot().assignment
        if assignment is None:
            return ClusterView("distributed", self._worker_id, None, [ClusterWorker(self._worker_id, self.url)])
        urls = {w: assignment.urls.get(w, "") for w in assignment.owners if w not in assignment.departed}
        urls.setdefault(assignment.leader, assignment.leader_url)
        urls.setdefault(self._worker_id, self.url)  # joined since the plan: a member all the same
        workers = [ClusterWorker(w, u, leader=w == assignment.leader) for w, u in sorted(urls.items())]
        return ClusterView("distributed", self._worker_id, assignment.leader, workers)

    # -- who writes -------------------------------------------------------------------------------------------

    def leader_url(self) -> str | None:
        if not self._running():
            raise NoLeader()
        if self._ensure_writer():
            return None
        if is_forwarded():
            raise NoLeader()  # a forwarded request reached a worker that is not the leader (any more)
        assignment = self.configs.snapshot().assignment
        if assignment is None or assignment.leader == self._worker_id or not assignment.leader_url:
            raise NoLeader()
        return assignment.leader_url

    def forward(
        self, url: str, method: str, path: str, *, body: Any = None, params: Mapping[str, str] | None = None, want_object: bool = False
    ) -> tuple[int, Any]:
        status, answer = self.forwarder.send(url, method, path, body=body, params=params)
        if want_object and not isinstance(answer, dict):
            raise ForwardedError(502, f"The leader answered with an unexpected body: {answer!r}")
        return status, answer

    def peek(self, url: str, path: str, timeout_s: float) -> tuple[int, bytes]:
        return self.forwarder.peek(url, path, timeout_s=timeout_s)

    def forward_to_owner(self, snapshot: ConfigSnapshot, owner: str, method: str, path: str) -> None:
        assignment = assignment_of(snapshot)
        url = assignment.urls.get(owner) if assignment and owner else None
        if not url or is_forwarded():
            raise NoLeader("Cannot restart the task now: it is being reassigned; retry in a moment")
        self.forwarder.send(url, method, path)

    def submit_task_configs(self, name: str, configs: list[dict[str, Any]], snapshot: ConfigSnapshot) -> None:
        """Write them as the leader, or send them to the leader signed with the session key."""
        if self._ensure_writer():
            self.configs.put_task_configs(name, configs)
            log.info("Wrote %d task config(s) of %s", len(configs), name)
            return
        assignment = assignment_of(snapshot)
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

    def accept_task_configs(self, name: str, body: bytes, signature: str | None, algorithm: str | None) -> None:
        """The leader's side of :meth:`submit_task_configs`."""
        snapshot = self.configs.snapshot()
        if algorithm not in (None, ALGORITHM):
            raise BadRequest(f"Unsupported request signature algorithm {algorithm}")
        if not verify(snapshot.session_key, body, signature):
            raise Forbidden("Internal request missing or carrying an invalid signature")
        if not self._ensure_writer():
            raise NoLeader()
        if name not in snapshot.connectors:
            raise NotFoundError(f"Connector {name} not found")
        try:
            configs = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"Task configs are not valid JSON: {exc}") from None
        if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
            raise BadRequest("Task configs must be a JSON array of objects")
        if configs != snapshot.task_configs.get(name):
            self.configs.put_task_configs(name, configs)
            log.info("Wrote %d task config(s) of %s", len(configs), name)

    def catch_up_offsets(self) -> None:
        self.offset_store.read_to_end(self.config.worker_sync_timeout_ms / 1000 + 10)

    # -- the rest ----------------------------------------------------------------------------------------------

    def health(self, herder: HerderState) -> Health:
        """KIP-1017: starting until the worker has first been in contact with its group; unhealthy
        when the tick thread has not finished a tick within ``health_timeout_s``, or when the
        worker has lost contact with the Kafka cluster (it then runs no work)."""
        if not herder.ready or not self.joined:
            return STARTING
        if not self.membership.in_contact:  # first: a tick that waits for Kafka is a symptom of this
            return Health(
                "unhealthy",
                f"Worker {self._worker_id} has lost contact with the Kafka cluster at {self.config.bootstrap_servers}: "
                f"it is not an active member of group {self.config.group_id}, so it runs no connectors or tasks "
                f"({self.membership.client_state()}).",
            )
        stalled = time.monotonic() - herder.ticked_at
        if stalled > herder.health_timeout_s:
            return Health(
                "unhealthy",
                f"The herder thread of worker {self._worker_id} has not completed a tick for {stalled:.1f} s "
                f"(limit {herder.health_timeout_s:g} s); the worker may be unable to handle other requests.",
            )
        return HEALTHY

    def set_cluster_logger_level(self, name: str, level: str) -> None:
        """KIP-976: a ``logger-cluster-<name>`` record in the config topic, which every worker
        (this one included, before this returns) applies as it reads it."""
        if python_level(level) is None:
            raise BadRequest(f"Invalid log level '{level}'.")
        self.configs.put_logger_level(name, level.strip().upper(), timeout=self.config.worker_sync_timeout_ms / 1000 + 10)

    def rebalance_metrics(self) -> dict[str, float]:
        """Connect's ``connect-worker-rebalance-metrics`` (numeric attributes) for ``GET /metrics``."""
        membership = self.membership
        assigned_at = membership.assigned_at
        return {
            "completed-rebalances-total": membership.completed_rebalances,
            "rebalancing": 0 if membership.in_contact else 1,
            "epoch": self.generation(),
            "time-since-last-rebalance-ms": -1 if assigned_at is None else max(0.0, (time.time() - assigned_at) * 1000),
        }


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
