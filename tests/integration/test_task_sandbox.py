"""The task host sandbox (``task.host.sandbox=landlock``) on a real standalone worker and broker.

A deliberately malicious plugin (``tests.plugins.malicious``) opens files itself, so no check of
its config can see what it does; ``connector.allowed.paths=*`` and the default override policy
leave the sandbox as the only thing in its way. What a user relies on: the task cannot read
``/etc/shadow`` or the worker's config file, cannot drop a module into ``plugin.path`` or a file
beside the worker's config; none of their content reaches the topic, the status or the log; the
task's status shows the kernel's ``PermissionError``; ``/health`` says the hosts are confined; and
a legitimate connector in the same worker still moves a file's lines into a topic. And a task that
digs its host's pipe to the worker's offset store out of memory reaches only the offsets of the
connectors with a task in its host.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]  # the worker's plugin.path (see WorkerProcess)


@pytest.fixture
def sandboxed(kafka: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[WorkerProcess]:
    conf = tmp_path / "conf"
    conf.mkdir()
    settings: dict[str, Any] = {
        "task.executor": "process",
        "task.host.processes": str(getattr(request, "param", 1)),
        "connector.allowed.paths": "*",  # the widest grant: only the sandbox is left
        "state.dir": str(tmp_path / "state"),
        "task.restart.max.attempts": "0",
    }
    worker = WorkerProcess(conf, kafka.bootstrap_servers, **settings)
    yield worker
    worker.stop()


def test_a_malicious_task_reaches_nothing_outside_its_grant(
    sandboxed: WorkerProcess, kafka: Any, tmp_path: Path
) -> None:
    secret = f"TOPSECRET-{uuid.uuid4().hex}"
    # The worker's config file holds what a tenant must never read (a comment stands for a password).
    sandboxed.props_path.write_text(sandboxed.props_path.read_text() + f"# {secret}\n")
    shadow_line = Path("/etc/shadow").read_text().splitlines()[0]  # the test runs as root, the task would too
    into_plugin_path = REPO / f"sluice_sandbox_probe_{uuid.uuid4().hex}.py"
    beside_config = sandboxed.props_path.parent / "evil.properties"
    data = tmp_path / "data"
    data.mkdir()
    (data / "in.txt").write_text("alpha\nbeta\n")
    sandboxed.start()
    try:
        health = httpx.get(f"{sandboxed.url}/health", timeout=5).json()
        assert health["details"]["sandbox"].startswith("landlock ABI "), health

        stolen, copied = unique_topic_name("sandbox-stolen"), unique_topic_name("sandbox-legit")
        create_topic(kafka.bootstrap_servers, stolen)
        evil = {
            "connector.class": "tests.plugins.malicious.MaliciousSource",
            "topic": stolen,
            "read.paths": f"/etc/shadow,{sandboxed.props_path}",
            "write.paths": f"{into_plugin_path},{beside_config}",
        }
        created = httpx.post(f"{sandboxed.url}/connectors", json={"name": "evil", "config": evil}, timeout=30)
        assert created.status_code == 201, created.text  # no check refuses it: only the sandbox stands
        legit = {"connector.class": "FileStreamSource", "file": str(data / "in.txt"), "topic": copied}
        created = httpx.post(f"{sandboxed.url}/connectors", json={"name": "legit", "config": legit}, timeout=30)
        assert created.status_code == 201, created.text

        status = _wait_task_state(sandboxed, "evil", "FAILED")
        trace = status["tasks"][0]["trace"]
        assert "PermissionError: [Errno 13] Permission denied" in trace, trace
        assert [r.value for r in consume_all(kafka.bootstrap_servers, copied, 2)] == [b"alpha", b"beta"]
        assert consume_all(kafka.bootstrap_servers, stolen, 0, timeout=10, settle=1.0) == []

        assert not into_plugin_path.exists() and not beside_config.exists()
        log = sandboxed.log(10**7)
        for path in (Path("/etc/shadow"), sandboxed.props_path):
            assert f"malicious: read {path} denied: PermissionError" in log, log[-3000:]
        for path in (into_plugin_path, beside_config):
            assert f"malicious: write {path} denied: PermissionError" in log, log[-3000:]
        assert " succeeded" not in "\n".join(line for line in log.splitlines() if "malicious:" in line)
        everything = orjson.dumps(status).decode() + log
        assert secret not in everything and shadow_line not in everything
    finally:
        into_plugin_path.unlink(missing_ok=True)


def _wait_task_state(worker: WorkerProcess, name: str, state: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = httpx.get(f"{worker.url}/connectors/{name}/status", timeout=5)
        if r.status_code == 200:
            body = r.json()
            if body["tasks"] and body["tasks"][0]["state"] == state:
                return body
        time.sleep(0.2)
    raise AssertionError(f"task of {name} not {state} after {timeout}s: {body}\n{worker.log()}")


@pytest.mark.parametrize("sandboxed", [2], indirect=True)  # two hosts: the victim's task in one, the thief's in the other
def test_a_task_host_reaches_only_its_own_connectors_offsets(sandboxed: WorkerProcess, kafka: Any) -> None:
    """Code that took its task host over asks the worker's offset store, over the host's pipe, for
    the offsets of a connector whose tasks run in another host, and tries to overwrite them:
    refused; its own connector's are not. (Tasks in one host share its memory: the host is the
    boundary.)"""
    sandboxed.start()
    victim, thief, outcomes = "offsets-victim", "offsets-thief", unique_topic_name("thief-outcomes")
    create_topic(kafka.bootstrap_servers, outcomes)
    configs = {
        victim: {"connector.class": "SequenceSource", "topic": unique_topic_name("victim"), "sequence.rate": "20"},
        thief: {
            "connector.class": "tests.plugins.offset_thief.OffsetThief",
            "topic": outcomes,
            "victim": victim,
            "own": thief,
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
        },
    }
    for name, config in configs.items():
        response = httpx.put(f"{sandboxed.url}/connectors/{name}/config", json=config, timeout=10)
        assert response.status_code == 201, response.text
    sandboxed.wait_running(victim)
    said = {r.value.decode().split(":", 1)[0]: r.value.decode() for r in consume_all(kafka.bootstrap_servers, outcomes, 3)}
    assert said["read other"].startswith("read other: denied: ConnectError"), said
    assert f"'{victim}' has no task in this task host" in said["read other"], said
    assert said["write other"].startswith("write other: denied: ConnectError"), said
    assert said["read own"].startswith("read own: allowed:"), said
    offsets = httpx.get(f"{sandboxed.url}/connectors/{victim}/offsets", timeout=5).json()["offsets"]
    assert all(o["offset"].get("seq") != 999_999 for o in offsets), offsets
