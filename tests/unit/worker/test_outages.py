"""Outages are never silent: the tracker's log lines and degraded traces, librdkafka's throttled
lines, and the degraded status as the herders, task processes and the status topic carry it.
No broker: clients point at a closed port, where every connection attempt is refused."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import orjson
import pytest

from sluice.connectors.api import RetriableError, SourceRecord, SourceTask
from sluice.converters.header import SimpleHeaderConverter
from sluice.converters.string import StringConverter
from sluice.offsets import MemoryOffsetStore
from sluice.worker.execution.task_host import _PipeListener
from sluice.worker.herder.reporting import StatusReporter
from sluice.worker.herder.stores.kafka_status_store import decode_status, encode_status
from sluice.worker.herder.stores.status_store import StatusStore
from sluice.worker.observability.outages import LibrdkafkaLog, OutageTracker, any_broker_up, kafka_reason
from sluice.worker.observability.task_metrics import StartupCounters
from sluice.worker.restarts import RestartPolicy, TaskRestarter
from sluice.worker.runners import WorkerTask
from sluice.worker.runners.source import SourceTaskRunner
from sluice.worker.status import ConnectorTaskId, State, Status, TargetState, format_trace

from .test_errors import CollectingSinkTask, sink_runner

TASK = ConnectorTaskId("c", 0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Reports:
    def __init__(self) -> None:
        self.events: list[tuple[str, str | None]] = []

    def degraded(self, trace: str) -> None:
        self.events.append(("degraded", trace))

    def recovered(self) -> None:
        self.events.append(("recovered", None))


def tracker(bound_s: float = 10.0) -> tuple[OutageTracker, Clock, Reports]:
    clock, reports = Clock(), Reports()
    t = OutageTracker(
        bound_s, reports.degraded, reports.recovered, summary_interval_s=60.0, clock=clock, wall_clock=lambda: 1_767_225_600.0
    )
    return t, clock, reports


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and r.name == "sluice.worker.observability.outages"]


def infos(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.INFO and r.name == "sluice.worker.observability.outages"]


def test_an_outage_is_logged_once_then_degrades_the_status_after_the_bound_and_recovery_clears_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    t, clock, reports = tracker(10.0)
    for _ in range(37):
        t.failure("Kafka at 127.0.0.1:9092", "Connection refused")
        clock.now += 0.25  # 9.25 s of retries: not degraded yet
    assert reports.events == []
    assert warnings(caplog) == [
        "Cannot reach Kafka at 127.0.0.1:9092: Connection refused; retrying (the status shows the task degraded after 10 s)"
    ]
    clock.now += 1
    t.tick()
    assert reports.events == [
        ("degraded", "Degraded since 2026-01-01T00:00:00Z: cannot reach Kafka at 127.0.0.1:9092 (Connection refused); 37 retries")
    ]
    assert warnings(caplog)[1:] == ["Still cannot reach Kafka at 127.0.0.1:9092 after 10 s (37 retries): Connection refused"]
    assert t.degraded

    # More retries: no new status write and no new line until the next summary, a minute later.
    for _ in range(100):
        t.failure("Kafka at 127.0.0.1:9092", "Connection refused")
        clock.now += 0.5
    assert len(reports.events) == 1 and len(warnings(caplog)) == 2
    clock.now += 10
    t.tick()
    assert len(warnings(caplog)) == 3 and "137 retries" in warnings(caplog)[2]
    assert reports.events[-1] == (
        "degraded",
        "Degraded since 2026-01-01T00:00:00Z: cannot reach Kafka at 127.0.0.1:9092 (Connection refused); 137 retries",
    )

    t.reached("Kafka at 127.0.0.1:9092")
    assert reports.events[-1] == ("recovered", None)
    assert not t.degraded and t.trace is None
    assert infos(caplog) == ["Reached Kafka at 127.0.0.1:9092 again after 70.2 s (137 retries)"]
    assert len(warnings(caplog)) == 3  # nothing more once it is over


def test_a_short_outage_is_logged_but_never_degrades_the_status(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    t, clock, reports = tracker(10.0)
    t.failure("the system JdbcSinkTask writes to", "Database unavailable: connection refused")
    clock.now += 3
    t.failure("the system JdbcSinkTask writes to", "Database unavailable: connection refused")
    t.reached("the system JdbcSinkTask writes to")
    clock.now += 20
    t.tick()
    assert reports.events == []
    assert len(warnings(caplog)) == 1 and infos(caplog) == ["Reached the system JdbcSinkTask writes to again after 3.0 s (2 retries)"]


def test_an_unconfirmed_failure_is_silent_until_confirmed(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    t, clock, reports = tracker(5.0)
    # A dropped connection that is re-established at once (another broker was up all along).
    t.failure("Kafka at k:9092", "Disconnected", confirmed=False)
    clock.now += 30
    t.tick()
    t.reached("Kafka at k:9092")
    assert reports.events == [] and warnings(caplog) == [] and infos(caplog) == []

    # Nothing answers: the statistics confirm it, and the bound counts from the first failure.
    t.failure("Kafka at k:9092", "Connection refused", confirmed=False)
    clock.now += 6
    t.confirm("Kafka at k:9092")
    assert len(warnings(caplog)) == 2  # announced, and at once degraded (summary)
    assert reports.events == [("degraded", "Degraded since 2026-01-01T00:00:00Z: cannot reach Kafka at k:9092 (Connection refused); 1 retries")]


def test_two_systems_down_show_in_one_trace_and_recover_one_at_a_time() -> None:
    t, clock, reports = tracker(1.0)
    t.failure("Kafka at k:9092", "Connection refused")
    t.failure("the system S3SinkTask writes to", "timeout")
    clock.now += 2
    t.tick()
    trace = reports.events[-1][1] or ""
    assert trace.splitlines()[0].endswith("cannot reach Kafka at k:9092 (Connection refused); 1 retries")
    assert trace.splitlines()[1].endswith("cannot reach the system S3SinkTask writes to (timeout); 1 retries")
    t.reached("Kafka at k:9092")
    assert reports.events[-1][0] == "degraded" and "Kafka" not in (reports.events[-1][1] or "")
    t.reached("the system S3SinkTask writes to")
    assert reports.events[-1] == ("recovered", None)


def test_kafka_reasons_and_broker_states() -> None:
    assert kafka_reason(
        "127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused (after 0ms in state CONNECT)"
    ) == "Connection refused"
    assert kafka_reason("127.0.0.1:9092/1: Disconnected (after 1503ms in state UP)") == "Disconnected"
    assert kafka_reason("1/1 brokers are down") == "1/1 brokers are down"
    assert not any_broker_up({"brokers": {"k:9092/bootstrap": {"state": "TRY_CONNECT"}, "k:9092/1": {"state": "DOWN"}}})
    assert any_broker_up({"brokers": {"k:9092/bootstrap": {"state": "INIT"}, "k:9092/1": {"state": "UP"}}})
    assert not any_broker_up({})


# -- librdkafka's lines ---------------------------------------------------------------------------

REFUSED = "[thrd:k:9092/bootstrap]: k:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: Connection refused (after 0ms in state CONNECT)"


def librdkafka_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "librdkafka" and r.levelno == level]


def test_librdkafka_connection_failures_are_throttled_and_downgraded(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    clock = Clock()
    logger = LibrdkafkaLog(clock=clock)
    assert logger.name == "librdkafka"
    for _ in range(496):  # librdkafka calls log(level, "%s [%s] %s", facility, client, text)
        logger.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", REFUSED)
        clock.now += 0.05
    assert librdkafka_lines(caplog, logging.ERROR) == []
    assert len(librdkafka_lines(caplog, logging.WARNING)) == 1
    clock.now += 60
    logger.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", REFUSED.replace("0ms", "3ms"))
    summary = librdkafka_lines(caplog, logging.WARNING)[1]
    assert summary.endswith("(and 495 more like it in the last 85 s)")

    # Other lines pass as they are; a task's client leaves connection failures to its tracker.
    logger.log(logging.ERROR, "%s [%s] %s", "SSL", "rdkafka#producer-1", "SSL handshake failed")
    assert librdkafka_lines(caplog, logging.ERROR) == ["SSL [rdkafka#producer-1] SSL handshake failed"]
    LibrdkafkaLog(tracked=True).log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-2", REFUSED)
    assert len(librdkafka_lines(caplog, logging.WARNING)) == 2
    assert librdkafka_lines(caplog, logging.DEBUG)[-1].endswith(REFUSED)


# -- the status ------------------------------------------------------------------------------------


def Reporting() -> StatusReporter:  # noqa: N802 - reads as the class it builds
    """The herder's status reporter, its herder callbacks stubbed: no restarts, a masking trace."""
    return StatusReporter(
        worker_id="w:8083",
        status=StatusStore(),
        restarter=TaskRestarter(RestartPolicy(0, 0, 0)),
        startups=StartupCounters(),
        trace=lambda name, error: format_trace(error).replace("s3cret", "[hidden]"),
        live_runner=lambda task_id: None,
        restarts_allowed=lambda task_id: False,
        auto_restart=lambda task_id, failed: None,
    )


def test_a_degraded_task_is_running_with_a_trace_until_it_recovers() -> None:
    herder = Reporting()
    herder.on_startup(TASK)
    herder.on_degraded(TASK, "Degraded since 2026-01-01T00:00:00Z: cannot reach x (password s3cret refused); 3 retries")
    status = herder.status.task(TASK)
    assert status is not None and status.state is State.RUNNING
    assert status.to_json()["trace"] == "Degraded since 2026-01-01T00:00:00Z: cannot reach x (password [hidden] refused); 3 retries"
    herder.on_recovered(TASK)
    body = herder.status.task(TASK).to_json()  # type: ignore[union-attr]
    assert body["state"] == "RUNNING" and "trace" not in body


def test_a_degraded_status_round_trips_through_the_status_topic_and_the_task_process_pipe() -> None:
    trace = "Degraded since 2026-01-01T00:00:00Z: cannot reach Kafka at k:9092 (Connection refused); 37 retries"
    status = Status(State.RUNNING, "w:8083", trace=trace, generation=4)
    value = encode_status(status)
    assert orjson.loads(value) == {"state": "RUNNING", "trace": trace, "worker_id": "w:8083", "generation": 4}
    back = decode_status(value)
    assert (back.state, back.trace, back.worker_id, back.generation) == (State.RUNNING, trace, "w:8083", 4)
    recovered = decode_status(encode_status(Status(State.RUNNING, "w:8083", generation=5)))
    assert recovered.trace is None and "trace" not in recovered.to_json()

    sent: list[tuple[Any, ...]] = []
    pipe = _PipeListener(sent.append)
    pipe.on_degraded(TASK, trace)
    pipe.on_recovered(TASK)
    assert sent == [("degraded", trace), ("recovered",)]


# -- the runners -----------------------------------------------------------------------------------


class Events:
    """A task status listener that keeps the degraded reports."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.events: list[tuple[str, str | None]] = []

    def on_degraded(self, task_id: Any, trace: str) -> None:
        with self.lock:
            self.events.append(("degraded", trace))

    def on_recovered(self, task_id: Any) -> None:
        with self.lock:
            self.events.append(("recovered", None))

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None

    def wait(self, what: Any, timeout: float = 10.0) -> tuple[str, str | None]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = [e for e in self.events if what(e)]
            if found:
                return found[-1]
            time.sleep(0.02)
        raise AssertionError(f"no such report; got {self.events}")


class FlakySource(SourceTask):
    """poll() raises RetriableError while ``down`` is set."""

    def __init__(self) -> None:
        self.down = threading.Event()
        self.down.set()

    def start(self, config: Any, context: Any) -> None:
        pass

    def poll(self) -> list[SourceRecord] | None:
        time.sleep(0.01)
        if self.down.is_set():
            raise RetriableError("Cannot connect to PostgreSQL at 127.0.0.1:5: connection refused\nDETAIL: more")
        return None

    def stop(self) -> None:
        pass


def test_a_source_task_whose_system_is_down_turns_degraded_and_recovers() -> None:
    key, value, header = StringConverter(), StringConverter(), SimpleHeaderConverter()
    key.configure({}, True)
    value.configure({}, False)
    header.configure({})
    task, events = FlakySource(), Events()
    runner = SourceTaskRunner(
        TASK, task, {}, listener=events, initial_state=TargetState.STARTED,  # type: ignore[arg-type]
        producer_config={"bootstrap.servers": "127.0.0.1:9", "log_level": 0}, offset_store=MemoryOffsetStore(),
        key_converter=key, value_converter=value, header_converter=header, offset_flush_timeout_ms=100,
        degraded_after_ms=300,
    )
    runner.start()
    try:
        _, trace = events.wait(lambda e: e[0] == "degraded" and "FlakySource reads from" in (e[1] or ""))
        assert "cannot reach the system FlakySource reads from (Cannot connect to PostgreSQL at 127.0.0.1:5: connection refused)" in (
            trace or ""
        )
        task.down.clear()
        # The task's own system is back (Kafka, on a closed port, may still be reported).
        events.wait(lambda e: e[0] == "recovered" or (e[0] == "degraded" and "FlakySource" not in (e[1] or "")))
    finally:
        runner.stop()
        assert runner.await_stop(10)


def test_a_sink_task_that_cannot_reach_kafka_turns_degraded() -> None:
    events = Events()
    config = {"bootstrap.servers": "127.0.0.1:9", "group.id": "connect-conn", "log_level": 0}
    runner = sink_runner(CollectingSinkTask(), listener=events, consumer_config=config)
    runner.outages.degraded_after_s = 0.5
    runner.start()
    try:
        _, trace = events.wait(lambda e: e[0] == "degraded", timeout=15)
        assert "cannot reach Kafka at 127.0.0.1:9 (Connection refused)" in (trace or ""), trace
    finally:
        runner.stop()
        assert runner.await_stop(15)


def test_a_paused_task_reports_its_outage_when_it_resumes() -> None:
    events = Events()

    class Idle(WorkerTask):
        def initialize(self) -> None:
            pass

        def execute(self) -> None:
            while self.await_unpaused():
                time.sleep(0.01)

        def close(self) -> None:
            pass

    runner = Idle(TASK, events, TargetState.PAUSED, degraded_after_ms=0)  # type: ignore[arg-type]
    runner.start()
    try:
        time.sleep(0.1)
        runner.outages.failure("the system x writes to", "down")
        assert runner.outages.degraded and events.events == []  # PAUSED stays PAUSED
        runner.transition_to(TargetState.STARTED)
        events.wait(lambda e: e[0] == "degraded")
    finally:
        runner.stop()
        assert runner.await_stop(5)
