"""Issue #21 against a real worker and broker: a connector config cannot read the worker's files.

``${file:/etc/passwd:root}`` and ``${dir:/etc:passwd}`` as a connector's ``topic`` are refused with
a 400 naming the key, whether the provider is undeclared or declared with ``allowed.paths`` that
exclude ``/etc``; and a FileStreamSource may read only below ``connector.allowed.paths``. Nothing
from ``/etc/passwd`` reaches a response, a status, the topics endpoint, a topic or the worker's log.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests import host_files
from tests.integration.kafka_helpers import consume_all, unique_topic_name, wait_topic
from tests.integration.worker_process import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration

PLACEHOLDERS = ["${file:/etc/passwd:root}", "${dir:/etc:passwd}"]


def passwd_lines() -> list[str]:
    """Every line of /etc/passwd, and the root line's value as ``${file:/etc/passwd:root}`` reads it."""
    return [*host_files.passwd_lines(), host_files.passwd_root()]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one directory connectors may use."""
    return tmp_path_factory.mktemp("confined-data")


@pytest.fixture(scope="module")
def undeclared(module_worker_process: WorkerFactory, data_dir: Path) -> WorkerProcess:
    """No ``config.providers`` at all (the default), local paths confined to ``data_dir``."""
    settings: dict[str, Any] = {"connector.allowed.paths": str(data_dir)}
    return module_worker_process(**settings)


@pytest.fixture(scope="module")
def declared(
    module_worker_process: WorkerFactory, tmp_path_factory: pytest.TempPathFactory, data_dir: Path
) -> WorkerProcess:
    """``file`` and ``dir`` declared, each limited to a secrets directory that is not /etc."""
    secrets = tmp_path_factory.mktemp("confined-secrets")
    settings: dict[str, Any] = {
        "config.providers": "file,dir",
        "config.providers.file.param.allowed.paths": str(secrets),
        "config.providers.dir.param.allowed.paths": str(secrets),
        "connector.allowed.paths": str(data_dir),
    }
    return module_worker_process(**settings)


def assert_nothing_leaked(worker: WorkerProcess, *bodies: str) -> None:
    log = worker.log_path.read_text(errors="replace")
    for line in passwd_lines():
        for body in bodies:
            assert line not in body, f"{line!r} in a response: {body}"
        assert line not in log, f"{line!r} in the worker's log"


def create(worker: WorkerProcess, name: str, config: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=10)


def refused_placeholder(worker: WorkerProcess, name: str, placeholder: str, data_dir: Path, why: str) -> None:
    """POST and validate with ``placeholder`` as the topic: 400 / a validation error on ``topic``."""
    config = {"connector.class": "FileStreamSource", "file": str(data_dir / "never.txt"), "topic": placeholder}
    created = create(worker, name, config)
    assert created.status_code == 400, created.text
    message = created.json()["message"]
    assert "'topic'" in message and why in message
    validated = httpx.put(f"{worker.url}/connector-plugins/FileStreamSource/config/validate", json=config, timeout=10)
    assert validated.status_code == 200
    errors = {c["value"]["name"]: c["value"]["errors"] for c in validated.json()["configs"] if c["value"]["errors"]}
    assert list(errors) == ["topic"] and why in errors["topic"][0]
    # Nothing was created, so there is no status, no topic list and no task that could have run.
    status = httpx.get(f"{worker.url}/connectors/{name}/status", timeout=10)
    topics = httpx.get(f"{worker.url}/connectors/{name}/topics", timeout=10)
    assert status.status_code == 404 and topics.status_code == 404
    listing = httpx.get(f"{worker.url}/connectors", params={"expand": ["status", "info"]}, timeout=10)
    assert name not in listing.json()
    assert_nothing_leaked(worker, created.text, validated.text, status.text, topics.text, listing.text)


@pytest.mark.parametrize("placeholder", PLACEHOLDERS)
def test_undeclared_provider_is_refused_naming_the_key(undeclared: WorkerProcess, data_dir: Path, placeholder: str) -> None:
    refused_placeholder(undeclared, f"undeclared-{PLACEHOLDERS.index(placeholder)}", placeholder, data_dir, "not declared")


@pytest.mark.parametrize("placeholder", PLACEHOLDERS)
def test_declared_provider_refuses_a_path_outside_allowed_paths(declared: WorkerProcess, data_dir: Path, placeholder: str) -> None:
    refused_placeholder(
        declared, f"outside-{PLACEHOLDERS.index(placeholder)}", placeholder, data_dir, "outside the provider's allowed.paths"
    )


@pytest.mark.parametrize(("name", "file"), [("passwd", "/etc/passwd"), ("dotdot", "{data}/../../../../etc/passwd")])
def test_file_source_outside_connector_allowed_paths_is_refused(
    undeclared: WorkerProcess, data_dir: Path, name: str, file: str
) -> None:
    config = {"connector.class": "FileStreamSource", "file": file.format(data=data_dir), "topic": unique_topic_name("passwd")}
    created = create(undeclared, name, config)
    assert created.status_code == 400, created.text
    assert created.json()["message"].split("\n")[-1].startswith("file: ")
    assert "connector.allowed.paths" in created.json()["message"]
    status = httpx.get(f"{undeclared.url}/connectors/{name}/status", timeout=10)
    assert status.status_code == 404
    assert_nothing_leaked(undeclared, created.text, status.text)



def test_file_source_inside_connector_allowed_paths_moves_its_lines(undeclared: WorkerProcess, kafka, data_dir: Path) -> None:
    source = data_dir / "nested" / "in.txt"
    source.parent.mkdir()
    source.write_text("alpha\nbeta\ngamma\n")
    topic = unique_topic_name("confined")
    config = {"connector.class": "FileStreamSource", "file": str(source), "topic": topic}
    created = create(undeclared, "confined-src", config)
    assert created.status_code == 201, created.text
    undeclared.wait_running("confined-src")
    wait_topic(kafka.bootstrap_servers, topic)
    records = consume_all(kafka.bootstrap_servers, topic, expected_count=3)
    assert [r.value for r in records] == [b"alpha", b"beta", b"gamma"]
    deadline = time.monotonic() + 20
    while httpx.get(f"{undeclared.url}/connectors/confined-src/topics", timeout=10).json()["confined-src"]["topics"] != [topic]:
        assert time.monotonic() < deadline, "the topics endpoint never listed the topic"
        time.sleep(0.2)
    assert httpx.delete(f"{undeclared.url}/connectors/confined-src", timeout=10).status_code == 204
