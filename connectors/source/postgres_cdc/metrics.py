"""What a CDC task reports for ``GET /metrics`` (:mod:`sluice.connectors.api.metrics`).

Debezium's streaming and snapshot MBean attributes, under its names as the common JMX exporter
rules render them (``debezium_metrics_<Attribute>{plugin,name,context}``), and Sluice's own
replication slot family (``sluice_postgres_replication_slot_<figure>{slot}``):

* streaming: ``TotalNumberOfEventsSeen``, ``MilliSecondsSinceLastEvent``,
  ``MilliSecondsBehindSource`` (as Debezium: the commit time of the last event's transaction vs
  the time the task processed it; -1 before the first), ``Connected``;
* snapshot: ``SnapshotRunning``, ``SnapshotCompleted``, ``SnapshotPaused`` (an incremental
  snapshot held by ``pause-snapshot``), ``SnapshotAborted`` (a ``stop-snapshot`` dropped tables
  of the last snapshot; 0 again when one starts), ``TotalTableCount``,
  ``RemainingTableCount``, and ``RowsScanned`` per table (a ``table`` label, ``schema.table``);
* slot: ``lag_bytes`` (current WAL position − ``confirmed_flush_lsn``: what the connector has
  not confirmed), ``retained_wal_bytes`` (current − ``restart_lsn``: what the server keeps on
  disk for the slot) and, when the guard is on, ``max_retained_wal_bytes`` (its bound).

Events are counted per poll, never per record. The slot is asked about at most every
:data:`SLOT_QUERY_INTERVAL_S`; each answer also feeds the slot guard
(:mod:`sluice.connectors.source.postgres_cdc.slot_guard`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sluice.connectors.api.metrics import TaskMetricGroup
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.slot_guard import SlotUsage, SlotWalGuard

#: How often, at most, the server is asked about the replication slot.
SLOT_QUERY_INTERVAL_S = 5.0

SLOT_PREFIX = "sluice_postgres_replication_slot"


class CdcMetrics:
    """One task's figures (see the module docstring). Thread: the task thread."""

    def __init__(
        self,
        config: PostgresCdcConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._wall_clock = wall_clock
        self._labels = {"plugin": "postgres", "name": config.topic_prefix}
        self.slot = config.slot_name
        self.guard = SlotWalGuard(
            config.slot_name,
            config.slot_max_retained_wal_bytes,
            warn_ratio=config.slot_retained_wal_warn_ratio,
            action=config.slot_retained_wal_action,
            clock=clock,
        )
        self.events_seen = 0
        self.last_event_at: float | None = None
        self.ms_behind_source = -1
        self.snapshot_tables = 0
        self.usage: SlotUsage | None = None
        self._next_slot_query = 0.0

    def seen(self, events: int, commit_us: int) -> None:
        """A poll handed out ``events`` change events; the latest transaction committed at ``commit_us``."""
        if not events:
            return
        self.events_seen += events
        self.last_event_at = self._clock()
        if commit_us > 0:
            self.ms_behind_source = max(0, int(self._wall_clock() * 1000) - commit_us // 1000)

    def slot_query_due(self) -> bool:
        """Whether it is time to ask the server about the slot again (and count that as asked)."""
        now = self._clock()
        if now < self._next_slot_query:
            return False
        self._next_slot_query = now + SLOT_QUERY_INTERVAL_S
        return True

    def slot_measured(self, usage: SlotUsage | None) -> None:
        """The server's answer (``None``: no answer this time; the last figures stay)."""
        if usage is None:
            return
        self.usage = usage
        self.guard.check(usage.retained_wal_bytes)

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
        slot = self._slot_values()
        if slot:
            groups.append(TaskMetricGroup(SLOT_PREFIX, {"slot": self.slot}, slot))
        return groups

    def _slot_values(self) -> dict[str, float]:
        usage = self.usage
        values: dict[str, float] = {}
        if usage is not None and usage.lag_bytes is not None:
            values["lag_bytes"] = usage.lag_bytes
        if usage is not None and usage.retained_wal_bytes is not None:
            values["retained_wal_bytes"] = usage.retained_wal_bytes
        if values and self.guard.enabled:
            values["max_retained_wal_bytes"] = self.guard.max_bytes
        return values
