"""Issue #36 item 1 against a real worker and broker: paths are denied by default and checked at open.

(a) With ``plugin.path`` set and ``connector.allowed.paths`` at its default (``<state.dir>/data``),
a FileStreamSink writing ``<plugin.path>/evilmod.py`` is refused with a 400 naming ``file``, and no
file appears. (b) A worker whose ``connector.allowed.paths`` overlaps ``plugin.path`` does not
start, and says which two paths overlap. (c) A symlink planted inside the allowed directory after
the connector was created, pointing outside, is not followed when the task opens the file: the
task fails naming ``file``, nothing outside is read into a topic or written. (d) ``${dir:}``
through a symlink to a file outside its ``allowed.paths`` is refused naming the key.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.kafka_helpers import consume_all, unique_topic_name
from tests.integration.worker_process import TEST_PLUGINS, WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration

SECRET = "the-secret-line-outside-the-grant"


@pytest.fixture(scope="module")
def area(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``plugins/`` (on the worker's plugin path), ``outside/secret.txt``, ``secrets/`` for ``${dir:}``."""
    root = tmp_path_factory.mktemp("paths")
    for name in ("plugins", "outside", "secrets"):
        (root / name).mkdir()
    (root / "outside" / "secret.txt").write_text(SECRET + "\n")
    return root


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory, area: Path) -> WorkerProcess:
    """A worker at the defaults of connector.allowed.paths, with ``area/plugins`` on its plugin path."""
    settings: dict[str, Any] = {
        "connector.allowed.paths": "",  # the default: <state.dir>/data
        "plugin.path": f"{TEST_PLUGINS},{area / 'plugins'}",
        "config.providers": "dir",
        "config.providers.dir.param.allowed.paths": str(area / "secrets"),
    }
    return module_worker_process(**settings)


def data_dir(worker: WorkerProcess) -> Path:
    return worker.home / "state" / "data"


def create(worker: WorkerProcess, name: str, config: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=10)


def wait_task_failed(worker: WorkerProcess, name: str, timeout: float = 20) -> str:
    """The trace of task 0 once it is FAILED."""
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = httpx.get(f"{worker.url}/connectors/{name}/status", timeout=5).json()
        tasks = body.get("tasks") or []
        if tasks and tasks[0]["state"] == "FAILED":
            return str(tasks[0].get("trace", ""))
        time.sleep(0.2)
    raise AssertionError(f"task of {name} did not fail: {body}")


def test_a_file_sink_into_the_plugin_path_is_refused_and_writes_nothing(worker: WorkerProcess, area: Path) -> None:
    evil = area / "plugins" / "evilmod.py"
    config = {"connector.class": "FileStreamSink", "file": str(evil), "topics": unique_topic_name("evil")}
    created = create(worker, "evil-sink", config)
    assert created.status_code == 400, created.text
    assert created.json()["message"].split("\n")[-1].startswith("file: ")
    assert httpx.get(f"{worker.url}/connectors/evil-sink/status", timeout=5).status_code == 404
    assert not evil.exists()
    # The default grant itself works: the data folder was created at start and a sink may write there.
    assert data_dir(worker).is_dir()
    inside = {**config, "file": str(data_dir(worker) / "out.txt")}
    assert create(worker, "inside-sink", inside).status_code == 201
    worker.wait_running("inside-sink")
    assert httpx.delete(f"{worker.url}/connectors/inside-sink", timeout=10).status_code == 204


def test_a_worker_whose_allowed_paths_overlap_the_plugin_path_does_not_start(kafka, area: Path, tmp_path: Path) -> None:
    settings: dict[str, Any] = {"plugin.path": str(area / "plugins"), "connector.allowed.paths": str(area)}
    w = WorkerProcess(tmp_path, kafka.bootstrap_servers, **settings)
    done = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "standalone", str(w.props_path)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"connector.allowed.paths: the allowed path {area} contains plugin.path {area / 'plugins'}" in done.stderr


def test_a_symlink_planted_after_create_is_not_followed_by_the_source_task(
    worker: WorkerProcess, kafka, area: Path
) -> None:
    link = data_dir(worker) / "later.txt"
    topic = unique_topic_name("planted")
    created = create(worker, "planted-src", {"connector.class": "FileStreamSource", "file": str(link), "topic": topic})
    assert created.status_code == 201, created.text
    worker.wait_running("planted-src")  # waiting for the file to appear
    link.symlink_to(area / "outside" / "secret.txt")
    trace = wait_task_failed(worker, "planted-src")
    assert "file: " in trace and "outside the directories this worker lets connectors use" in trace
    assert SECRET not in trace
    with pytest.raises(TimeoutError):
        consume_all(kafka.bootstrap_servers, topic, expected_count=1, timeout=3)
    assert SECRET not in worker.log(200_000)


def test_a_symlink_planted_before_a_restart_is_not_followed_by_the_sink_task(worker: WorkerProcess, area: Path) -> None:
    out = data_dir(worker) / "sink-out.txt"
    topic = unique_topic_name("planted-sink")
    created = create(worker, "planted-sink", {"connector.class": "FileStreamSink", "file": str(out), "topics": topic})
    assert created.status_code == 201, created.text
    worker.wait_running("planted-sink")
    out.unlink()
    out.symlink_to(area / "outside" / "written.txt")  # dangling: an open following it would create it
    restarted = httpx.post(f"{worker.url}/connectors/planted-sink/restart?includeTasks=true", timeout=10)
    assert restarted.status_code in (200, 202, 204), restarted.text
    assert "file: " in wait_task_failed(worker, "planted-sink")
    assert not (area / "outside" / "written.txt").exists()


def test_dir_provider_does_not_follow_a_symlink_out_of_its_allowed_paths(worker: WorkerProcess, area: Path) -> None:
    (area / "secrets" / "password").symlink_to(area / "outside" / "secret.txt")
    config = {
        "connector.class": "FileStreamSource",
        "file": str(data_dir(worker) / "never.txt"),
        "topic": f"${{dir:{area / 'secrets'}:password}}",
    }
    created = create(worker, "dir-link", config)
    assert created.status_code == 400, created.text
    message = created.json()["message"]
    assert "'topic'" in message and "outside the provider's allowed.paths" in message
    assert SECRET not in message
    assert httpx.get(f"{worker.url}/connectors/dir-link/status", timeout=5).status_code == 404
