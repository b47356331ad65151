"""``PUT /admin/loggers/{name}`` reaches the tasks, on threads of the worker and in task processes.

What a user checks: set a connector's logger to DEBUG on a running worker and its tasks' DEBUG
lines appear in the worker's log, tagged with the task; a task started afterwards logs at DEBUG
from its start; and setting the level back to INFO is answered with the loggers it affected. With
``?scope=cluster`` (KIP-976) on one worker of a distributed cluster, every worker and the task
processes of each follow, through a ``logger-cluster-<name>`` record of Connect's shape.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.distributed_helpers import Cluster, wait_for
from tests.integration.kafka_helpers import consume_all, unique_topic_name
from tests.integration.worker_process import WorkerProcess
from tests.plugins.chatty import POLL_LINE

pytestmark = pytest.mark.integration

CHATTY = "tests.plugins.chatty.ChattySequenceSource"
LOGGER = "tests.plugins.chatty"


def chatty_config(tasks: int = 1) -> dict[str, str]:
    return {
        "connector.class": CHATTY,
        "tasks.max": str(tasks),
        "topic": unique_topic_name("chatty"),
        "sequence.rate": "20",
        "sequence.batch.size": "2",
        "key.converter": "StringConverter",
        "value.converter": "JsonConverter",
    }


def deploy(worker: WorkerProcess, name: str) -> None:
    r = httpx.put(f"{worker.url}/connectors/{name}/config", json=chatty_config(), timeout=30)
    assert r.status_code in (200, 201), r.text
    worker.wait_running(name)


def debug_lines(worker: WorkerProcess, name: str, task: int = 0) -> list[str]:
    text = worker.log_path.read_text(errors="replace") if worker.log_path.exists() else ""
    return [line for line in text.splitlines() if f"DEBUG [{name}|task-{task}] {POLL_LINE}" in line]


def wait_for_debug_line(worker: WorkerProcess, name: str, task: int = 0, deadline_s: float = 15) -> None:
    """Bounded: the change takes well under a second; the deadline only keeps a slow machine from flaking."""
    deadline = time.monotonic() + deadline_s
    while not debug_lines(worker, name, task):
        if time.monotonic() > deadline:
            raise AssertionError(f"no DEBUG line from {name}'s task within {deadline_s}s:\n{worker.log()}")
        time.sleep(0.05)


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_a_logger_level_set_over_rest_reaches_running_and_new_tasks(kafka: Any, tmp_path: Path, executor: str) -> None:
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **{"task.executor": executor}).start()
    try:
        deploy(worker, "chatty-before")
        assert debug_lines(worker, "chatty-before") == []  # INFO: the task polls, silently

        r = httpx.put(f"{worker.url}/admin/loggers/{LOGGER}", json={"level": "DEBUG"}, timeout=10)
        assert r.status_code == 200 and LOGGER in r.json(), r.text
        wait_for_debug_line(worker, "chatty-before")
        assert httpx.get(f"{worker.url}/admin/loggers/{LOGGER}", timeout=10).json()["level"] == "DEBUG"

        # A task that starts after the change gets the level the worker has now.
        deploy(worker, "chatty-after")
        wait_for_debug_line(worker, "chatty-after")

        r = httpx.put(f"{worker.url}/admin/loggers/{LOGGER}", json={"level": "INFO"}, timeout=10)
        assert r.status_code == 200 and LOGGER in r.json(), r.text
    finally:
        assert worker.stop() == 0, worker.log()


def test_cluster_scope_reaches_every_worker_and_its_task_processes(kafka: Any, tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, kafka.bootstrap_servers, 2, **{"task.executor": "process"}).start()
    try:
        first, second = cluster.workers
        cluster.put_config(first, "chatty-cluster", chatty_config(tasks=4))
        status = cluster.wait_running("chatty-cluster", 4)
        assert all(not debug_lines(w, "chatty-cluster", t) for w in cluster.workers for t in range(4))

        r = cluster.request(second, "PUT", f"/admin/loggers/{LOGGER}", params={"scope": "cluster"}, json={"level": "debug"})
        assert r.status_code == 204, r.text
        for worker in cluster.workers:
            wait_for(
                lambda w=worker: httpx.get(f"{w.url}/admin/loggers/{LOGGER}", timeout=10).json().get("level"),
                lambda level: level == "DEBUG",
                timeout=15,
                what=f"{LOGGER} at DEBUG on {worker.url}",
            )
        for task in status["tasks"]:  # wherever a task runs, its process logs at DEBUG now
            wait_for_debug_line(cluster.worker_by_id(task["worker_id"]), "chatty-cluster", task["id"])

        # Connect's record: key logger-cluster-<name>, value {"level": ...} (JSON without schema).
        records = consume_all(kafka.bootstrap_servers, cluster.settings["config.storage.topic"], 1, settle=2)
        levels = [orjson.loads(r.value) for r in records if r.key == f"logger-cluster-{LOGGER}".encode() and r.value]
        assert levels == [{"level": "DEBUG"}]

        bad = httpx.put(f"{first.url}/admin/loggers/{LOGGER}", params={"scope": "cluster"}, json={"level": "LOUD"}, timeout=10)
        assert bad.status_code == 400, bad.text
    finally:
        cluster.stop()
