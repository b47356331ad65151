"""Secrets in a real worker: ``${env:…}`` resolves for the task, but never shows in REST or the log.

The worker declares the ``env`` provider (nothing exists undeclared) and lets it read only
``SLUICE_TEST_*`` variables; tests/integration/test_config_confinement.py covers undeclared providers.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.kafka_helpers import consume_all, wait_topic
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

# A legal topic name, so the secret can be the topic the records land in.
SECRET = f"sluice-secret-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def worker(kafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    w = WorkerProcess(
        tmp_path_factory.mktemp("secrets-worker"),
        kafka.bootstrap_servers,
        env={"SLUICE_TEST_SECRET": SECRET},
        **{"config.providers": "env", "config.providers.env.param.allowlist.pattern": "SLUICE_TEST_.*"},
    )
    w.start()
    yield w
    assert w.stop() == 0, w.log()


def full_log(worker: WorkerProcess) -> str:
    return worker.log_path.read_text(errors="replace")


def get(worker: WorkerProcess, path: str, **params: Any) -> str:
    response = httpx.get(f"{worker.url}{path}", params=params, timeout=10)
    assert response.status_code == 200, response.text
    return response.text



def wait_task_failed(worker: WorkerProcess, name: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = httpx.get(f"{worker.url}/connectors/{name}/status", timeout=5).json()
        if body.get("tasks") and body["tasks"][0]["state"] == "FAILED":
            return body
        time.sleep(0.2)
    raise AssertionError(f"task of {name} did not fail: {body}\n{worker.log()}")


def test_env_secret_is_used_by_the_task_but_never_shown(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\nthree\n")
    config = {"connector.class": "FileStreamSource", "file": str(source), "topic": "${env:SLUICE_TEST_SECRET}"}

    created = httpx.post(f"{worker.url}/connectors", json={"name": "env-src", "config": config}, timeout=10)
    assert created.status_code == 201, created.text
    assert SECRET not in created.text
    worker.wait_running("env-src")

    # The task ran with the resolved value: the lines are in the topic the variable names.
    wait_topic(kafka.bootstrap_servers, SECRET)
    records = consume_all(kafka.bootstrap_servers, SECRET, expected_count=3)
    assert [r.value for r in records] == [b"one", b"two", b"three"]

    stored = httpx.get(f"{worker.url}/connectors/env-src/config", timeout=10).json()
    assert stored["topic"] == "${env:SLUICE_TEST_SECRET}"
    bodies = {
        "config": get(worker, "/connectors/env-src/config"),
        "info": get(worker, "/connectors/env-src"),
        "expand=info": get(worker, "/connectors", expand="info"),
        "expand=status": get(worker, "/connectors", expand="status"),
        "status": get(worker, "/connectors/env-src/status"),
        "tasks": get(worker, "/connectors/env-src/tasks"),
    }
    for what, body in bodies.items():
        assert SECRET not in body, f"{what} shows the secret: {body}"
    assert SECRET not in full_log(worker)


def test_unresolvable_placeholder_is_a_400_naming_key_and_placeholder(worker: WorkerProcess, tmp_path: Path) -> None:
    config = {"connector.class": "FileStreamSource", "file": str(tmp_path / "x"), "topic": "${env:SLUICE_TEST_UNSET}"}
    response = httpx.post(f"{worker.url}/connectors", json={"name": "unset-src", "config": config}, timeout=10)
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert "topic" in message and "${env:SLUICE_TEST_UNSET}" in message


def test_env_provider_reads_only_what_its_allowlist_pattern_allows(worker: WorkerProcess, tmp_path: Path) -> None:
    """``HOME`` is set in the worker's environment, but not a SLUICE_TEST_ variable: refused like an unset one."""
    config = {"connector.class": "FileStreamSource", "file": str(tmp_path / "x"), "topic": "${env:HOME}"}
    response = httpx.post(f"{worker.url}/connectors", json={"name": "home-src", "config": config}, timeout=10)
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert "'topic'" in message and "allowlist.pattern" in message
    home = str(Path.home())
    assert home not in response.text
    log = full_log(worker)  # a short HOME such as /root may occur in a path, so look for it as a value
    assert f"'{home}'" not in log and f"={home}" not in log
    assert httpx.get(f"{worker.url}/connectors/home-src/status", timeout=10).status_code == 404


def test_password_in_a_task_failure_is_masked_in_trace_and_log(worker: WorkerProcess) -> None:
    password = f"pw-{uuid.uuid4().hex}"
    config = {"connector.class": "tests.plugins.secretive.SecretiveSource", "topic": "unused", "password": password}
    created = httpx.post(f"{worker.url}/connectors", json={"name": "secretive", "config": config}, timeout=10)
    assert created.status_code == 201, created.text

    status = wait_task_failed(worker, "secretive")
    trace = status["tasks"][0]["trace"]
    assert "cannot log in with [hidden]" in trace and "authentication failed for password=" in trace
    assert password not in trace
    assert password not in get(worker, "/connectors/secretive/tasks/0/status")
    log = full_log(worker)
    assert "cannot log in with [hidden]" in log
    assert password not in log
