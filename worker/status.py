"""Connector and task states, as Kafka Connect reports them."""

from __future__ import annotations

import enum
import time
import traceback
from dataclasses import dataclass, field

from sluice.connectors.api.connectivity import ConnectivityError
from sluice.worker.errors import task_error_metrics


class State(enum.StrEnum):
    """Runtime state of a connector or task (``STOPPED`` applies to connectors only)."""

    UNASSIGNED = "UNASSIGNED"
    RUNNING = "RUNNING"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    RESTARTING = "RESTARTING"


class TargetState(enum.StrEnum):
    """What the user asked a connector to be (Connect's ``target-state-<connector>``)."""

    STARTED = "STARTED"
    PAUSED = "PAUSED"
    STOPPED = "STOPPED"


@dataclass(frozen=True, order=True)
class ConnectorTaskId:
    """Task ``task`` of connector ``connector``."""

    connector: str
    task: int

    def __str__(self) -> str:
        return f"{self.connector}-{self.task}"


@dataclass
class Status:
    """The last reported state of a connector or task."""

    state: State
    worker_id: str
    trace: str | None = None
    generation: int = 0
    updated_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    #: Automatic restarts (``sluice.worker.restarts``): the attempt scheduled and the budget.
    restart_attempt: int | None = None
    restart_attempts_max: int | None = None
    #: Set by :meth:`StatusStore.put_task`: the REST body then carries the task's error metrics.
    task_id: ConnectorTaskId | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {"state": self.state.value, "worker_id": self.worker_id}
        if self.trace is not None:
            body["trace"] = self.trace
        if self.restart_attempt is not None:
            body["restart_attempt"] = self.restart_attempt
            body["restart_attempts_max"] = self.restart_attempts_max
        if self.task_id is not None:
            # Sluice's addition to Connect's body: task-error-metrics while a runner of the task lives.
            metrics = task_error_metrics(self.task_id)
            if metrics is not None:
                body["errors"] = metrics
        return body


def format_trace(error: BaseException) -> str:
    """The trace Connect shows in status: the exception chain as text (a task process's failure
    brings its own).

    The chain stops at a :class:`~connectors.api.connectivity.ConnectivityError`: what it was
    raised from is the driver's or the remote server's text (an HTTP body, bytes a port answered),
    which a viewer of the status must not read; its own message names the category."""
    remote = getattr(error, "remote_trace", None)
    if isinstance(remote, str) and remote:
        return remote
    formatted = traceback.TracebackException.from_exception(error)
    _cut_below_connectivity_errors(formatted)
    return "".join(formatted.format()).rstrip()


def _cut_below_connectivity_errors(formatted: traceback.TracebackException) -> None:
    seen: set[int] = set()
    pending = [formatted]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if current.exc_type is not None and issubclass(current.exc_type, ConnectivityError):
            current.__cause__ = None
            current.__context__ = None
            current.__suppress_context__ = True
            continue
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        pending.extend(current.exceptions or ())
