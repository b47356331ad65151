"""A task's own degraded notice (``connectors.api.metrics.ReportsDegraded``): asked on the metrics
cadence, shown in the status trace at once, cleared when withdrawn, kept while paused."""

from __future__ import annotations

import time

from sluice.connectors.api.metrics import TaskMetricGroup
from sluice.worker.observability.task_metrics import TaskMetrics
from sluice.worker.runners import WorkerTask
from sluice.worker.status import ConnectorTaskId, TargetState

from .test_outages import Events, tracker

TASK = ConnectorTaskId("c", 0)


class SlotTask:
    """Reports a metric and, while ``over`` is set, a degraded notice."""

    def __init__(self) -> None:
        self.over: str | None = None

    def metrics(self) -> list[TaskMetricGroup]:
        return [TaskMetricGroup("x", {}, {"retained": 1})]

    def degraded_notice(self) -> str | None:
        return self.over


class Broken(SlotTask):
    def degraded_notice(self) -> str | None:
        raise RuntimeError("bug")


def test_a_notice_degrades_at_once_stays_stable_and_clears() -> None:
    t, clock, reports = tracker(bound_s=10.0)
    metrics, task = TaskMetrics("source", on_notice=t.notice), SlotTask()
    metrics.ask_task(task, clock())
    assert reports.events == [] and metrics.own == [("x", {}, {"retained": 1})]
    task.over = "Replication slot s retains too much WAL"
    metrics.ask_task(task, clock())
    metrics.ask_task(task, clock())  # the same notice again: no second status write
    assert reports.events == [("degraded", "Degraded since 2026-01-01T00:00:00Z: Replication slot s retains too much WAL")]
    task.over = None
    metrics.ask_task(task, clock())
    assert reports.events[-1] == ("recovered", None) and len(reports.events) == 2


def test_a_notice_joins_an_outage_in_one_trace() -> None:
    t, clock, reports = tracker(bound_s=0.0)
    t.failure("Kafka at k:9092", "Connection refused")
    t.notice("SlotTask", "slot over its bound")
    trace = reports.events[-1][1] or ""
    assert trace.splitlines() == [
        "Degraded since 2026-01-01T00:00:00Z: cannot reach Kafka at k:9092 (Connection refused); 1 retries",
        "Degraded since 2026-01-01T00:00:00Z: slot over its bound",
    ]
    t.reached("Kafka at k:9092")
    assert reports.events[-1] == ("degraded", "Degraded since 2026-01-01T00:00:00Z: slot over its bound")


def test_a_failing_degraded_notice_is_logged_never_fatal() -> None:
    t, clock, reports = tracker()
    metrics = TaskMetrics("source", on_notice=t.notice)
    metrics.ask_task(Broken(), clock())
    assert reports.events == [] and metrics.own  # the metrics still arrived


def test_a_runner_reports_its_tasks_notice_and_a_paused_one_on_resume() -> None:
    events = Events()

    class Runner(WorkerTask):
        task = SlotTask()

        def initialize(self) -> None:
            pass

        def execute(self) -> None:
            while self.await_unpaused():
                self.metrics.ask_task(self.task, time.monotonic())
                time.sleep(0.01)

        def _while_paused(self) -> None:
            self.metrics.ask_task(self.task, time.monotonic())

        def _paused_wait_s(self) -> float:
            return 0.02

        def close(self) -> None:
            pass

    runner = Runner(TASK, events, TargetState.PAUSED)  # type: ignore[arg-type]
    runner.start()
    try:
        Runner.task.over = "slot over its bound"
        deadline = time.monotonic() + 5
        while not runner.outages.degraded and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runner.outages.degraded and not [e for e in events.events if e[0] == "degraded"]  # PAUSED stays PAUSED
        runner.transition_to(TargetState.STARTED)
        events.wait(lambda e: e[0] == "degraded" and "slot over its bound" in (e[1] or ""))
        Runner.task.over = None
        events.wait(lambda e: e[0] == "recovered")
    finally:
        runner.stop()
        assert runner.await_stop(5)
