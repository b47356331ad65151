"""``GET /metrics``: the worker's metrics in the Prometheus text format (version 0.0.4).

Names follow Kafka Connect's metric groups and attributes as the common JMX exporter rules for
Connect render them, so dashboards and alerts written for a Connect worker keep working:

* ``kafka_connect_connect_worker_metrics_<attribute>`` (per connector: with a ``connector`` label);
* ``kafka_connect_connect_worker_rebalance_metrics_<attribute>`` (distributed workers);
* ``kafka_connect_connector_status{connector,status}`` and
  ``kafka_connect_connector_task_status{connector,task,status}``, 1 for the current state;
* ``kafka_connect_<group>_<attribute>{connector,task}`` for the task groups
  ``connector-task-metrics``, ``source-task-metrics``, ``sink-task-metrics`` and
  ``task-error-metrics`` (e.g. ``kafka_connect_source_task_metrics_source_record_poll_total``);
* ``kafka_consumer_consumer_fetch_manager_metrics_records_lag{client_id,topic,partition,...}``
  for each sink task's assigned partitions, and Sluice's
  ``sluice_sink_task_partition_lag_seconds{connector,task,topic,partition}``, that lag in time
  (see :func:`sluice.worker.observability.task_metrics.time_lag`).

Dashes become underscores, as the exporter writes them. ``*-total`` attributes are counters;
Connect's ``*-count`` attributes are ``untyped`` (as the exporter types them, and so that
Prometheus's linter does not take them for a summary's count); everything else is a gauge.
Connect's ``*-rate`` attributes are computed here from the totals over a sliding window of
:data:`RATE_WINDOW_S`, as Connect's own sampled rates are.

Nothing here runs on a task's hot path: a scrape reads the snapshots tasks keep (see
:mod:`sluice.worker.observability.task_metrics`).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import Any

from sluice.worker.observability.task_metrics import live_snapshots
from sluice.worker.status import ConnectorTaskId, State, Status

#: Connect samples its rates over two 30 s windows; this is the span a rate here covers.
RATE_WINDOW_S = 30.0

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: rate attribute → the total it is the rate of, per group.
_RATES = {
    "source-task-metrics": {
        "source-record-poll-rate": "source-record-poll-total",
        "source-record-write-rate": "source-record-write-total",
    },
    "sink-task-metrics": {
        "sink-record-read-rate": "sink-record-read-total",
        "sink-record-send-rate": "sink-record-send-total",
        "offset-commit-completion-rate": "offset-commit-completion-total",
        "offset-commit-skip-rate": "offset-commit-skip-total",
    },
}

_HELP = {
    "source-record-poll-total": "Records polled from the source task (before transforms).",
    "source-record-write-total": "Records handed to the producer (after transforms and conversion).",
    "source-record-active-count": "Records produced but not yet covered by stored offsets.",
    "sink-record-read-total": "Records read from Kafka by the sink task (before transforms).",
    "sink-record-send-total": "Records put into the sink task (after transforms).",
    "sink-record-active-count": "Records read but not yet covered by a committed consumer offset.",
    "partition-count": "Topic partitions assigned to the sink task.",
    "records-lag": "Records between the sink task consumer's position and the partition's end.",
    "lag-seconds": "0 without record lag, else the age of the last record the sink task consumed from the partition.",
}

_STATUS_VALUES = ("running", "paused", "stopped", "failed", "restarting", "unassigned", "destroyed")


class RateWindow:
    """Turns totals seen at scrape times into per-second rates over :data:`RATE_WINDOW_S`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: dict[Hashable, deque[tuple[float, float]]] = {}

    def rate(self, key: Hashable, total: float) -> float:
        now = self._clock()
        with self._lock:
            samples = self._samples.setdefault(key, deque())
            if samples and total < samples[-1][1]:
                samples.clear()  # the task restarted: its totals began again
            samples.append((now, total))
            while len(samples) > 2 and now - samples[1][0] >= RATE_WINDOW_S:
                samples.popleft()
            first_t, first_v = samples[0]
        return (total - first_v) / (now - first_t) if now > first_t else 0.0

    def forget(self, live: Iterable[Hashable]) -> None:
        """Drop the windows of tasks no longer running here."""
        keep = set(live)
        with self._lock:
            for key in [k for k in self._samples if k[0] not in keep]:  # type: ignore[index]
                del self._samples[key]


class Exposition:
    """Metric families in the text format, each with its ``# HELP`` and ``# TYPE`` once."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[str]]] = {}

    def add(self, name: str, labels: Mapping[str, Any], value: float, help_text: str = "", kind: str | None = None) -> None:
        family = self._families.get(name)
        if family is None:
            family = (help_text or name.replace("_", " "), kind or _kind(name), [])
            self._families[name] = family
        family[2].append(f"{name}{_labels(labels)} {_number(value)}")

    def render(self, only: Collection[str] = ()) -> str:
        """The text format; with ``only``, just the families of those names."""
        out: list[str] = []
        for name, (help_text, kind, samples) in self._families.items():
            if only and name not in only:
                continue
            out.append(f"# HELP {name} {_escape_help(help_text)}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(samples)
        return "\n".join(out) + "\n"


class MetricsCollector:
    """Builds the exposition of one worker from its herder (see the module docstring)."""

    def __init__(self, herder: Any) -> None:
        self._herder = herder
        self._rates = RateWindow()

    def render(self, backfills: Any = None, only: Collection[str] = ()) -> str:
        """The exposition; ``backfills`` (a :class:`~worker.backfill.BackfillManager`) adds its jobs;
        ``only`` keeps just the families of those names (the console reads six of them)."""
        out = Exposition()
        herder = self._herder
        worker_id = herder.worker_id
        connectors, tasks = herder.status.snapshot()
        mine = {tid: s for tid, s in tasks.items() if s.worker_id == worker_id}
        own_connectors = {n: s for n, s in connectors.items() if s.worker_id == worker_id}
        self._worker_metrics(out, own_connectors, mine)
        for attr, value in herder.rebalance_metrics().items():
            out.add(_name("connect-worker-rebalance-metrics", attr), {}, value)
        for name, status in sorted(own_connectors.items()):
            _status(out, "kafka_connect_connector_status", {"connector": name}, status)
        for tid, status in sorted(mine.items()):
            _status(out, "kafka_connect_connector_task_status", {"connector": tid.connector, "task": tid.task}, status)
        snapshots = live_snapshots()
        for tid, snap in sorted(snapshots.items(), key=lambda item: str(item[0])):
            if isinstance(tid, ConnectorTaskId):
                self._task_metrics(out, tid, snap)
        self._rates.forget(snapshots)
        if backfills is not None:
            _backfill_metrics(out, backfills.list(), worker_id)
        return out.render(only)

    def _worker_metrics(self, out: Exposition, connectors: Mapping[str, Status], tasks: Mapping[ConnectorTaskId, Status]) -> None:
        group = "connect-worker-metrics"
        out.add(_name(group, "connector-count"), {}, len(connectors))
        out.add(_name(group, "task-count"), {}, len(tasks))
        for attr, value in self._herder.worker.startups.snapshot().items():
            out.add(_name(group, attr), {}, value)
        by_connector: dict[str, dict[str, int]] = {}
        for tid, status in tasks.items():
            counts = by_connector.setdefault(tid.connector, {})
            counts[status.state.value.lower()] = counts.get(status.state.value.lower(), 0) + 1
        for name in sorted(set(by_connector) | set(connectors)):
            counts = by_connector.get(name, {})
            labels = {"connector": name}
            out.add(_name(group, "connector-total-task-count"), labels, sum(counts.values()))
            for state in ("running", "paused", "failed", "unassigned", "restarting", "destroyed"):
                out.add(_name(group, f"connector-{state}-task-count"), labels, counts.get(state, 0))

    def _task_metrics(self, out: Exposition, tid: ConnectorTaskId, snap: Mapping[str, Any]) -> None:
        labels = {"connector": tid.connector, "task": tid.task}
        for group, attrs in snap.items():
            if group in ("lag", "own"):
                continue
            for attr, value in attrs.items():
                out.add(_name(group, attr), labels, value, _HELP.get(attr, ""))
            for rate, total in _RATES.get(group, {}).items():
                if total in attrs:
                    out.add(_name(group, rate), labels, self._rates.rate((tid, rate), attrs[total]))
        for prefix, group_labels, values in snap.get("own", ()):
            for attr, value in values.items():
                out.add(f"{prefix}_{attr}".replace("-", "_").replace(".", "_"), {**group_labels, **labels}, value)
        client_id = f"connector-consumer-{tid}"
        for topic, partition, lag, seconds in snap.get("lag", ()):
            out.add(
                "kafka_consumer_consumer_fetch_manager_metrics_records_lag",
                {"client_id": client_id, "connector": tid.connector, "task": tid.task, "topic": topic, "partition": partition},
                lag,
                _HELP["records-lag"],
                "gauge",
            )
            if seconds is not None:
                out.add(
                    "sluice_sink_task_partition_lag_seconds",
                    {"connector": tid.connector, "task": tid.task, "topic": topic, "partition": partition},
                    seconds,
                    _HELP["lag-seconds"],
                    "gauge",
                )


_BACKFILL_STATES = ("pending", "running", "succeeded", "failed", "cancelled")


def _backfill_metrics(out: Exposition, jobs: Iterable[Mapping[str, Any]], worker_id: str) -> None:
    """Sluice's own family for backfill jobs (Connect has none): each job's latest run, on the
    worker it runs on (a job not yet placed counts on every worker). The job's id is the
    ``backfill`` label: a ``job`` label would clash with the scrape job's (Prometheus would
    rename it ``exported_job``)."""
    for job in jobs:
        status = job.get("status") or {}
        if status.get("worker_id") not in (None, worker_id):
            continue
        labels = {"backfill": job.get("id"), "kind": job.get("kind") or ""}
        state = str(status.get("state") or "PENDING").lower()
        for value in _BACKFILL_STATES:
            out.add("sluice_backfill_state", {**labels, "state": value}, 1 if value == state else 0, "Current state (1) of the backfill job's latest run.")
        out.add("sluice_backfill_rows_done", labels, status.get("rows_done") or 0, "Rows the job's latest run has written.")
        out.add("sluice_backfill_bytes_done", labels, status.get("bytes_done") or 0, "Bytes the job's latest run has written.")
        if status.get("rows_total") is not None:
            out.add("sluice_backfill_rows_expected", labels, status["rows_total"], "Rows the job's latest run will write, when known.")
        if status.get("percent") is not None:
            out.add("sluice_backfill_progress_ratio", labels, status["percent"] / 100, "Share of the latest run done, when known.")
        if status.get("rows_per_s") is not None:
            out.add("sluice_backfill_rows_per_second", labels, status["rows_per_s"], "Rows per second of the latest run.")


def _status(out: Exposition, name: str, labels: Mapping[str, Any], status: Status) -> None:
    """One sample per state, 1 for the current one (as the exporter's ``status`` rule gives 1)."""
    current = "running" if status.state is State.RUNNING else status.state.value.lower()
    for value in _STATUS_VALUES:
        out.add(name, {**labels, "status": value}, 1 if value == current else 0, "Current state (1) of the connector or task.", "gauge")


def _name(group: str, attr: str) -> str:
    return f"kafka_connect_{group}_{attr}".replace("-", "_").replace(".", "_")


def _kind(name: str) -> str:
    if name.endswith("_total"):
        return "counter"
    if name.endswith(("_count", "_sum", "_bucket")):
        return "untyped"
    return "gauge"


def _labels(labels: Mapping[str, Any]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    return repr(float(value))
