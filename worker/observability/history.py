"""Each connector's recent throughput, errors and lag on this worker, for
``GET /connectors/{name}/metrics/history`` (the console's charts).

A daemon thread reads the task metric snapshots the scrape reads (:func:`live_snapshots`: no
call into a task) every ``metrics.history.interval.ms``, at wall-clock multiples of it so that
every worker of a cluster samples at the same instants, and keeps per connector the sums over its
tasks here for ``metrics.history.span.ms``. :meth:`ConnectorHistory.points` turns them into rates
between consecutive samples; a task that restarted or moved away lowers a total, and that step
counts as 0, never negative. A cluster sums the rates of every worker that runs the connector's
tasks, instant by instant (:func:`merge`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sluice.worker.observability.task_metrics import live_snapshots
from sluice.worker.status import ConnectorTaskId

log = logging.getLogger(__name__)

_IN = (("source-task-metrics", "source-record-poll-total"), ("sink-task-metrics", "sink-record-read-total"))
_OUT = (("source-task-metrics", "source-record-write-total"), ("sink-task-metrics", "sink-record-send-total"))
_ERRORS = ("task-error-metrics", "total-record-errors")


@dataclass(frozen=True)
class Sample:
    """The sums over a connector's tasks on this worker at ``at_ms`` (a multiple of the interval)."""

    at_ms: int
    records_in: float
    records_out: float
    errors: float
    lag: float | None  # records behind, over its sink tasks' partitions; None: no sink task here


def _sum(snapshot: Mapping[str, Any], pairs: Iterable[tuple[str, str]]) -> float:
    return float(sum(snapshot.get(group, {}).get(attr, 0) for group, attr in pairs))


def connector_sums(snapshots: Mapping[Hashable, Mapping[str, Any]], at_ms: int) -> dict[str, Sample]:
    """One :class:`Sample` per connector from the live tasks' snapshots."""
    sums: dict[str, list[Any]] = {}
    for task_id, snap in snapshots.items():
        if not isinstance(task_id, ConnectorTaskId):
            continue
        entry = sums.setdefault(task_id.connector, [0.0, 0.0, 0.0, None])
        entry[0] += _sum(snap, _IN)
        entry[1] += _sum(snap, _OUT)
        entry[2] += _sum(snap, (_ERRORS,))
        if "lag" in snap:
            entry[3] = (entry[3] or 0.0) + float(sum(max(0, row[2]) for row in snap["lag"]))
    return {name: Sample(at_ms, *values) for name, values in sums.items()}


class ConnectorHistory:
    """Samples of every connector with tasks on this worker; thread-safe."""

    def __init__(
        self,
        interval_ms: int,
        span_ms: int,
        *,
        snapshots: Callable[[], Mapping[Hashable, Mapping[str, Any]]] = live_snapshots,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.interval_ms = interval_ms
        self.span_ms = span_ms
        self._snapshots = snapshots
        self._clock = clock
        self._series: dict[str, deque[Sample]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="connector-history", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self._until_next_s()):
            try:
                self.sample()
            except Exception:
                log.exception("Sampling the connectors' metrics history failed")

    def _until_next_s(self) -> float:
        now_ms = self._clock() * 1000
        return (self.interval_ms - now_ms % self.interval_ms) / 1000

    def sample(self) -> None:
        """Record the current sums, at the interval's multiple nearest to now."""
        at_ms = int(round(self._clock() * 1000 / self.interval_ms) * self.interval_ms)
        sums = connector_sums(self._snapshots(), at_ms)
        oldest = at_ms - self.span_ms
        with self._lock:
            for name, sample in sums.items():
                series = self._series.setdefault(name, deque())
                if series and series[-1].at_ms >= at_ms:
                    continue
                series.append(sample)
            for name in list(self._series):
                series = self._series[name]
                while series and series[0].at_ms < oldest:
                    series.popleft()
                if not series:
                    del self._series[name]

    def points(self, connector: str, span_ms: int) -> list[dict[str, Any]]:
        """``{"at", "in", "out", "errors", "lag"}`` per interval of the last ``span_ms``: records
        per second in and out and errors in that interval since the sample before (an interval
        without a sample before it is left out), and the lag at its end."""
        with self._lock:
            series = list(self._series.get(connector, ()))
        since = int(self._clock() * 1000) - span_ms
        out = []
        for before, after in zip(series, series[1:], strict=False):
            if after.at_ms < since or after.at_ms - before.at_ms != self.interval_ms:
                continue
            seconds = self.interval_ms / 1000
            out.append(
                {
                    "at": after.at_ms,
                    "in": max(0.0, after.records_in - before.records_in) / seconds,
                    "out": max(0.0, after.records_out - before.records_out) / seconds,
                    "errors": max(0.0, after.errors - before.errors),
                    "lag": after.lag,
                }
            )
        return out


def merge(answers: Iterable[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Several workers' :meth:`ConnectorHistory.points` of one connector as one series: rates,
    errors and lag summed instant by instant (a lag only where some worker has one)."""
    merged: dict[int, dict[str, Any]] = {}
    for points in answers:
        for point in points:
            entry = merged.setdefault(
                point["at"], {"at": point["at"], "in": 0.0, "out": 0.0, "errors": 0.0, "lag": None}
            )
            for key in ("in", "out", "errors"):
                entry[key] += float(point.get(key) or 0)
            if point.get("lag") is not None:
                entry["lag"] = (entry["lag"] or 0.0) + float(point["lag"])
    return [merged[at] for at in sorted(merged)]
