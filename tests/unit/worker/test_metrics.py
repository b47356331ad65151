"""``GET /metrics`` building blocks: task counters, consumer lag, rates and the text format."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from sluice.worker.herder.stores.status_store import StatusStore
from sluice.worker.observability.metrics import Exposition, MetricsCollector, RateWindow
from sluice.worker.observability.task_metrics import StartupCounters, TaskMetrics, consumer_lag, register, time_lag
from sluice.worker.status import ConnectorTaskId, State, Status


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_source_counters_follow_batches_and_commits() -> None:
    clock = _Clock()
    m = TaskMetrics("source", clock)
    m.batch(10, 8, 0.002)
    m.batch(30, 30, 0.004)
    clock.now += 10
    snap = m.snapshot({"total-record-errors": 2})
    source = snap["source-task-metrics"]
    assert source["source-record-poll-total"] == 40 and source["source-record-write-total"] == 38
    assert source["source-record-active-count"] == 40
    assert source["poll-batch-max-time-ms"] == pytest.approx(4.0) and source["poll-batch-avg-time-ms"] == pytest.approx(3.0)
    task = snap["connector-task-metrics"]
    assert task["batch-size-avg"] == 20 and task["batch-size-max"] == 30 and task["running-ratio"] == 1.0
    assert snap["task-error-metrics"] == {"total-record-errors": 2}
    m.committed(True, 0.010)
    m.committed(False, 0.030)
    task = m.snapshot()["connector-task-metrics"]
    assert task["offset-commit-max-time-ms"] == pytest.approx(30) and task["offset-commit-avg-time-ms"] == pytest.approx(20)
    assert task["offset-commit-success-percentage"] == 0.5 and m.snapshot()["source-task-metrics"]["source-record-active-count"] == 0


def test_pause_ratio_counts_time_paused() -> None:
    clock = _Clock()
    m = TaskMetrics("sink", clock)
    clock.now += 5
    m.paused(True)
    clock.now += 5
    task = m.snapshot()["connector-task-metrics"]
    assert task["pause-ratio"] == pytest.approx(0.5) and task["running-ratio"] == pytest.approx(0.5)
    m.paused(False)
    clock.now += 10
    assert m.snapshot()["connector-task-metrics"]["pause-ratio"] == pytest.approx(0.25)


def test_consumer_lag_uses_the_runners_position_and_the_right_end() -> None:
    stats = {
        "topics": {
            "t": {
                "partitions": {
                    "0": {"fetch_state": "active", "hi_offset": 100, "ls_offset": 90, "app_offset": 50, "committed_offset": 40},
                    "1": {"fetch_state": "active", "hi_offset": 10, "ls_offset": 10, "app_offset": -1001, "committed_offset": 4},
                    "2": {"fetch_state": "none", "hi_offset": 10},
                    "-1": {"fetch_state": "none", "hi_offset": -1},
                }
            }
        }
    }
    assert consumer_lag(stats, {("t", 0): 70}, False) == [("t", 0, 30, None), ("t", 1, 6, None)]
    assert consumer_lag(stats, {}, True) == [("t", 0, 40, None), ("t", 1, 6, None)]


def test_lag_in_seconds_is_the_age_of_the_last_consumed_record_while_records_lag() -> None:
    assert time_lag(0, None, 1000.0) == 0.0  # caught up: no lag, consumed or not
    assert time_lag(0, 400_000, 1000.0) == 0.0
    assert time_lag(5, None, 1000.0) is None  # nothing consumed from the partition yet
    assert time_lag(5, 997_500, 1000.0) == pytest.approx(2.5)
    assert time_lag(5, 1_001_000, 1000.0) == 0.0  # a producer clock ahead of ours is no negative lag
    stats = {"topics": {"t": {"partitions": {
        "0": {"fetch_state": "active", "hi_offset": 100},
        "1": {"fetch_state": "active", "hi_offset": 10},
        "2": {"fetch_state": "active", "hi_offset": 8},
    }}}}
    positions = {("t", 0): 90, ("t", 1): 10, ("t", 2): 3}
    stamps = {("t", 0): 990_000, ("t", 1): 100}
    assert consumer_lag(stats, positions, False, stamps, now_s=1000.0) == [
        ("t", 0, 10, pytest.approx(10.0)),
        ("t", 1, 0, 0.0),
        ("t", 2, 5, None),
    ]


def test_rates_cover_a_sliding_window_and_survive_restarts() -> None:
    clock = _Clock()
    rates = RateWindow(clock)
    assert rates.rate(("a", "r"), 0) == 0.0
    clock.now += 10
    assert rates.rate(("a", "r"), 1000) == pytest.approx(100.0)
    clock.now += 10
    assert rates.rate(("a", "r"), 1000) == pytest.approx(50.0)
    clock.now += 10
    assert rates.rate(("a", "r"), 5) == 0.0  # restarted: counts from zero again


def test_startup_counters() -> None:
    c = StartupCounters()
    c.task_attempt("a")
    c.task_attempt("b")
    c.task_started("a")
    c.task_started("a")  # a pause after running is not another start
    c.task_failed("b")
    snap = c.snapshot()
    assert snap["task-startup-attempts-total"] == 2 and snap["task-startup-success-total"] == 1
    assert snap["task-startup-failure-total"] == 1 and snap["task-startup-success-percentage"] == 0.5


def test_exposition_escapes_labels_and_types_families() -> None:
    out = Exposition()
    out.add("kafka_connect_x_total", {"connector": 'a"b\\c\nd'}, 3)
    out.add("kafka_connect_x_total", {"connector": "e"}, 4)
    out.add("kafka_connect_y_count", {}, 1.5)
    text = out.render()
    assert text.count("# TYPE kafka_connect_x_total counter") == 1
    assert 'kafka_connect_x_total{connector="a\\"b\\\\c\\nd"} 3' in text
    assert "# TYPE kafka_connect_y_count untyped" in text and "kafka_connect_y_count 1.5" in text


class _Snapshots:
    def __init__(self, snap: dict) -> None:
        self.snap = snap

    def metrics_snapshot(self) -> dict:
        return self.snap


class _Herder:
    worker_id = "w1"

    def __init__(self) -> None:
        self.status = StatusStore()
        self.worker = type("W", (), {"startups": StartupCounters()})()

    def rebalance_metrics(self) -> dict[str, float]:
        return {}


def test_collector_names_metrics_as_the_jmx_exporter_rules_do() -> None:
    herder = _Herder()
    tid = ConnectorTaskId("sink-a", 0)
    herder.status.put_connector("sink-a", Status(State.RUNNING, "w1"))
    herder.status.put_task(tid, Status(State.RUNNING, "w1"))
    herder.status.put_task(ConnectorTaskId("elsewhere", 0), Status(State.RUNNING, "w2"))
    metrics = TaskMetrics("sink")
    metrics.batch(5, 5, 0.001)
    metrics.lag = [("orders", 3, 7, 12.5), ("orders", 4, 2, None)]
    source = _Snapshots(metrics.snapshot({"total-record-errors": 1}))
    register(tid, source)
    text = MetricsCollector(herder).render()
    assert 'kafka_connect_sink_task_metrics_sink_record_read_total{connector="sink-a",task="0"} 5' in text
    assert 'kafka_connect_task_error_metrics_total_record_errors{connector="sink-a",task="0"} 1' in text
    assert 'kafka_connect_connector_task_status{connector="sink-a",task="0",status="running"} 1' in text
    assert 'kafka_connect_connector_status{connector="sink-a",status="running"} 1' in text
    assert "kafka_connect_connect_worker_metrics_task_count 1" in text  # w2's task is not ours
    assert 'kafka_connect_connect_worker_metrics_connector_running_task_count{connector="sink-a"} 1' in text
    assert re.search(r'kafka_consumer_consumer_fetch_manager_metrics_records_lag\{client_id="connector-consumer-sink-a-0",'
                     r'connector="sink-a",task="0",topic="orders",partition="3"\} 7', text)
    assert 'sluice_sink_task_partition_lag_seconds{connector="sink-a",task="0",topic="orders",partition="3"} 12.5' in text
    assert 'partition_lag_seconds{connector="sink-a",task="0",topic="orders",partition="4"}' not in text  # nothing consumed yet
    assert 'kafka_connect_sink_task_metrics_sink_record_read_rate{connector="sink-a",task="0"}' in text
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True)
        problems = [line for line in check.stderr.decode().splitlines() if line.strip()]
        # Connect's own attribute names end in -ms; the exporter keeps them, and so do we.
        assert all("abbreviated units" in p and "_ms" in p for p in problems), problems
    del source


class _Backfills:
    def list(self) -> list[dict]:
        return [
            {"id": "j1", "kind": "jdbc_to_topic", "status": {"state": "RUNNING", "worker_id": "w1", "rows_done": 500, "bytes_done": 64000, "rows_total": 1000, "percent": 50.0, "rows_per_s": 250.0}},
            {"id": "j2", "kind": "s3_to_topic", "status": {"state": "RUNNING", "worker_id": "w2", "rows_done": 7}},
        ]


def test_backfill_jobs_of_this_worker_are_exposed() -> None:
    text = MetricsCollector(_Herder()).render(_Backfills())
    assert 'sluice_backfill_state{backfill="j1",kind="jdbc_to_topic",state="running"} 1' in text
    assert 'sluice_backfill_rows_done{backfill="j1",kind="jdbc_to_topic"} 500' in text
    assert 'sluice_backfill_bytes_done{backfill="j1",kind="jdbc_to_topic"} 64000' in text
    assert 'sluice_backfill_progress_ratio{backfill="j1",kind="jdbc_to_topic"} 0.5' in text
    assert 'backfill="j2"' not in text  # runs on another worker
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True)
        assert [p for p in check.stderr.decode().splitlines() if "sluice_backfill" in p] == []
