"""Each connector's sampled throughput, errors and lag (the console's charts), and the cluster's merge of it."""

from __future__ import annotations

from typing import Any

from sluice.worker.observability.history import ConnectorHistory, merge
from sluice.worker.status import ConnectorTaskId


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _source(polled: int, written: int, errors: int = 0) -> dict[str, Any]:
    return {
        "source-task-metrics": {"source-record-poll-total": polled, "source-record-write-total": written},
        "task-error-metrics": {"total-record-errors": errors},
    }


def _sink(read: int, sent: int, lags: list[int]) -> dict[str, Any]:
    return {
        "sink-task-metrics": {"sink-record-read-total": read, "sink-record-send-total": sent},
        "task-error-metrics": {},
        "lag": [("t", i, lag, None) for i, lag in enumerate(lags)],
    }


def test_rates_come_from_consecutive_samples_summed_over_the_connectors_tasks() -> None:
    clock = Clock(1_000.0)
    snaps: dict[Any, dict[str, Any]] = {}
    history = ConnectorHistory(10_000, 3_600_000, snapshots=lambda: snaps, clock=clock)
    src0, src1, sink0 = ConnectorTaskId("src", 0), ConnectorTaskId("src", 1), ConnectorTaskId("snk", 0)
    readings = [
        {src0: _source(0, 0), src1: _source(0, 0), sink0: _sink(0, 0, [5, 5])},
        {src0: _source(100, 90, 1), src1: _source(50, 50), sink0: _sink(40, 40, [3, 0])},
        {src0: _source(300, 290, 1), src1: _source(150, 150), sink0: _sink(80, 80, [0, 0])},
    ]
    for reading in readings:
        snaps.clear()
        snaps.update(reading)
        snaps["a backfill, not a task"] = _source(10**6, 10**6)
        history.sample()
        clock.now += 10
    assert history.points("src", 60_000) == [
        {"at": 1_010_000, "in": 15.0, "out": 14.0, "errors": 1.0, "lag": None},
        {"at": 1_020_000, "in": 30.0, "out": 30.0, "errors": 0.0, "lag": None},
    ]
    assert [(p["in"], p["lag"]) for p in history.points("snk", 60_000)] == [(4.0, 3.0), (4.0, 0.0)]
    assert history.points("src", 15_000) == history.points("src", 60_000)[1:]  # the span counts back from now
    assert history.points("nothing", 60_000) == []


def test_a_restarted_task_never_makes_a_negative_rate_and_old_samples_age_out() -> None:
    clock = Clock(2_000.0)
    snaps: dict[Any, dict[str, Any]] = {ConnectorTaskId("c", 0): _source(500, 500)}
    history = ConnectorHistory(10_000, 30_000, snapshots=lambda: snaps, clock=clock)
    history.sample()
    clock.now += 10
    snaps[ConnectorTaskId("c", 0)] = _source(20, 20)  # counters start again with the task
    history.sample()
    assert [p["out"] for p in history.points("c", 60_000)] == [0.0]
    clock.now += 20  # a missed sample: no rate over a gap
    history.sample()
    assert [p["at"] for p in history.points("c", 60_000)] == [2_010_000]
    snaps.clear()  # the connector's tasks left this worker: its samples go once they are older than the span
    for _ in range(4):
        clock.now += 10
        history.sample()
    assert history.points("c", 60_000) == []


def test_the_cluster_sums_each_workers_rates_instant_by_instant() -> None:
    a = [{"at": 10, "in": 1.0, "out": 1.0, "errors": 0.0, "lag": None}, {"at": 20, "in": 2.0, "out": 2.0, "errors": 1.0, "lag": 4.0}]
    b = [{"at": 20, "in": 3.0, "out": 3.0, "errors": 0.0, "lag": 6.0}, {"at": 30, "in": 1.0, "out": 0.0, "errors": 0.0, "lag": None}]
    assert merge([a, b]) == [
        {"at": 10, "in": 1.0, "out": 1.0, "errors": 0.0, "lag": None},
        {"at": 20, "in": 5.0, "out": 5.0, "errors": 1.0, "lag": 10.0},
        {"at": 30, "in": 1.0, "out": 0.0, "errors": 0.0, "lag": None},
    ]
