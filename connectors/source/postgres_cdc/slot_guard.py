"""Slot safety: a bound on the WAL a replication slot makes the server keep.

A logical slot pins every WAL segment from its ``restart_lsn`` on. A connector that stops
confirming — paused, stuck behind an unreachable Kafka, failed, or falling behind — makes the
server keep WAL until its disk fills, the most reported CDC outage. PostgreSQL's own bound
(``max_slot_wal_keep_size``) invalidates the slot, which costs a re-snapshot; this guard acts
earlier and tells the operator first.

:class:`SlotWalGuard` is fed the slot's figures (:class:`SlotUsage`, one query on the task's
metrics cadence) and, with ``slot.max.retained.wal.bytes`` set:

* past ``slot.retained.wal.warn.ratio`` of the bound, logs a warning naming the slot, the bytes
  and the bound (again at most every :data:`REPEAT_WARNING_S` while it lasts);
* at the bound, under ``slot.retained.wal.action``: ``warn`` logs an error and does no more;
  ``degrade`` (the default) also gives the task a degraded notice (its status shows it while it
  keeps streaming); ``fail`` also fails the task with a message saying what to do;
* back under the bound, clears the notice; under the warn point, says so once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import psycopg

from sluice.connectors.api import ConnectError
from sluice.connectors.source.postgres_cdc.config import SlotWalAction

log = logging.getLogger(__name__)

#: While the slot stays past the warn point or the bound, the warning is repeated this often.
REPEAT_WARNING_S = 300.0

_USAGE_SQL = (
    "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint,"
    " pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint"
    " FROM pg_replication_slots WHERE slot_name = %s"
)


class SlotUsage(NamedTuple):
    """What the server says of one slot, in bytes behind its current WAL position."""

    lag_bytes: int | None  # from confirmed_flush_lsn: what the connector has not confirmed yet
    retained_wal_bytes: int | None  # from restart_lsn: what the server must keep on disk


def query_slot_usage(conn: psycopg.Connection[Any], slot: str) -> SlotUsage | None:
    """The slot's lag and retained WAL, or ``None`` when there is no such slot."""
    row = conn.execute(_USAGE_SQL, (slot,)).fetchone()
    if row is None:
        return None
    return SlotUsage(_int(row[0]), _int(row[1]))


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


class SlotWalGuard:
    """Applies the bound to one slot (see the module docstring). Fed and read on the task thread."""

    def __init__(
        self,
        slot: str,
        max_bytes: int,
        *,
        warn_ratio: float = 0.8,
        action: SlotWalAction = SlotWalAction.DEGRADE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.slot = slot
        self.max_bytes = max_bytes
        self.warn_bytes = int(max_bytes * warn_ratio)
        self.action = action
        self._clock = clock
        self._warned = False
        self._over = False
        self._next_warning = 0.0
        #: The degraded notice while the slot is at or past the bound (action degrade or fail).
        self.notice: str | None = None
        #: Set at the bound with action fail: the task raises it from its next poll.
        self.failure: ConnectError | None = None

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def check(self, retained: int | None) -> None:
        """Apply the bound to the slot's retained WAL (``None``: unknown this time, nothing changes)."""
        if not self.enabled or retained is None:
            return
        now = self._clock()
        if retained >= self.max_bytes:
            self._at_bound(retained, now)
        elif self._over:
            self._over = False
            self.notice = None
            log.info(
                "Replication slot %s is back under slot.max.retained.wal.bytes: %d bytes of WAL retained (bound %d)",
                self.slot, retained, self.max_bytes,
            )  # fmt: skip
        if self.warn_bytes <= retained < self.max_bytes:
            self._past_warn_point(retained, now)
        elif retained < self.warn_bytes and self._warned:
            self._warned = False
            log.info("Replication slot %s retains %d bytes of WAL, under the warning point again", self.slot, retained)

    def _past_warn_point(self, retained: int, now: float) -> None:
        if self._warned and now < self._next_warning:
            return
        self._warned = True
        self._next_warning = now + REPEAT_WARNING_S
        log.warning(
            "Replication slot %s retains %d bytes of WAL, %.0f%% of slot.max.retained.wal.bytes=%d: the connector is "
            "not confirming changes as fast as the database writes them",
            self.slot, retained, 100 * retained / self.max_bytes, self.max_bytes,
        )  # fmt: skip

    def _at_bound(self, retained: int, now: float) -> None:
        first = not self._over
        self._over = self._warned = True
        if not first and now < self._next_warning:
            return
        self._next_warning = now + REPEAT_WARNING_S
        advice = self.advice(retained)
        log.error("%s", advice)
        if self.action is SlotWalAction.WARN:
            return
        if first:  # the notice stays as it was when the bound was reached: each change is a status write
            self.notice = advice
        if self.action is SlotWalAction.FAIL and self.failure is None:
            self.failure = ConnectError(advice + " The task was failed (slot.retained.wal.action=fail).")

    def advice(self, retained: int) -> str:
        """What the operator reads in the log, the degraded notice and the failure."""
        return (
            f"Replication slot {self.slot} retains {retained} bytes of WAL, at or over slot.max.retained.wal.bytes="
            f"{self.max_bytes}: the server keeps that WAL on disk until the connector confirms it. If the connector "
            "is paused, resume it; if its task cannot deliver (Kafka unreachable, errors), fix that so it catches up; "
            "if it cannot catch up in time, drop the slot (SELECT pg_drop_replication_slot('"
            f"{self.slot}')) and restart the connector with a snapshot (snapshot.mode=when_needed); or raise "
            "slot.max.retained.wal.bytes if the disk has room."
        )
