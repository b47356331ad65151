"""A real worker process driven over HTTP: create, list, get, status, pause, resume, delete."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.integration.kafka_helpers import consume_all
from tests.integration.worker_process import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory) -> WorkerProcess:
    return module_worker_process()


def test_root_and_health(worker: WorkerProcess, kafka) -> None:
    root = httpx.get(f"{worker.url}/").json()
    assert root["version"] and root["kafka_cluster_id"] == kafka.cluster_id
    health = httpx.get(f"{worker.url}/health")
    assert health.status_code == 200 and health.json()["status"] == "healthy"


def test_connector_lifecycle_over_http(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    topic = f"rest-{time.time_ns()}"
    source = tmp_path / "in.txt"
    source.write_text("alpha\nbeta\n")
    config = {"connector.class": "FileStreamSource", "file": str(source), "topic": topic}

    created = httpx.post(f"{worker.url}/connectors", json={"name": "rest-src", "config": config})
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/connectors/rest-src"
    assert created.json() == {
        "name": "rest-src",
        "config": {**config, "name": "rest-src"},
        "tasks": [{"connector": "rest-src", "task": 0}],
        "type": "source",
    }

    assert httpx.get(f"{worker.url}/connectors").json() == ["rest-src"]
    status = worker.wait_running("rest-src")
    assert status["type"] == "source" and status["tasks"][0]["id"] == 0
    assert status["connector"]["worker_id"] == f"127.0.0.1:{worker.port}"
    expanded = httpx.get(f"{worker.url}/connectors", params=[("expand", "status"), ("expand", "info")]).json()
    assert expanded["rest-src"]["status"]["connector"]["state"] == "RUNNING"
    assert expanded["rest-src"]["info"]["config"]["topic"] == topic
    assert httpx.get(f"{worker.url}/connectors/rest-src/config").json()["file"] == str(source)
    assert httpx.get(f"{worker.url}/connectors/rest-src/tasks").json()[0]["id"] == {"connector": "rest-src", "task": 0}
    assert httpx.get(f"{worker.url}/connectors/rest-src/tasks/0/status").json()["state"] == "RUNNING"

    records = consume_all(kafka.bootstrap_servers, topic, expected_count=2)
    assert [r.value for r in records] == [b"alpha", b"beta"]

    assert httpx.put(f"{worker.url}/connectors/rest-src/pause", timeout=60).status_code == 202
    _wait_state(worker, "rest-src", "PAUSED")
    with source.open("a") as f:
        f.write("gamma\n")
    time.sleep(1.5)
    assert len(consume_all(kafka.bootstrap_servers, topic, expected_count=2, timeout=3)) == 2  # paused: nothing new
    assert httpx.put(f"{worker.url}/connectors/rest-src/resume", timeout=60).status_code == 202
    _wait_state(worker, "rest-src", "RUNNING")
    assert [r.value for r in consume_all(kafka.bootstrap_servers, topic, expected_count=3)][-1] == b"gamma"

    assert httpx.delete(f"{worker.url}/connectors/rest-src", timeout=60).status_code == 204
    gone = httpx.get(f"{worker.url}/connectors/rest-src")
    assert gone.status_code == 404
    assert gone.json() == {"error_code": 404, "message": "Connector rest-src not found"}
    assert httpx.get(f"{worker.url}/connectors").json() == []


def test_errors_name_the_problem(worker: WorkerProcess, tmp_path: Path) -> None:
    ok = {"connector.class": "FileStreamSource", "file": str(tmp_path / "x"), "topic": "t"}
    assert httpx.post(f"{worker.url}/connectors", json={"name": "dup", "config": ok}).status_code == 201
    dup = httpx.post(f"{worker.url}/connectors", json={"name": "dup", "config": ok})
    assert dup.status_code == 409 and dup.json() == {"error_code": 409, "message": "Connector dup already exists"}
    httpx.delete(f"{worker.url}/connectors/dup")

    unknown = httpx.post(f"{worker.url}/connectors", json={"name": "u", "config": {**ok, "connector.class": "NoSuchThing"}})
    assert unknown.status_code == 400
    assert "NoSuchThing" in unknown.json()["message"] and "FileStreamSource" in unknown.json()["message"]
    typo = httpx.post(f"{worker.url}/connectors", json={"name": "u", "config": {**ok, "connector.class": "FileStreamSorce"}})
    assert typo.status_code == 400 and "Did you mean FileStreamSource?" in typo.json()["message"]

    missing = httpx.post(f"{worker.url}/connectors", json={"name": "m", "config": {"connector.class": "FileStreamSource"}})
    assert missing.status_code == 400 and "topic" in missing.json()["message"]

    # An undefined key is accepted, kept and returned, as Connect does; validate names it with a suggestion.
    extra = httpx.post(f"{worker.url}/connectors", json={"name": "e", "config": {**ok, "tpoic": "typo"}})
    assert extra.status_code == 201 and extra.json()["config"]["tpoic"] == "typo"
    assert httpx.get(f"{worker.url}/connectors/e/config").json()["tpoic"] == "typo"
    replaced = httpx.put(f"{worker.url}/connectors/e/config", json={**ok, "tpoic": "typo", "exactly.once.support": "requested"})
    assert replaced.status_code == 200 and replaced.json()["config"]["exactly.once.support"] == "requested"
    infos = httpx.put(f"{worker.url}/connector-plugins/FileStreamSource/config/validate", json={**ok, "tpoic": "typo"}).json()
    assert infos["error_count"] == 0 and 'did you mean "topic"' in infos["warnings"][0]["message"]
    httpx.delete(f"{worker.url}/connectors/e")

    bad_int = httpx.post(f"{worker.url}/connectors", json={"name": "b", "config": {**ok, "tasks.max": "many"}})
    assert bad_int.status_code == 400 and "tasks.max" in bad_int.json()["message"]

    no_topics = httpx.post(f"{worker.url}/connectors", json={"name": "s", "config": {"connector.class": "FileStreamSink", "file": "/tmp/o"}})
    assert no_topics.status_code == 400 and "topics" in no_topics.json()["message"]

    malformed = httpx.post(f"{worker.url}/connectors", content=b"{not json", headers={"content-type": "application/json"})
    assert malformed.status_code == 400 and malformed.json()["error_code"] == 400
    assert httpx.get(f"{worker.url}/connectors").json() == []


def test_connector_plugins_lists_the_file_connectors(worker: WorkerProcess) -> None:
    plugins = httpx.get(f"{worker.url}/connector-plugins").json()
    by_class = {p["class"]: p for p in plugins}
    assert by_class["sluice.connectors.source.file.connector.FileStreamSourceConnector"]["type"] == "source"
    assert by_class["sluice.connectors.sink.file.connector.FileStreamSinkConnector"]["type"] == "sink"
    everything = httpx.get(f"{worker.url}/connector-plugins", params={"connectorsOnly": "false"}).json()
    assert {"converter", "header_converter"} <= {p["type"] for p in everything}


def _wait_state(worker: WorkerProcess, name: str, state: str, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    body = {}
    while time.monotonic() < deadline:
        body = httpx.get(f"{worker.url}/connectors/{name}/status").json()
        if body["connector"]["state"] == state and all(t["state"] == state for t in body["tasks"]):
            return
        time.sleep(0.1)
    raise AssertionError(f"{name} not {state}: {body}")
