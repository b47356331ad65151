"""Who runs what, and who writes: the part of a herder that differs between the two modes.

The :class:`~sluice.worker.herder.core.HerderCore` asks its :class:`AssignmentStrategy` four
things: which connectors and tasks run *here* (:meth:`~AssignmentStrategy.mine`), who owns one
that runs elsewhere, whether this worker may write to the config store or must forward the
request to the one that may (the leader), and whether its view of the cluster is current.
:class:`LocalAssignment` answers for a standalone worker — everything runs here and every write is
performed here, on the caller's thread; the consumer-group strategy of a cluster is
:class:`~sluice.worker.distributed.cluster.ClusterAssignment`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from sluice.connectors.api import ConnectError
from sluice.worker.herder.api import HEALTHY, STARTING, BadRequest, ClusterView, ClusterWorker, Forbidden, Health
from sluice.worker.herder.kafka_contact import KafkaContact
from sluice.worker.herder.stores.config_store import ConfigSnapshot, ConfigStore, Item
from sluice.worker.observability.log_levels import LOGGER_LEVELS, python_level


class HerderState(Protocol):
    """What a strategy reads of its herder to answer ``GET /health``."""

    @property
    def ready(self) -> bool: ...

    @property
    def lock(self) -> threading.RLock: ...

    @property
    def ticked_at(self) -> float:
        """``time.monotonic()`` when the herder's tick thread last finished a tick."""

    health_timeout_s: float


class AssignmentStrategy(Protocol):
    """How a herder shares out work and writes; see the module's docstring."""

    #: ``True``: a write takes effect on the caller's thread before the call returns (the core
    #: applies it at once); ``False``: the tick thread applies it once the store has it.
    inline: bool

    #: Called by a task before each write when set: ``False`` fences it (a cluster member that lost
    #: its group must not write what the task's new owner writes too).
    fence: Callable[[], bool] | None

    @property
    def worker_id(self) -> str: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def next_tick_s(self) -> float:
        """How long the tick thread may sleep before its next tick if nothing wakes it."""

    def tick(self) -> bool:
        """Group and leader work before the tick applies the store; ``False``: this worker must run
        nothing now (it lost its group)."""

    @property
    def acting(self) -> bool:
        """Whether this worker acted on a current view of the cluster at its last tick."""

    def may_report(self) -> bool:
        """Whether this worker's view of a task is current enough to report it stopped."""

    def mine(self, snapshot: ConfigSnapshot) -> set[Item]:
        """The connectors and tasks this worker runs."""

    def owner(self, snapshot: ConfigSnapshot, item: Item) -> str:
        """The worker that runs ``item`` (``""``: none now)."""

    def peer_urls(self, snapshot: ConfigSnapshot, name: str) -> list[str]:
        """The REST URLs of the other workers running tasks of connector ``name`` (none for a
        request another worker forwarded here: it asks them itself)."""

    def leader_url(self) -> str | None:
        """``None`` when this worker writes to the store itself; else the URL to forward writes to.
        Raises :class:`~sluice.worker.herder.api.Conflict` when no worker may write now."""

    def forward(
        self, url: str, method: str, path: str, *, body: Any = None, params: Mapping[str, str] | None = None, want_object: bool = False
    ) -> tuple[int, Any]:
        """Send a request on to ``url`` with the caller's credentials; the answer's status and body."""

    def forward_to_owner(self, snapshot: ConfigSnapshot, owner: str, method: str, path: str) -> None:
        """Send a request on to the worker ``owner`` (a task restart)."""

    def peek(self, url: str, path: str, timeout_s: float) -> tuple[int, bytes]:
        """``GET path`` on the worker at ``url`` with the caller's credentials: its status and body,
        whatever the status. Raises :class:`~sluice.connectors.api.ConnectError` when it does not
        answer in ``timeout_s``."""

    def submit_task_configs(self, name: str, configs: list[dict[str, Any]], snapshot: ConfigSnapshot) -> None:
        """Write generated task configs, or hand them to the worker that writes; raises to be retried."""

    def accept_task_configs(self, name: str, body: bytes, signature: str | None, algorithm: str | None) -> None:
        """Check an internal request carrying task configs (signed by a cluster member)."""

    def catch_up_offsets(self) -> None:
        """Make this worker's source offsets current (a cluster's are written by every worker)."""

    def health(self, herder: HerderState) -> Health: ...

    def set_cluster_logger_level(self, name: str, level: str) -> None: ...

    def rebalance_metrics(self) -> Mapping[str, float]:
        """Connect's ``connect-worker-rebalance-metrics`` of this worker's group (none without one)."""

    def cluster_view(self) -> ClusterView:
        """The workers of the cluster and its leader as this worker knows them now (``GET /cluster``)."""


class LocalAssignment:
    """A cluster of one: everything runs here, and every write is performed here at once.

    With a ``contact`` probe it reports losing Kafka in ``GET /health`` as a cluster member does."""

    inline: bool = True
    fence: Callable[[], bool] | None = None
    acting: bool = True

    def __init__(
        self,
        worker_id: str,
        store: ConfigStore,
        running: Callable[[], bool],
        contact: KafkaContact | None = None,
        url: str = "",
    ) -> None:
        self._worker_id = worker_id
        self._url = url
        self._store = store
        self._running = running
        self.contact = contact

    @property
    def worker_id(self) -> str:
        return self._worker_id

    def start(self) -> None:
        """Nothing to join; the Kafka probe starts."""
        if self.contact is not None:
            self.contact.start()

    def stop(self) -> None:
        """Nothing to leave; the Kafka probe stops."""
        if self.contact is not None:
            self.contact.stop()

    def next_tick_s(self) -> float:
        # Local writes are applied on the caller's thread; the tick serves the rest (a connector's
        # reconfiguration request, a restart request), and every one of them wakes it.
        return 5.0

    def tick(self) -> bool:
        return True

    def may_report(self) -> bool:
        return True

    def mine(self, snapshot: ConfigSnapshot) -> set[Item]:
        return snapshot.wanted_items()

    def owner(self, snapshot: ConfigSnapshot, item: Item) -> str:
        return self._worker_id

    def peer_urls(self, snapshot: ConfigSnapshot, name: str) -> list[str]:
        return []

    def leader_url(self) -> str | None:
        if not self._running():
            raise ConnectError("The worker is not running")
        return None

    def forward(
        self, url: str, method: str, path: str, *, body: Any = None, params: Mapping[str, str] | None = None, want_object: bool = False
    ) -> tuple[int, Any]:
        raise AssertionError("A standalone worker never forwards a request")

    def forward_to_owner(self, snapshot: ConfigSnapshot, owner: str, method: str, path: str) -> None:
        raise AssertionError("A standalone worker runs every task itself")

    def peek(self, url: str, path: str, timeout_s: float) -> tuple[int, bytes]:
        raise AssertionError("A standalone worker has no other worker to ask")

    def submit_task_configs(self, name: str, configs: list[dict[str, Any]], snapshot: ConfigSnapshot) -> None:
        self._store.put_task_configs(name, configs)

    def accept_task_configs(self, name: str, body: bytes, signature: str | None, algorithm: str | None) -> None:
        # Without a cluster session key nothing can be verified, so every such request is refused
        # alike, before any lookup: the answer must not tell which connector names exist.
        raise Forbidden("Task configs are submitted this way only between the workers of a distributed cluster")

    def catch_up_offsets(self) -> None:
        """A standalone worker's offsets are all its own."""

    def health(self, herder: HerderState) -> Health:
        """Starting until the herder has started; unhealthy when no Kafka broker has answered for as
        long as a cluster member may go without (its tasks cannot move records meanwhile), or while
        an operation has held the herder for longer than ``health_timeout_s`` (every change waits
        behind it)."""
        if not herder.ready:
            return STARTING
        loss = self.contact.loss() if self.contact is not None else None
        if loss is not None:
            return Health(
                "unhealthy",
                f"Worker {self._worker_id} {loss}; its connectors cannot move records through Kafka until a broker answers.",
            )
        if not herder.lock.acquire(timeout=herder.health_timeout_s):
            return Health(
                "unhealthy",
                f"Worker was unable to handle this request within {herder.health_timeout_s:g} s: its herder is busy "
                "with another operation and may be unable to handle other requests.",
            )
        herder.lock.release()
        return HEALTHY

    def set_cluster_logger_level(self, name: str, level: str) -> None:
        """A standalone worker is a cluster of one: the level is set here."""
        value = python_level(level)
        if value is None:
            raise BadRequest(f"Invalid log level '{level}'.")
        LOGGER_LEVELS.set(name, value)

    def rebalance_metrics(self) -> Mapping[str, float]:
        """No group, so no rebalances to report."""
        return {}

    def cluster_view(self) -> ClusterView:
        """One worker and no leader: nothing is elected, every write is made here."""
        return ClusterView("standalone", self._worker_id, None, [ClusterWorker(self._worker_id, self._url)])
