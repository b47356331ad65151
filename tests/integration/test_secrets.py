"""Secrets in a real worker: ``${env:…}`` resolves for the task, but never shows in REST or the log.

The worker declares the ``env`` provider (nothing exists undeclared) and lets it read only
``SLUICE_TEST_*`` variables; tests/integration/test_config_confinement.py covers undeclared providers.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.kafka_helpers import consume_all, wait_topic
from tests.integration.worker_process import WorkerFactory, WorkerProcess, free_port

pytestmark = pytest.mark.integration

# A legal topic name, so the secret can be the topic the records land in.
SECRET = f"sluice-secret-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory) -> WorkerProcess:
    return module_worker_process(
        env={"SLUICE_TEST_SECRET": SECRET},
        **{"config.providers": "env", "config.providers.env.param.allowlist.pattern": "SLUICE_TEST_.*"},
    )


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


def wait_trace(worker: WorkerProcess, name: str, timeout: float = 30) -> str:
    """The first status trace of ``name``: its connector's, or its task's."""
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = httpx.get(f"{worker.url}/connectors/{name}/status", timeout=5).json()
        for status in (body.get("connector") or {}, *(body.get("tasks") or ())):
            if status.get("trace"):
                return str(status["trace"])
        time.sleep(0.2)
    raise AssertionError(f"{name} shows no trace: {body}\n{worker.log()}")


def validate_errors(worker: WorkerProcess, config: dict[str, str]) -> tuple[dict[str, list[str]], dict[str, Any]]:
    response = httpx.put(f"{worker.url}/connector-plugins/JdbcSourceConnector/config/validate", json=config, timeout=30)
    assert response.status_code == 200, response.text
    values = {c["value"]["name"]: c["value"] for c in response.json()["configs"]}
    return {k: v["errors"] for k, v in values.items() if v["errors"]}, values


def test_a_password_hides_only_in_its_own_connector(worker: WorkerProcess) -> None:
    """Issue #37: connector A's password ``postgres`` turned B's ``connection.user`` into ``[hidden]``
    and B's messages into ``[hidden]ql+psycopg``; B's one-letter password turned ``port`` into ``****ort``."""
    a = {"connector.class": "tests.plugins.secretive.SecretiveSource", "topic": "unused", "password": "postgres"}
    created = httpx.post(f"{worker.url}/connectors", json={"name": "mask-a", "config": a}, timeout=10)
    assert created.status_code == 201, created.text
    trace_a = wait_trace(worker, "mask-a")
    assert "cannot log in with [hidden]" in trace_a and "password='[hidden]'" in trace_a, trace_a
    assert httpx.get(f"{worker.url}/connectors/mask-a/config", timeout=10).json()["password"] == "[hidden]"

    closed = free_port()  # nothing listens there
    url = f"postgresql+psycopg://postgres@127.0.0.1:{closed}/shop"
    b = {
        "connector.class": "JdbcSourceConnector",
        "name": "mask-b",
        "connection.url": url,
        "connection.user": "postgres",
        "connection.password": "p",
        "connection.attempts": "1",
        "mode": "bulk",
        "query": "SELECT 1",
        "topic.prefix": "mask-b",
        "tasks.max": "1",
    }
    errors, values = validate_errors(worker, b)
    assert errors == {"connection.url": [f"connection.url: cannot connect to 127.0.0.1:{closed}: connection refused"]}
    assert values["connection.user"]["value"] == "postgres" and values["connection.url"]["value"] == url
    assert values["connection.password"]["value"] == "[hidden]"
    errors, _ = validate_errors(worker, {**b, "connection.url": f"oracle://postgres@127.0.0.1:{closed}/shop"})
    assert "supported: postgresql[+psycopg], mysql[+pymysql]" in errors["connection.url"][0], errors
    errors, _ = validate_errors(worker, {**b, "connection.url": f"{url}?sslmode=postgres"})
    assert errors["connection.url"] == ["connection.url: parameter 'sslmode' has an invalid value 'postgres'"]

    created = httpx.put(f"{worker.url}/connectors/mask-b/config", json=b, timeout=10)
    assert created.status_code == 201, created.text
    shown = httpx.get(f"{worker.url}/connectors/mask-b/config", timeout=10).json()
    assert shown == {**b, "connection.password": "[hidden]"}
    trace_b = wait_trace(worker, "mask-b")
    assert f"connection.url: cannot connect to 127.0.0.1:{closed}: connection refused" in trace_b, trace_b
    assert "[hidden]" not in trace_b and "****" not in trace_b, trace_b

    lines = full_log(worker).splitlines()
    a_lines = [line for line in lines if "[mask-a|" in line]
    b_lines = [line for line in lines if "[mask-b|" in line]
    assert any("cannot log in with [hidden]" in line for line in a_lines), "\n".join(a_lines)
    assert not [line for line in a_lines if re.search(r"(?<!\w)postgres(?!\w)", line)]
    assert b_lines and not [line for line in b_lines if "[hidden]" in line or "****" in line], "\n".join(b_lines)
    for name in ("mask-a", "mask-b"):
        httpx.delete(f"{worker.url}/connectors/{name}", timeout=10)
