"""Metrics a task keeps about its own system, for the worker's ``GET /metrics``.

The runtime counts records, batches and commits itself (Connect's task metric groups). A task
that knows more about the system it reads or writes — a CDC task's position in the log, its
snapshot's progress, how far its replication slot lags — offers it by defining::

    def metrics(self) -> Sequence[TaskMetricGroup]: ...

on its task class. The runner calls it on the task thread between two ``poll()``/``put()``
calls, at most about once a second (:data:`METRICS_INTERVAL_S`), so it may query its system
cheaply (one SQL statement, say); it must not block for long. Names follow the monitoring names
the task's users already know (Debezium's MBean attributes, as the common JMX exporter rules
render them); each value is exposed as ``<prefix>_<attribute>`` with the group's labels plus
``connector`` and ``task``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol, runtime_checkable

#: How often, at most, the runner asks a task for its metrics.
METRICS_INTERVAL_S = 1.0


class TaskMetricGroup(NamedTuple):
    """Values that share a name prefix and labels, e.g. Debezium's streaming metrics:
    ``TaskMetricGroup("debezium_metrics", {"plugin": "postgres", "name": "inventory",
    "context": "streaming"}, {"TotalNumberOfEventsSeen": 42})``."""

    prefix: str
    labels: Mapping[str, str]
    values: Mapping[str, float]


@runtime_checkable
class ReportsMetrics(Protocol):
    """A task that offers metrics of its own (see the module docstring)."""

    def metrics(self) -> Sequence[TaskMetricGroup]: ...


@runtime_checkable
class ReportsDegraded(Protocol):
    """A task that can keep running in a state an operator must act on (a replication slot that
    holds too much of the database's WAL, say) defines::

        def degraded_notice(self) -> str | None: ...

    The runner calls it right after ``metrics()``, on the same thread and cadence (also while the
    task is paused). A text marks the task degraded: its status stays ``RUNNING`` with the text as
    its trace, as when a system it needs is out of reach; ``None`` clears that. Keep the text
    stable while the state lasts (no figures that change every call): each change is a status
    write. The task's own log says more, as often as it likes.
    """

    def degraded_notice(self) -> str | None: ...


@runtime_checkable
class ReportsFailure(Protocol):
    """A task with a reason to fail that can arise while it is paused (a replication slot past its
    bound with ``slot.retained.wal.action=fail``, say) defines::

        def failure(self) -> Exception | None: ...

    While the task is paused, the runner calls it right after ``metrics()``; an error fails the
    task as if ``poll`` had raised it (while running, the task raises it from ``poll`` itself).
    """

    def failure(self) -> Exception | None: ...
