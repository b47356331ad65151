"""What a PostgreSQL CDC task reports for ``GET /metrics`` (:mod:`sluice.connectors.api.metrics`).

Debezium's streaming and snapshot figures (:mod:`sluice.connectors.cdc.metrics`, ``plugin``
``postgres``) and Sluice's own replication slot family
(``sluice_postgres_replication_slot_<figure>{slot}``): ``lag_bytes`` (current WAL position −
``confirmed_flush_lsn``: what the connector has not confirmed), ``retained_wal_bytes`` (current −
``restart_lsn``: what the server keeps on disk for the slot) and, when the guard is on,
``max_retained_wal_bytes`` (its bound).

The slot is asked about at most every :data:`SLOT_QUERY_INTERVAL_S`; each answer also feeds the
slot guard (:mod:`sluice.connectors.source.postgres_cdc.slot_guard`).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sluice.connectors.api.metrics import TaskMetricGroup
from sluice.connectors.cdc.metrics import DebeziumMetrics
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.slot_guard import SlotUsage, SlotWalGuard

#: How often, at most, the server is asked about the replication slot.
SLOT_QUERY_INTERVAL_S = 5.0

SLOT_PREFIX = "sluice_postgres_replication_slot"


class CdcMetrics(DebeziumMetrics):
    """One task's figures (see the module docstring). Thread: the task thread."""

    def __init__(
        self,
        config: PostgresCdcConfig,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__("postgres", config.topic_prefix, clock=clock, wall_clock=wall_clock)
        self.slot = config.slot_name
        self.guard = SlotWalGuard(
            config.slot_name,
            config.slot_max_retained_wal_bytes,
            warn_ratio=config.slot_retained_wal_warn_ratio,
            action=config.slot_retained_wal_action,
            clock=clock,
        )
        self.usage: SlotUsage | None = None
        self._next_slot_query = 0.0

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
        """Debezium's groups, then the slot's (once the server answered)."""
        groups = super().groups(
            connected=connected,
            snapshot_running=snapshot_running,
            remaining_tables=remaining_tables,
            rows_scanned=rows_scanned,
            snapshot_paused=snapshot_paused,
            snapshot_aborted=snapshot_aborted,
        )
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
