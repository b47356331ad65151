"""Debezium's streaming and snapshot metrics of a CDC task, for ``GET /metrics``
(:mod:`sluice.connectors.api.metrics`), under Debezium's names as the common JMX exporter rules
render its MBean attributes (``debezium_metrics_<Attribute>{plugin,name,context}``):

* streaming: ``TotalNumberOfEventsSeen``, ``MilliSecondsSinceLastEvent``,
  ``MilliSecondsBehindSource`` (as Debezium: the commit time of the last event's transaction vs
  the time the task processed it; -1 before the first), ``Connected``;
* snapshot: ``SnapshotRunning``, ``SnapshotCompleted``, ``SnapshotPaused`` (an incremental
  snapshot held by ``pause-snapshot``), ``SnapshotAborted`` (a ``stop-snapshot`` dropped tables
  of the last snapshot; 0 again when one starts), ``TotalTableCount``,
  ``RemainingTableCount``, and ``RowsScanned`` per table (a ``table`` label, ``schema.table``).

Events are counted per poll, never per record. A database source adds its own families (a
PostgreSQL slot's lag) by extending :class:`DebeziumMetrics`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sluice.connectors.api.metrics import TaskMetricGroup


class DebeziumMetrics:
    """One task's streaming and snapshot figures. ``plugin`` is Debezium's label of the database
    (``postgres``), ``name`` the connector's ``topic.prefix``. Thread: the task thread."""

    def __init__(
        self,
        plugin: str,
        name: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._wall_clock = wall_clock
        self._labels = {"plugin": plugin, "name": name}
        self.events_seen = 0
        self.last_event_at: float | None = None
        self.ms_behind_source = -1
        #: The tables of the snapshot, for TotalTableCount (the task sets it when it plans one).
        self.snapshot_tables = 0

    def seen(self, events: int, commit_us: int) -> None:
        """A poll handed out ``events`` change events; the latest transaction committed at ``commit_us``."""
        if not events:
            return
        self.events_seen += events
        self.last_event_at = self._clock()
        if commit_us > 0:
            self.ms_behind_source = max(0, int(self._wall_clock() * 1000) - commit_us // 1000)

    def groups(
        self,
        *,
        connected: bool,
        snapshot_running: bool,
        remaining_tables: int,
        rows_scanned: dict[str, int],
        snapshot_paused: bool = False,
        snapshot_aborted: bool = False,
    ) -> list[TaskMetricGroup]:
        """The task's metric groups as of now."""
        now = self._clock()
        self.snapshot_tables = max(self.snapshot_tables, remaining_tables)
        since = -1 if self.last_event_at is None else int((now - self.last_event_at) * 1000)
        streaming = {**self._labels, "context": "streaming"}
        snapshot = {**self._labels, "context": "snapshot"}
        groups = [
            TaskMetricGroup("debezium_metrics", streaming, {
                "TotalNumberOfEventsSeen": self.events_seen,
                "MilliSecondsSinceLastEvent": since,
                "MilliSecondsBehindSource": self.ms_behind_source,
                "Connected": 1 if connected else 0,
            }),
            TaskMetricGroup("debezium_metrics", snapshot, {
                "SnapshotRunning": 1 if snapshot_running else 0,
                "SnapshotCompleted": 1 if self.snapshot_tables and not snapshot_running and not snapshot_aborted else 0,
                "SnapshotPaused": 1 if snapshot_paused else 0,
                "SnapshotAborted": 1 if snapshot_aborted else 0,
                "TotalTableCount": self.snapshot_tables,
                "RemainingTableCount": remaining_tables,
            }),
        ]  # fmt: skip
        for table, rows in sorted(rows_scanned.items()):
            groups.append(TaskMetricGroup("debezium_metrics", {**snapshot, "table": table}, {"RowsScanned": rows}))
        return groups
