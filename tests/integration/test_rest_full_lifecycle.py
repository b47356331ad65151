"""A real worker process driven over HTTP through Connect's whole connector lifecycle.

create → RUNNING → pause → PAUSED → resume → stop → STOPPED → alter offsets → resume from the
altered offsets; a task that raises shows FAILED with its trace and ``restart?includeTasks=true&
onlyFailed=true`` brings it back; sink offsets through the consumer group; auth on a live server.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.kafka_helpers import OutgoingRecord, consume_all, create_topic, produce, unique_topic_name
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

SECRET_ENV = "SLUICE_REST_TEST_PASSWORD"
SECRET_VALUE = "env-provided-secret-4711"


@pytest.fixture(scope="module")
def worker(kafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    import os

    os.environ[SECRET_ENV] = SECRET_VALUE  # inherited by the worker process
    # The failing task's password is an ${env:…} placeholder: providers exist only when declared.
    w = WorkerProcess(tmp_path_factory.mktemp("rest-full"), kafka.bootstrap_servers, **{"config.providers": "env"})
    w.start()
    yield w
    assert w.stop() == 0, w.log()
    assert SECRET_VALUE not in w.log_path.read_text(errors="replace")


def _status(worker: WorkerProcess, name: str) -> dict[str, Any]:
    r = httpx.get(f"{worker.url}/connectors/{name}/status", timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def _wait(worker: WorkerProcess, name: str, connector: str, tasks: list[str], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = _status(worker, name)
        if body["connector"]["state"] == connector and [t["state"] for t in body["tasks"]] == tasks:
            return body
        time.sleep(0.1)
    raise AssertionError(f"{name}: wanted {connector}/{tasks}, got {body}\n{worker.log()}")


def test_source_lifecycle_with_altered_offsets(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    url, topic = worker.url, unique_topic_name("rest-full")
    create_topic(kafka.bootstrap_servers, topic)
    source = tmp_path / "in.txt"
    source.write_text("alpha\nbeta\ngamma\n")
    config = {"connector.class": "FileStreamSource", "file": str(source), "topic": topic}
    assert httpx.post(f"{url}/connectors", json={"name": "life", "config": config}).status_code == 201
    _wait(worker, "life", "RUNNING", ["RUNNING"])
    assert [r.value for r in consume_all(kafka.bootstrap_servers, topic, 3)] == [b"alpha", b"beta", b"gamma"]
    # A task host reports the topics its tasks used once a second (as Connect's status topic, not
    # at once): the list catches up.
    deadline = time.monotonic() + 10
    while (body := httpx.get(f"{url}/connectors/life/topics").json()) != {"life": {"topics": [topic]}}:
        assert time.monotonic() < deadline, body
        time.sleep(0.2)

    assert httpx.put(f"{url}/connectors/life/pause").status_code == 202
    _wait(worker, "life", "PAUSED", ["PAUSED"])
    not_stopped = httpx.delete(f"{url}/connectors/life/offsets")
    assert not_stopped.status_code == 400 and "STOPPED" in not_stopped.json()["message"]
    assert httpx.put(f"{url}/connectors/life/resume").status_code == 202
    _wait(worker, "life", "RUNNING", ["RUNNING"])

    assert httpx.put(f"{url}/connectors/life/stop").status_code == 204
    _wait(worker, "life", "STOPPED", [])
    assert httpx.get(f"{url}/connectors/life/tasks").json() == []
    offsets = httpx.get(f"{url}/connectors/life/offsets").json()
    assert offsets == {"offsets": [{"partition": {"filename": str(source)}, "offset": {"position": 17}}]}

    # Rewind to just after "alpha": the next run re-reads beta and gamma.
    altered = httpx.patch(
        f"{url}/connectors/life/offsets",
        json={"offsets": [{"partition": {"filename": str(source)}, "offset": {"position": 6}}]},
    )
    assert altered.status_code == 200
    assert altered.json() == {"message": "The offsets for this connector have been altered successfully"}
    assert httpx.get(f"{url}/connectors/life/offsets").json()["offsets"][0]["offset"] == {"position": 6}

    assert httpx.put(f"{url}/connectors/life/resume").status_code == 202
    _wait(worker, "life", "RUNNING", ["RUNNING"])
    values = [r.value for r in consume_all(kafka.bootstrap_servers, topic, 5)]
    assert values == [b"alpha", b"beta", b"gamma", b"beta", b"gamma"]

    assert httpx.put(f"{url}/connectors/life/topics/reset").status_code == 202
    assert httpx.delete(f"{url}/connectors/life").status_code == 204
    assert httpx.get(f"{url}/connectors/life").status_code == 404


def test_failed_task_shows_trace_and_restarts(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    url, topic = worker.url, unique_topic_name("rest-fail")
    create_topic(kafka.bootstrap_servers, topic)
    flag = tmp_path / "fail"
    flag.touch()
    config = {
        "connector.class": "tests.plugins.controllable.ControllableSource",
        "topic": topic,
        "fail.flag": str(flag),
        "password": "${env:" + SECRET_ENV + "}",
    }
    assert httpx.post(f"{url}/connectors", json={"name": "flaky", "config": config}).status_code == 201
    failed = _wait(worker, "flaky", "RUNNING", ["FAILED"])
    trace = failed["tasks"][0]["trace"]
    assert "RuntimeError: poll failed" in trace and str(flag) in trace
    assert SECRET_VALUE not in trace

    flag.unlink()
    r = httpx.post(f"{url}/connectors/flaky/restart", params={"includeTasks": "true", "onlyFailed": "true"})
    assert r.status_code == 202
    planned = r.json()
    assert planned["connector"]["state"] == "RUNNING"  # not failed, so not restarted
    assert [t["state"] for t in planned["tasks"]] == ["RESTARTING"]
    _wait(worker, "flaky", "RUNNING", ["RUNNING"])
    deadline = time.monotonic() + 20
    while httpx.get(f"{url}/connectors/flaky/topics").json()["flaky"]["topics"] != [topic]:
        assert time.monotonic() < deadline, "the restarted task produced nothing"
        time.sleep(0.2)
    assert consume_all(kafka.bootstrap_servers, topic, 3)

    bodies = [
        httpx.get(f"{url}/connectors/flaky/config").text,
        httpx.get(f"{url}/connectors/flaky").text,
        httpx.get(f"{url}/connectors/flaky/tasks").text,
        httpx.get(f"{url}/connectors/flaky/status").text,
        httpx.get(f"{url}/connectors", params={"expand": ["info", "status"]}).text,
    ]
    assert all(SECRET_VALUE not in body for body in bodies)
    assert httpx.get(f"{url}/connectors/flaky/config").json()["password"] == "${env:" + SECRET_ENV + "}"

    legacy = httpx.post(f"{url}/connectors/flaky/restart")
    assert legacy.status_code == 204
    assert httpx.delete(f"{url}/connectors/flaky").status_code == 204


def test_sink_offsets_live_in_the_consumer_group(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    url, topic = worker.url, unique_topic_name("rest-sink")
    produce(kafka.bootstrap_servers, topic, [OutgoingRecord(value=f"r{i}".encode()) for i in range(4)])
    out = tmp_path / "out.txt"
    config = {"connector.class": "FileStreamSink", "file": str(out), "topics": topic}
    assert httpx.post(f"{url}/connectors", json={"name": "sinky", "config": config}).status_code == 201
    _wait(worker, "sinky", "RUNNING", ["RUNNING"])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not out.exists() or len(out.read_text().splitlines()) < 4):
        time.sleep(0.2)
    assert httpx.put(f"{url}/connectors/sinky/stop").status_code == 204
    _wait(worker, "sinky", "STOPPED", [])
    partition = {"kafka_topic": topic, "kafka_partition": 0}
    assert httpx.get(f"{url}/connectors/sinky/offsets").json() == {
        "offsets": [{"partition": partition, "offset": {"kafka_offset": 4}}]
    }
    bad = httpx.patch(f"{url}/connectors/sinky/offsets", json={"offsets": [{"partition": {"topic": topic}, "offset": None}]})
    assert bad.status_code == 400 and "kafka_topic" in bad.json()["message"]
    ok = httpx.patch(f"{url}/connectors/sinky/offsets", json={"offsets": [{"partition": partition, "offset": {"kafka_offset": 1}}]})
    assert ok.status_code == 200, ok.text
    assert httpx.get(f"{url}/connectors/sinky/offsets").json()["offsets"][0]["offset"] == {"kafka_offset": 1}
    reset = httpx.delete(f"{url}/connectors/sinky/offsets")
    assert reset.status_code == 200 and "reset successfully" in reset.json()["message"]
    assert httpx.get(f"{url}/connectors/sinky/offsets").json() == {"offsets": []}
    assert httpx.delete(f"{url}/connectors/sinky").status_code == 204


def test_offsets_of_a_group_that_keeps_a_member_are_a_409_not_a_500(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    """The broker refuses to delete a consumer group that has members. A stopped sink's own
    consumers leave it within moments (the worker waits for that); while a client stays in the
    group (someone consuming with ``connect-<name>``) the reset is a 409 naming the group, and it
    succeeds once that client has left."""
    from confluent_kafka import Consumer

    url, topic = worker.url, unique_topic_name("rest-busy")
    produce(kafka.bootstrap_servers, topic, [OutgoingRecord(value=b"r")])
    config = {"connector.class": "FileStreamSink", "file": str(tmp_path / "out.txt"), "topics": topic}
    assert httpx.post(f"{url}/connectors", json={"name": "busy", "config": config}).status_code == 201
    _wait(worker, "busy", "RUNNING", ["RUNNING"])
    assert httpx.put(f"{url}/connectors/busy/stop").status_code == 204
    _wait(worker, "busy", "STOPPED", [])
    intruder = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "connect-busy", "session.timeout.ms": 30000})
    try:
        intruder.subscribe([topic])
        deadline = time.monotonic() + 30
        while not intruder.assignment() and time.monotonic() < deadline:
            intruder.poll(0.2)
        assert intruder.assignment(), "the intruding consumer never joined the group"
        answer = httpx.delete(f"{url}/connectors/busy/offsets", timeout=60)
        assert answer.status_code == 409, answer.text
        assert "connect-busy" in answer.json()["message"] and "active members" in answer.json()["message"]
    finally:
        intruder.close()
    reset = httpx.delete(f"{url}/connectors/busy/offsets", timeout=60)
    assert reset.status_code == 200, reset.text
    assert httpx.delete(f"{url}/connectors/busy").status_code == 204


def test_auth_on_a_live_worker(kafka, tmp_path: Path) -> None:
    w = WorkerProcess(tmp_path, kafka.bootstrap_servers,
                      **{"rest.auth.basic.users": "alice:secret", "rest.auth.bearer.tokens": "tok"})
    w.start()  # waits on /health, which stays open
    try:
        assert httpx.get(f"{w.url}/connectors").status_code == 401
        basic = {"Authorization": "Basic " + base64.b64encode(b"alice:secret").decode()}
        assert httpx.get(f"{w.url}/connectors", headers=basic).json() == []
        assert httpx.get(f"{w.url}/connectors", headers={"Authorization": "Bearer tok"}).status_code == 200
    finally:
        assert w.stop() == 0, w.log()
