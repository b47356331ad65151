"""Connector and task states, as Kafka Connect reports them."""

from __future__ import annotations

import enum
import os
import re
import threading
import time
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sluice.connectors.api.connectivity import ConnectivityError
from sluice.worker.errors import task_error_metrics
from sluice.worker.masking import is_secret_key, mask_secrets


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


_ENV_PLACEHOLDER = re.compile(r"\$\{env:([^}:]+)(?::[^}]*)?\}")


def scrub_secrets(trace: str, config: Mapping[str, Any], secret_keys: Iterable[str] = ()) -> str:
    """``trace`` with every secret of ``config`` replaced by ``[hidden]``.

    Secrets are the literal values of password-typed keys and whatever an ``${env:VAR}``
    placeholder resolves to, in any key: an exception message may quote either, and a status
    trace is returned over REST.
    """
    declared = set(secret_keys)
    secrets: set[str] = set()
    for key, value in config.items():
        if not isinstance(value, str) or not value:
            continue
        for var in _ENV_PLACEHOLDER.findall(value):
            resolved = os.environ.get(var)
            if resolved:
                secrets.add(resolved)
        if (key in declared or is_secret_key(key)) and not value.startswith("${"):
            secrets.add(value)
    # As tokens, long enough ones only (worker/masking.py): a password "postgres" must not turn
    # "postgresql+psycopg://" in the trace into "[hidden]ql+psycopg://".
    return mask_secrets(trace, secrets)


class StatusStore:
    """In-memory status of connectors and tasks, and the topics their tasks used (KIP-558); the
    Kafka-backed store comes with distributed mode."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connectors: dict[str, Status] = {}
        self._tasks: dict[ConnectorTaskId, Status] = {}
        self._used_topics: dict[str, set[str]] = {}

    def start(self) -> None:
        """Nothing to read: the store starts empty."""

    def stop(self) -> None:
        """Nothing to release."""

    def put_connector(self, name: str, status: Status) -> None:
        with self._lock:
            self._connectors[name] = status

    def put_task(self, task_id: ConnectorTaskId, status: Status) -> None:
        status.task_id = task_id
        with self._lock:
            self._tasks[task_id] = status

    def connector(self, name: str) -> Status | None:
        with self._lock:
            return self._connectors.get(name)

    def task(self, task_id: ConnectorTaskId) -> Status | None:
        with self._lock:
            return self._tasks.get(task_id)

    def tasks(self, connector: str) -> dict[ConnectorTaskId, Status]:
        with self._lock:
            return {tid: s for tid, s in self._tasks.items() if tid.connector == connector}

    def snapshot(self) -> tuple[dict[str, Status], dict[ConnectorTaskId, Status]]:
        """Copies of every connector's and task's status (``GET /metrics`` counts them)."""
        with self._lock:
            return dict(self._connectors), dict(self._tasks)

    def topics(self, connector: str) -> set[str]:
        """The topics any task of ``connector`` has used since its creation or the last reset."""
        with self._lock:
            return set(self._used_topics.get(connector, ()))

    def put_topic(self, connector: str, topic: str, task: int) -> None:
        """Record that task ``task`` of ``connector`` used ``topic``."""
        with self._lock:
            self._used_topics.setdefault(connector, set()).add(topic)

    def reset_topics(self, connector: str) -> None:
        """Forget the topics ``connector`` used."""
        with self._lock:
            self._used_topics.pop(connector, None)

    def forget(self, connector: str) -> None:
        with self._lock:
            self._connectors.pop(connector, None)
            self._used_topics.pop(connector, None)
            for tid in [t for t in self._tasks if t.connector == connector]:
                del self._tasks[tid]

    def forget_task(self, task_id: ConnectorTaskId) -> None:
        with self._lock:
            self._tasks.pop(task_id, None)
