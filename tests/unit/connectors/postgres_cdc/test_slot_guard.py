"""The slot guard's thresholds (warn point, bound, the three actions, coming back under) and the
figures a CDC task reports for ``GET /metrics``; no database."""

from __future__ import annotations

import logging

import pytest

from sluice.connectors.api import ConnectError
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig, SlotWalAction
from sluice.connectors.source.postgres_cdc.metrics import SLOT_QUERY_INTERVAL_S, CdcMetrics
from sluice.connectors.source.postgres_cdc.slot_guard import REPEAT_WARNING_S, SlotUsage, SlotWalGuard

MiB = 1 << 20


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def guard(action: SlotWalAction = SlotWalAction.DEGRADE, ratio: float = 0.8) -> tuple[SlotWalGuard, Clock]:
    clock = Clock()
    return SlotWalGuard("orders_slot", 100 * MiB, warn_ratio=ratio, action=action, clock=clock), clock


def lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and r.name.endswith("slot_guard")]


def config(**extra: str) -> PostgresCdcConfig:
    return PostgresCdcConfig.parse({"database.dbname": "shop", "topic.prefix": "shop", "slot.name": "orders_slot", **extra})


def test_the_guard_is_off_by_default_and_heartbeats_are_on() -> None:
    cfg = config()
    assert cfg.slot_max_retained_wal_bytes == 0 and cfg.heartbeat_interval_ms == 10_000
    assert cfg.slot_retained_wal_warn_ratio == 0.8 and cfg.slot_retained_wal_action is SlotWalAction.DEGRADE
    off = CdcMetrics(cfg).guard
    off.check(1 << 40)
    assert not off.enabled and off.notice is None and off.failure is None


@pytest.mark.parametrize("bad", [{"slot.retained.wal.warn.ratio": "0"}, {"slot.retained.wal.warn.ratio": "1.5"},
                                 {"slot.retained.wal.action": "drop"}, {"slot.max.retained.wal.bytes": "-1"}])
def test_bad_guard_settings_are_refused(bad: dict[str, str]) -> None:
    with pytest.raises(ConnectError) as info:
        config(**bad)
    assert next(iter(bad)) in str(info.value)


def test_below_the_warn_point_nothing_happens(caplog: pytest.LogCaptureFixture) -> None:
    g, _ = guard()
    with caplog.at_level(logging.INFO):
        g.check(79 * MiB)
        g.check(None)  # the server could not be asked: nothing changes
    assert caplog.records == [] and g.notice is None


def test_past_the_warn_point_a_warning_names_slot_bytes_and_bound_and_repeats_only_every_few_minutes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    g, clock = guard()
    with caplog.at_level(logging.INFO):
        g.check(80 * MiB)
        g.check(90 * MiB)
        clock.now += REPEAT_WARNING_S
        g.check(95 * MiB)
        g.check(10 * MiB)
    warned = lines(caplog, logging.WARNING)
    assert len(warned) == 2
    assert "orders_slot" in warned[0] and str(80 * MiB) in warned[0] and f"slot.max.retained.wal.bytes={100 * MiB}" in warned[0]
    assert "80%" in warned[0] and str(95 * MiB) in warned[1]
    assert g.notice is None  # under the bound: a warning only
    assert lines(caplog, logging.INFO) == [f"Replication slot orders_slot retains {10 * MiB} bytes of WAL, under the warning point again"]


def test_at_the_bound_the_task_is_degraded_with_what_to_do_until_it_is_back_under(caplog: pytest.LogCaptureFixture) -> None:
    g, _ = guard()
    with caplog.at_level(logging.INFO):
        g.check(100 * MiB)
        notice = g.notice
        g.check(150 * MiB)
    assert notice is not None and g.notice == notice  # stable while it lasts: each change is a status write
    assert f"orders_slot retains {100 * MiB} bytes" in notice and f"slot.max.retained.wal.bytes={100 * MiB}" in notice
    for advice in ("resume it", "pg_drop_replication_slot('orders_slot')", "snapshot.mode=when_needed", "raise slot.max.retained.wal.bytes"):
        assert advice in notice
    assert lines(caplog, logging.ERROR) == [notice]
    assert g.failure is None
    with caplog.at_level(logging.INFO):
        g.check(99 * MiB)  # under the bound, still past the warn point
    assert g.notice is None
    assert any("back under slot.max.retained.wal.bytes" in line for line in lines(caplog, logging.INFO))
    g.check(120 * MiB)  # over again: a new notice
    assert g.notice is not None and str(120 * MiB) in g.notice


def test_action_warn_only_logs_and_action_fail_fails_the_task() -> None:
    warn, _ = guard(SlotWalAction.WARN)
    warn.check(200 * MiB)
    assert warn.notice is None and warn.failure is None
    fail, _ = guard(SlotWalAction.FAIL)
    fail.check(99 * MiB)
    assert fail.failure is None
    fail.check(100 * MiB)
    assert fail.notice is not None and fail.failure is not None
    assert str(fail.failure).startswith(fail.notice) and "slot.retained.wal.action=fail" in str(fail.failure)


def test_a_warn_ratio_of_one_warns_only_at_the_bound(caplog: pytest.LogCaptureFixture) -> None:
    g, _ = guard(ratio=1.0)
    with caplog.at_level(logging.WARNING):
        g.check(100 * MiB - 1)
    assert lines(caplog, logging.WARNING) == []


def test_cdc_metrics_carry_debezium_names_rows_per_table_and_the_slot() -> None:
    clock, wall = Clock(), Clock()
    wall.now = 1_767_225_600.0
    m = CdcMetrics(config(**{"slot.max.retained.wal.bytes": str(100 * MiB)}), clock=clock, wall_clock=wall)
    m.snapshot_tables = 2
    assert m.slot_query_due() and not m.slot_query_due()
    clock.now += SLOT_QUERY_INTERVAL_S
    assert m.slot_query_due()
    m.slot_measured(SlotUsage(lag_bytes=5 * MiB, retained_wal_bytes=120 * MiB))
    m.slot_measured(None)  # no answer: the last figures stay
    m.seen(0, 0)
    assert m.ms_behind_source == -1
    m.seen(3, int((wall.now - 2.5) * 1_000_000))  # the transaction committed 2.5 s before it was processed
    clock.now += 1.0
    groups = m.groups(connected=True, snapshot_running=False, remaining_tables=0,
                      rows_scanned={"public.orders": 10, "public.items": 4})
    by = {(g.prefix, tuple(sorted(g.labels.items()))): dict(g.values) for g in groups}
    base = (("name", "shop"), ("plugin", "postgres"))
    streaming = by[("debezium_metrics", (("context", "streaming"), *base))]
    assert streaming == {"TotalNumberOfEventsSeen": 3, "MilliSecondsSinceLastEvent": 1000,
                         "MilliSecondsBehindSource": 2500, "Connected": 1}
    snapshot = by[("debezium_metrics", (("context", "snapshot"), *base))]
    assert snapshot == {"SnapshotRunning": 0, "SnapshotCompleted": 1, "SnapshotPaused": 0, "SnapshotAborted": 0,
                        "TotalTableCount": 2, "RemainingTableCount": 0}
    assert by[("debezium_metrics", (("context", "snapshot"), *base, ("table", "public.items")))] == {"RowsScanned": 4}
    assert by[("debezium_metrics", (("context", "snapshot"), *base, ("table", "public.orders")))] == {"RowsScanned": 10}
    assert by[("sluice_postgres_replication_slot", (("slot", "orders_slot"),))] == {
        "lag_bytes": 5 * MiB, "retained_wal_bytes": 120 * MiB, "max_retained_wal_bytes": 100 * MiB,
    }
    assert m.guard.notice is not None  # the measurement fed the guard


def test_a_paused_or_aborted_snapshot_is_reported_as_debezium_names_it() -> None:
    m = CdcMetrics(config())
    m.snapshot_tables = 3

    def snapshot_values(**state: bool) -> dict[str, float]:
        groups = m.groups(connected=True, remaining_tables=1, rows_scanned={}, **state)
        return next(dict(g.values) for g in groups if g.labels.get("context") == "snapshot")

    paused = snapshot_values(snapshot_running=True, snapshot_paused=True)
    assert (paused["SnapshotRunning"], paused["SnapshotPaused"], paused["SnapshotAborted"]) == (1, 1, 0)
    aborted = snapshot_values(snapshot_running=False, snapshot_aborted=True)
    assert (aborted["SnapshotCompleted"], aborted["SnapshotAborted"]) == (0, 1)


def test_without_a_bound_the_slot_group_has_no_bound_and_without_an_answer_no_slot_group() -> None:
    m = CdcMetrics(config())
    assert [g.prefix for g in m.groups(connected=False, snapshot_running=True, remaining_tables=1, rows_scanned={})] == [
        "debezium_metrics", "debezium_metrics",
    ]
    m.slot_measured(SlotUsage(lag_bytes=1, retained_wal_bytes=2))
    slot = m.groups(connected=False, snapshot_running=True, remaining_tables=1, rows_scanned={})[-1]
    assert dict(slot.values) == {"lag_bytes": 1, "retained_wal_bytes": 2}
