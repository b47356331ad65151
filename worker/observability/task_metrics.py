"""What a task runner counts for ``GET /metrics``: plain attributes, bumped once per batch.

A runner owns one :class:`TaskMetrics` and changes it only on its own thread; a scrape reads it
through :meth:`TaskMetrics.snapshot` from another thread (or, with ``task.executor=process``, the
task process sends the snapshot up its control pipe). Nothing here takes a lock or runs per
record: a batch costs a few integer additions and two clock reads.

The snapshot uses Kafka Connect's group and attribute names (``source-task-metrics``,
``sink-task-metrics``, ``connector-task-metrics``, ``task-error-metrics``); :mod:`sluice.worker.observability.metrics`
turns them into Prometheus names the way the common JMX exporter rules for Connect do.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Callable, Hashable, Mapping
from typing import Any

from sluice.connectors.api.metrics import METRICS_INTERVAL_S, ReportsDegraded

log = logging.getLogger(__name__)

#: One partition's lag: (topic, partition, records between the consumer's position and the end,
#: seconds of :func:`time_lag` or ``None``). A plain tuple: with ``task.executor=process`` it is pickled.
Lag = tuple[str, int, int, float | None]

#: Snapshot sources by task id: thread runners, and task-process stand-ins in the worker.
_LIVE: weakref.WeakValueDictionary[Hashable, Any] = weakref.WeakValueDictionary()


class TaskMetrics:
    """One task's counters (see the module docstring for who writes and who reads)."""

    def __init__(
        self,
        kind: str,
        clock: Callable[[], float] = time.monotonic,
        *,
        on_notice: Callable[[str, str | None], None] | None = None,
    ) -> None:
        self.kind = kind  # "source" or "sink"
        self._clock = clock
        #: Where a task's degraded notice goes (``OutageTracker.notice`` of the runner).
        self._on_notice = on_notice
        self.started = clock()
        self.paused_s = 0.0
        self._paused_at: float | None = None
        # connector-task-metrics
        self.batches = 0
        self.batch_records = 0
        self.batch_size_max = 0
        self.commit_success = 0
        self.commit_failure = 0
        self.commit_time_s = 0.0
        self.commit_time_max_s = 0.0
        # source-task-metrics / sink-task-metrics
        self.polled = 0  # source: polled; sink: read from Kafka
        self.written = 0  # source: handed to the producer; sink: put into the task
        self.active = 0  # not yet covered by an offset commit
        self.batch_time_s = 0.0  # source: poll(); sink: put()
        self.batch_time_max_s = 0.0
        self.timed_batches = 0
        self.commit_skipped = 0
        # source, exactly once: records per committed transaction (transaction-size-*)
        self.transactions = 0
        self.transaction_records = 0
        self.transaction_min = 0
        self.transaction_max = 0
        self.partitions = 0
        self.lag: list[Lag] = []
        #: What the task reports of its own system (connectors.api.metrics), as plain tuples.
        self.own: list[tuple[str, dict[str, str], dict[str, float]]] = []
        self.next_own = 0.0

    # -- runner thread ----------------------------------------------------------------------------

    def batch(self, read: int, written: int, seconds: float) -> None:
        """One batch: ``read`` records in, ``written`` out, ``seconds`` in the task's call."""
        self.batches += 1
        self.batch_records += read
        if read > self.batch_size_max:
            self.batch_size_max = read
        self.polled += read
        self.written += written
        self.active += read
        self.timed_batches += 1
        self.batch_time_s += seconds
        if seconds > self.batch_time_max_s:
            self.batch_time_max_s = seconds

    def committed(self, ok: bool, seconds: float, skipped: bool = False) -> None:
        """An offset commit attempt; ``skipped``: there was nothing new to commit."""
        if skipped:
            self.commit_skipped += 1
            self.active = 0
            return
        if ok:
            self.commit_success += 1
            self.active = 0
        else:
            self.commit_failure += 1
        self.commit_time_s += seconds
        if seconds > self.commit_time_max_s:
            self.commit_time_max_s = seconds

    def transaction(self, records: int) -> None:
        """An exactly-once source task committed a transaction of ``records`` records."""
        if not self.transactions or records < self.transaction_min:
            self.transaction_min = records
        if records > self.transaction_max:
            self.transaction_max = records
        self.transactions += 1
        self.transaction_records += records

    def ask_task(self, task: Any, now: float) -> None:
        """Refresh the task's own metrics (``sluice.connectors.api.metrics``) when they are due, and
        pass on its degraded notice (``ReportsDegraded``); a task whose ``metrics()`` fails is
        logged, never failed, for it."""
        self.next_own = now + METRICS_INTERVAL_S
        try:
            self.own = [(g.prefix, dict(g.labels), dict(g.values)) for g in task.metrics()]
        except Exception:
            log.warning("metrics() of %s failed", type(task).__name__, exc_info=True)
            self.next_own = now + 30 * METRICS_INTERVAL_S
            return
        if self._on_notice is not None and isinstance(task, ReportsDegraded):
            try:
                notice = task.degraded_notice()
            except Exception:
                log.warning("degraded_notice() of %s failed", type(task).__name__, exc_info=True)
                self.next_own = now + 30 * METRICS_INTERVAL_S
                return
            self._on_notice(type(task).__name__, notice)

    def paused(self, now_paused: bool) -> None:
        """The task entered (``True``) or left a pause."""
        now = self._clock()
        if now_paused and self._paused_at is None:
            self._paused_at = now
        elif not now_paused and self._paused_at is not None:
            self.paused_s += now - self._paused_at
            self._paused_at = None

    # -- any thread -------------------------------------------------------------------------------

    def snapshot(self, errors: dict[str, int] | None = None) -> dict[str, Any]:
        """Connect's groups and attributes as plain data (picklable, for the task-process pipe)."""
        now = self._clock()
        elapsed = max(now - self.started, 1e-9)
        paused = self.paused_s + (now - self._paused_at if self._paused_at is not None else 0.0)
        commits = self.commit_success + self.commit_failure
        out: dict[str, Any] = {
            "connector-task-metrics": {
                "pause-ratio": min(1.0, paused / elapsed),
                "running-ratio": max(0.0, 1.0 - paused / elapsed),
                "batch-size-avg": self.batch_records / self.batches if self.batches else 0.0,
                "batch-size-max": self.batch_size_max,
                "offset-commit-avg-time-ms": 1000 * self.commit_time_s / commits if commits else 0.0,
                "offset-commit-max-time-ms": 1000 * self.commit_time_max_s,
                "offset-commit-success-percentage": self.commit_success / commits if commits else 0.0,
                "offset-commit-failure-percentage": self.commit_failure / commits if commits else 0.0,
            },
            "task-error-metrics": dict(errors or {}),
            "own": list(self.own),
        }
        avg_ms = 1000 * self.batch_time_s / self.timed_batches if self.timed_batches else 0.0
        if self.kind == "source":
            out["source-task-metrics"] = {
                "source-record-poll-total": self.polled,
                "source-record-write-total": self.written,
                "source-record-active-count": self.active,
                "poll-batch-avg-time-ms": avg_ms,
                "poll-batch-max-time-ms": 1000 * self.batch_time_max_s,
            }
            if self.transactions:
                out["source-task-metrics"].update(
                    {
                        "transaction-size-min": self.transaction_min,
                        "transaction-size-max": self.transaction_max,
                        "transaction-size-avg": self.transaction_records / self.transactions,
                    }
                )
        else:
            lag = list(self.lag)
            out["sink-task-metrics"] = {
                "sink-record-read-total": self.polled,
                "sink-record-send-total": self.written,
                "sink-record-active-count": self.active,
                "put-batch-avg-time-ms": avg_ms,
                "put-batch-max-time-ms": 1000 * self.batch_time_max_s,
                "partition-count": self.partitions,
                "offset-commit-completion-total": self.commit_success,
                "offset-commit-skip-total": self.commit_skipped,
                "sink-record-lag-max": max((x[2] for x in lag), default=0),
            }
            out["lag"] = lag
        return out


def register(task_id: Hashable, source: Any) -> None:
    """Make ``source`` (anything with ``metrics_snapshot() -> dict | None``) scraped as ``task_id``."""
    _LIVE[task_id] = source


def live_snapshots() -> dict[Hashable, dict[str, Any]]:
    """Every live task's snapshot, by task id (ended tasks answer ``None`` and are left out)."""
    out: dict[Hashable, dict[str, Any]] = {}
    for task_id, source in list(_LIVE.items()):
        snap = source.metrics_snapshot()
        if snap is not None:
            out[task_id] = snap
    return out


def time_lag(records: int, last_timestamp_ms: int | None, now_s: float) -> float | None:
    """A partition's lag in seconds, approximated (Kafka gives none): 0 when it has no record lag,
    else how old the last record the task consumed from it is (an upper bound of how far behind
    the data the task works on is); ``None`` before the task consumed anything from it."""
    if records <= 0:
        return 0.0
    if last_timestamp_ms is None:
        return None
    return max(0.0, now_s - last_timestamp_ms / 1000)


def consumer_lag(
    stats: dict[str, Any],
    positions: dict[Any, int],
    read_committed: bool,
    timestamps: Mapping[Any, int] | None = None,
    now_s: float | None = None,
) -> list[Lag]:
    """Lag per assigned partition from librdkafka's statistics: the end of the partition (the
    last stable offset under ``read_committed``) minus the consumer's position. ``positions``
    maps ``(topic, partition)`` to the next offset to consume, where the runner knows it;
    otherwise librdkafka's own position (or the committed offset) counts. ``timestamps`` maps
    ``(topic, partition)`` to the timestamp (ms) of the last record consumed from it, for
    :func:`time_lag` at ``now_s`` (default: now)."""
    timestamps = timestamps or {}
    now_s = time.time() if now_s is None else now_s
    out: list[Lag] = []
    for topic, t in (stats.get("topics") or {}).items():
        for key, p in (t.get("partitions") or {}).items():
            partition = int(key)
            if partition < 0 or p.get("fetch_state") in (None, "none", "stopped"):
                continue
            end = p.get("ls_offset" if read_committed else "hi_offset", -1)
            if end is None or end < 0:
                continue
            position = positions.get((topic, partition))
            if position is None:
                position = p.get("app_offset", -1)
                if position is None or position < 0:
                    position = p.get("committed_offset", -1)
            if position is None or position < 0:
                continue
            records = max(0, end - position)
            out.append((topic, partition, records, time_lag(records, timestamps.get((topic, partition)), now_s)))
    return out


class StartupCounters:
    """Connect's ``connect-worker-metrics`` startup counters of one worker process.

    The worker counts attempts as it builds connectors and tasks; the herder reports how a task's
    start ended (its first state, or a failure before one), and a connector's failed start.
    """

    def __init__(self) -> None:
        self.connector_attempts = 0
        self.connector_failures = 0
        self.task_attempts = 0
        self.task_successes = 0
        self.task_failures = 0
        self._starting: set[Hashable] = set()

    def task_attempt(self, task_id: Hashable) -> None:
        self.task_attempts += 1
        self._starting.add(task_id)

    def task_started(self, task_id: Hashable) -> None:
        if task_id in self._starting:
            self._starting.discard(task_id)
            self.task_successes += 1

    def task_failed(self, task_id: Hashable) -> None:
        if task_id in self._starting:
            self._starting.discard(task_id)
            self.task_failures += 1

    def snapshot(self) -> dict[str, float]:
        """The counters under Connect's attribute names."""
        connector_ok = max(0, self.connector_attempts - self.connector_failures)
        return {
            "connector-startup-attempts-total": self.connector_attempts,
            "connector-startup-success-total": connector_ok,
            "connector-startup-failure-total": self.connector_failures,
            "connector-startup-success-percentage": _share(connector_ok, self.connector_attempts),
            "connector-startup-failure-percentage": _share(self.connector_failures, self.connector_attempts),
            "task-startup-attempts-total": self.task_attempts,
            "task-startup-success-total": self.task_successes,
            "task-startup-failure-total": self.task_failures,
            "task-startup-success-percentage": _share(self.task_successes, self.task_attempts),
            "task-startup-failure-percentage": _share(self.task_failures, self.task_attempts),
        }


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0
