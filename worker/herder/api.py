"""The herder façade (Kafka Connect's ``Herder``): every cluster action, its answers and its errors.

The REST API and the CLI are thin wrappers over :class:`Herder`. Domain errors
(:class:`~connectors.api.NotFoundError`, :class:`~connectors.api.AlreadyExistsError`,
:class:`~connectors.api.ConfigError`, :class:`Conflict`) are raised here and mapped to HTTP in one
place (:mod:`sluice.rest.errors`).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sluice.connectors.api import ConnectError
from sluice.plugins import PluginInfo
from sluice.worker.observability.log_levels import LOGGER_LEVELS, python_level
from sluice.worker.status import TargetState


class Conflict(ConnectError):
    """The request cannot be served now (e.g. a rebalance, or a state that forbids it): HTTP 409."""


#: Connect's answer while the cluster has no leader (a rebalance or an election is running).
NO_LEADER_MESSAGE = "Cannot complete request momentarily due to no known leader URL, likely because a rebalance is underway."


class NoLeader(Conflict):
    """HTTP 409 with ``Retry-After``: ask again in a moment."""

    retry_after_s = 1

    def __init__(self, message: str = NO_LEADER_MESSAGE) -> None:
        super().__init__(message)


class BadRequest(ConnectError):
    """The request itself is malformed: HTTP 400."""


class Forbidden(ConnectError):
    """The worker's configuration disallows the request (e.g. topic tracking is off): HTTP 403."""


#: How long a herder may go without completing a loop (distributed: a tick; standalone: getting
#: hold of its lock) before ``GET /health`` calls the worker unhealthy. Connect's health check
#: waits as long for its herder thread.
HEALTH_TIMEOUT_S = 10.0

#: ``session.timeout.ms`` of a distributed worker that does not set it (Kafka Connect's default).
DEFAULT_SESSION_TIMEOUT_MS = 10_000


def contact_lost_after_s(session_timeout_ms: int) -> float:
    """How long a worker may go without hearing from Kafka before it counts as out of contact (and
    ``GET /health`` says so), in both modes: a little less than the session timeout, because a
    cluster member's work must be idle before the coordinator can hand it to another worker."""
    return session_timeout_ms / 1000 * 0.8


HEALTHY_MESSAGE = "Worker has completed startup and is ready to handle requests."
STARTING_MESSAGE = "Worker is still starting up."


@dataclass(frozen=True)
class Health:
    """KIP-1017's answer: ``status`` is ``healthy``, ``starting`` or ``unhealthy``; ``message`` says why.

    ``details`` are facts an operator checks beside it (Sluice's own, not Connect's): ``sandbox``
    says whether task hosts run confined (:mod:`sluice.worker.execution.sandbox`)."""

    status: str
    message: str
    details: Mapping[str, str] = field(default_factory=dict)

    @property
    def http_status(self) -> int:
        """200 healthy, 503 starting, 500 unhealthy (Connect's codes)."""
        return {"healthy": 200, "starting": 503}.get(self.status, 500)


HEALTHY = Health("healthy", HEALTHY_MESSAGE)
STARTING = Health("starting", STARTING_MESSAGE)


@dataclass(frozen=True)
class ClusterWorker:
    """One worker of the cluster: its id (``host:port``, as statuses name it), its REST URL, and
    whether it leads."""

    id: str
    url: str
    leader: bool = False


@dataclass(frozen=True)
class ClusterView:
    """``GET /cluster`` (Sluice's own): this worker's mode and id, the cluster's leader (``None``
    when there is none: a standalone worker, or a cluster whose leader has not planned yet) and its
    live workers, sorted by id."""

    mode: str  # "standalone" or "distributed"
    worker_id: str
    leader: str | None
    workers: list[ClusterWorker] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "worker_id": self.worker_id,
            "leader": self.leader,
            "workers": [{"id": w.id, "url": w.url, "leader": w.leader} for w in self.workers],
        }


@dataclass
class ConnectorInfo:
    """Connect's ``ConnectorInfo``: name, config, task ids and type."""

    name: str
    config: dict[str, Any]
    tasks: list[int]
    type: str

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "config": self.config,
            "tasks": [{"connector": self.name, "task": t} for t in self.tasks],
            "type": self.type,
        }


@dataclass
class ConnectorStateInfo:
    """Connect's status body for one connector."""

    name: str
    connector: dict[str, Any]
    tasks: list[dict[str, Any]]
    type: str

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "connector": self.connector, "tasks": self.tasks, "type": self.type}


@dataclass
class TaskInfo:
    """One generated task configuration."""

    connector: str
    task: int
    config: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"id": {"connector": self.connector, "task": self.task}, "config": self.config}


class Herder(abc.ABC):
    """Every action on connectors that the REST API and CLI offer."""

    @abc.abstractmethod
    def start(self) -> None: ...

    @abc.abstractmethod
    def stop(self) -> None: ...

    @property
    @abc.abstractmethod
    def worker_id(self) -> str: ...

    @abc.abstractmethod
    def kafka_cluster_id(self) -> str | None: ...

    @abc.abstractmethod
    def connectors(self) -> list[str]: ...

    @abc.abstractmethod
    def connector_info(self, name: str) -> ConnectorInfo: ...

    @abc.abstractmethod
    def connector_config(self, name: str) -> dict[str, Any]: ...

    @abc.abstractmethod
    def put_connector_config(
        self,
        name: str,
        config: Mapping[str, Any],
        *,
        allow_replace: bool,
        initial_state: TargetState = TargetState.STARTED,
    ) -> tuple[bool, ConnectorInfo]:
        """Create or update; returns ``(created, info)``."""

    @abc.abstractmethod
    def delete_connector(self, name: str) -> None: ...

    @abc.abstractmethod
    def connector_status(self, name: str) -> ConnectorStateInfo: ...

    @abc.abstractmethod
    def task_status(self, name: str, task: int) -> dict[str, Any]: ...

    @abc.abstractmethod
    def task_configs(self, name: str) -> list[TaskInfo]: ...

    @abc.abstractmethod
    def set_target_state(self, name: str, state: TargetState) -> None: ...

    @abc.abstractmethod
    def restart_connector(self, name: str) -> None:
        """Connect's legacy restart: the connector instance only, synchronously."""

    @abc.abstractmethod
    def restart_connector_and_tasks(self, name: str, *, include_tasks: bool, only_failed: bool) -> ConnectorStateInfo:
        """KIP-745 restart; returns the status with the instances it restarts shown ``RESTARTING``."""

    @abc.abstractmethod
    def patch_connector_config(self, name: str, patch: Mapping[str, Any]) -> ConnectorInfo:
        """Merge-patch (KIP-477): keys in ``patch`` replace, ``None`` values delete."""

    @abc.abstractmethod
    def connector_offsets(self, name: str) -> list[dict[str, Any]]:
        """``[{"partition": {...}, "offset": {...}}]`` (KIP-875)."""

    @abc.abstractmethod
    def alter_connector_offsets(self, name: str, entries: list[dict[str, Any]]) -> str:
        """Alter offsets of a STOPPED connector; returns Connect's success message."""

    @abc.abstractmethod
    def reset_connector_offsets(self, name: str) -> str:
        """Reset every offset of a STOPPED connector; returns Connect's success message."""

    @abc.abstractmethod
    def fence_zombies(self, name: str) -> None:
        """KIP-618's zombie fencing of a source connector's tasks (``PUT /connectors/{name}/fence``)."""

    @abc.abstractmethod
    def dead_letters(self, name: str, partition: int, offset: int | None, limit: int) -> dict[str, Any]:
        """A page of the connector's dead letter queue, decoded (``GET /connectors/{name}/dlq``)."""

    @abc.abstractmethod
    def redrive_dead_letters(self, name: str, partition: int, first: int, last: int, max_redrives: int) -> dict[str, Any]:
        """Send a range of a sink's dead letters back to their topics (``POST /connectors/{name}/dlq/redrive``)."""

    @abc.abstractmethod
    def tap(self, name: str, count: int, timeout_s: float) -> dict[str, Any]:
        """The next ``count`` records the connector moves, within ``timeout_s`` (``POST /connectors/{name}/tap``)."""

    @abc.abstractmethod
    def connector_topics(self, name: str) -> list[str]:
        """Topics the connector's tasks produced to or consumed from since creation or reset (KIP-558)."""

    @abc.abstractmethod
    def reset_connector_topics(self, name: str) -> None: ...

    @abc.abstractmethod
    def connector_plugin_config(self, plugin: str) -> list[dict[str, Any]]:
        """The plugin's ``ConfigKeyInfo`` list; :class:`NotFoundError` for an unknown plugin."""

    @abc.abstractmethod
    def validate_connector_config(self, plugin: str, config: Mapping[str, Any]) -> dict[str, Any]:
        """Connect's ``ConfigInfos`` for ``config`` validated as a ``plugin`` connector."""

    @property
    def ready(self) -> bool:
        """Whether the herder has started and is not stopping (``GET /health`` says "starting" until
        then). A herder with nothing to start is ready at once."""
        return True

    def health(self) -> Health:
        """``GET /health`` (KIP-1017). Called on a REST thread; returns within about
        :data:`HEALTH_TIMEOUT_S` even when the herder is stuck."""
        return HEALTHY if self.ready else STARTING

    def rebalance_metrics(self) -> Mapping[str, float]:
        """Connect's ``connect-worker-rebalance-metrics`` (numeric attributes) for ``GET /metrics``:
        a cluster member's; none for a worker that belongs to no group."""
        return {}

    @abc.abstractmethod
    def cluster_view(self) -> ClusterView:
        """``GET /cluster``: this worker, the cluster's leader and its live workers as this worker
        knows them now. Called on a REST thread; answers from memory (no request to Kafka)."""

    @abc.abstractmethod
    def connector_history(self, name: str, span_ms: int | None = None) -> dict[str, Any]:
        """``GET /connectors/{name}/metrics/history``: per sampling interval of the last ``span_ms``
        (default and at most ``metrics.history.span.ms``), records per second in and out, errors
        and lag, summed over every worker running its tasks."""

    @abc.abstractmethod
    def cluster_health(self, view: ClusterView) -> dict[str, dict[str, str]]:
        """Worker id → ``{"status", "message"}`` of each worker of ``view``: this one's own
        :meth:`health`, the others' ``/health`` asked at once (``unreachable`` when one does not answer)."""

    @abc.abstractmethod
    def ask_workers(self, view: ClusterView, path: str, timeout_s: float) -> list[Any]:
        """``GET path`` on every other worker of ``view`` at once, with the caller's credentials:
        :class:`~sluice.worker.herder.cluster_probe.PeerAnswer` in the order of ``view.workers``."""

    def worker_settings(self) -> Mapping[str, Any]:
        """The worker's raw configuration (the REST layer reads its ``rest.*``/``listeners.*`` keys)."""
        return {}

    @abc.abstractmethod
    def restart_task(self, name: str, task: int) -> None: ...

    def put_task_configs(self, name: str, body: bytes, signature: str | None, algorithm: str | None) -> None:
        """Internal (distributed mode): task configs from the worker running the connector, signed.

        A worker without a cluster session key verifies nothing, so it refuses every such request
        alike, before any lookup: the answer must not tell which connector names exist.
        """
        raise Forbidden("Task configs are submitted this way only between the workers of a distributed cluster")

    @abc.abstractmethod
    def plugins(self) -> list[PluginInfo]: ...

    def set_cluster_logger_level(self, name: str, level: str) -> None:
        """``PUT /admin/loggers/{name}?scope=cluster`` (KIP-976): every worker of the cluster, and
        each of its task processes, sets ``name`` and its descendants to ``level`` (a log4j name).

        Called on a REST thread. A standalone worker is a cluster of one: the level is set here.
        :class:`BadRequest` for a level that is not a log4j name.
        """
        value = python_level(level)
        if value is None:
            raise BadRequest(f"Invalid log level '{level}'.")
        LOGGER_LEVELS.set(name, value)
