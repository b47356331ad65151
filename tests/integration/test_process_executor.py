"""``task.executor=process``: tasks on threads of task host processes, on a real standalone worker
and broker.

What a user relies on: tasks are spread over host processes other than the worker (so a worker
uses every core), and a host with no task left ends; a host process that dies is a FAILED task
that the restart policy brings back, resuming from its stored offset with nothing lost; and a task
that hangs past ``task.shutdown.graceful.timeout.ms`` has its host killed instead of stalling the
worker, its REST API or its other connectors — the hung task's siblings in that host move to
another host first and carry on from where they were.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name
from tests.integration.worker_process import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration

HANGING = "tests.plugins.hanging.HangingSource"


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """Where the test plugin writes (connector.allowed.paths): the only place a sandboxed task
    host may write, beside the worker's own files in tmp_path."""
    path = tmp_path / "files"
    path.mkdir()
    return path


@pytest.fixture
def worker(worker_process: WorkerFactory, files: Path) -> WorkerProcess:
    return worker_process(
        **{
            "task.executor": "process",
            "connector.allowed.paths": str(files),
            "offset.flush.interval.ms": "300",
            "task.shutdown.graceful.timeout.ms": "2000",
            "task.restart.backoff.initial.ms": "300",
        },
    )


def pids(path: Path) -> dict[int, list[int]]:
    """Task → the pids it started in, in order."""
    out: dict[int, list[int]] = {}
    for line in path.read_text().splitlines() if path.exists() else ():
        task, pid = map(int, line.split())
        out.setdefault(task, []).append(pid)
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (killed, not yet reaped) counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def wait_for(probe: Any, done: Any, timeout: float = 30, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    value = probe()
    while not done(value):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: last {value!r}")
        time.sleep(0.1)
        value = probe()
    return value


def create(worker: WorkerProcess, name: str, files: Path, topic: str, tasks: int = 1) -> dict[str, str]:
    config = {
        "connector.class": HANGING,
        "tasks.max": str(tasks),
        "topic": topic,
        "pid.file": str(files / f"{name}.pids"),
        "hang.flag": str(files / f"{name}.hang"),
    }
    r = httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=30)
    assert r.status_code == 201, r.text
    worker.wait_running(name, tasks=tasks)
    return config


def test_tasks_spread_over_host_processes(worker: WorkerProcess, kafka: Any, files: Path) -> None:
    topic = unique_topic_name("proc")
    create_topic(kafka.bootstrap_servers, topic)
    create(worker, "two", files, topic, tasks=2)
    started = wait_for(lambda: pids(files / "two.pids"), lambda p: len(p) == 2, what="both tasks started")
    task_pids = {p[-1] for p in started.values()}
    assert len(task_pids) == 2 and worker.proc is not None and worker.proc.pid not in task_pids
    assert all(alive(pid) for pid in task_pids)  # two hosts on a 2-core machine: one task each
    records = consume_all(kafka.bootstrap_servers, topic, 20, timeout=30)
    assert {r.value.decode().split(":")[0] for r in records} == {"0", "1"}  # both processes produce
    # The task processes relay their error counters: the status shows them as for threads.
    tasks = httpx.get(f"{worker.url}/connectors/two/status", timeout=5).json()["tasks"]
    assert [t["errors"]["total-record-failures"] for t in tasks] == [0, 0], tasks

    assert httpx.delete(f"{worker.url}/connectors/two", timeout=30).status_code == 204
    wait_for(lambda: [pid for pid in task_pids if alive(pid)], lambda left: not left, what="task processes to exit")


def test_a_killed_task_process_is_a_failure_the_restart_policy_repairs(
    worker: WorkerProcess, kafka: Any, files: Path
) -> None:
    topic = unique_topic_name("proc-kill")
    create_topic(kafka.bootstrap_servers, topic)
    create(worker, "victim", files, topic)
    consume_all(kafka.bootstrap_servers, topic, 20, timeout=30)
    (first,) = pids(files / "victim.pids")[0]
    time.sleep(1)  # let an offset commit happen, so the restart resumes rather than starts over

    os.kill(first, signal.SIGKILL)
    restarted = wait_for(lambda: pids(files / "victim.pids")[0], lambda p: len(p) == 2, what="a restarted task process")
    assert restarted[1] != first
    worker.wait_running("victim")
    assert "was killed by signal 9" in worker.log()

    # Nothing lost: every number up to the highest produced is in the topic (repeats allowed,
    # from the interval after the last offset commit).
    time.sleep(1)
    values = [int(r.value.decode().split(":")[1]) for r in consume_all(kafka.bootstrap_servers, topic, 1, timeout=30)]
    assert sorted(set(values)) == list(range(max(values) + 1))
    assert max(values) > 25  # and it went on counting after the restart


def test_a_hung_task_is_killed_without_stalling_the_worker(worker: WorkerProcess, kafka: Any, files: Path) -> None:
    busy, stuck = unique_topic_name("proc-busy"), unique_topic_name("proc-stuck")
    for topic in (busy, stuck):
        create_topic(kafka.bootstrap_servers, topic)
    create(worker, "busy", files, busy)
    config = create(worker, "stuck", files, stuck)
    (stuck_pid,) = pids(files / "stuck.pids")[0]
    Path(config["hang.flag"]).touch()  # poll() now blocks and ignores stop()
    time.sleep(0.5)

    before = len(consume_all(kafka.bootstrap_servers, busy, 1, timeout=30))
    started = time.monotonic()
    assert httpx.delete(f"{worker.url}/connectors/stuck", timeout=30).status_code == 204
    assert time.monotonic() - started < 15  # graceful timeout (2 s) plus the kill, not forever
    wait_for(lambda: alive(stuck_pid), lambda a: not a, timeout=15, what="the hung task's process to be killed")
    assert "did not stop in time: killing its process" in worker.log()

    # The worker, its REST API and the other connector carry on.
    assert httpx.get(f"{worker.url}/connectors", timeout=5).json() == ["busy"]
    wait_for(
        lambda: len(consume_all(kafka.bootstrap_servers, busy, 1, timeout=30)),
        lambda n: n > before + 10,
        what="the busy connector to keep producing",
    )
    assert httpx.get(f"{worker.url}/connectors/busy/status", timeout=5).json()["tasks"][0]["state"] == "RUNNING"


def test_task_processes_end_with_a_killed_worker(kafka: Any, tmp_path: Path, files: Path) -> None:
    """No orphans: a task process whose worker was SIGKILLed stops (its offsets went with the
    worker, so a new worker re-delivers from the last commit)."""
    settings: dict[str, Any] = {"task.executor": "process", "connector.allowed.paths": str(files)}
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **settings).start()
    topic = unique_topic_name("proc-orphan")
    create_topic(kafka.bootstrap_servers, topic)
    create(worker, "orphan", files, topic, tasks=2)
    task_pids = [
        p[-1] for p in wait_for(lambda: pids(files / "orphan.pids"), lambda p: len(p) == 2, what="2 tasks").values()
    ]
    worker.kill()
    wait_for(
        lambda: [pid for pid in task_pids if alive(pid)],
        lambda left: not left,
        timeout=20,
        what="task processes to exit",
    )


def test_a_hung_task_s_siblings_move_to_another_host_first(kafka: Any, tmp_path: Path, files: Path) -> None:
    """One host for every task: killing the hung task's host must not take its sibling down."""
    worker = WorkerProcess(
        tmp_path,
        kafka.bootstrap_servers,
        **{
            "task.executor": "process",
            "connector.allowed.paths": str(files),
            "task.host.processes": "1",
            "offset.flush.interval.ms": "300",
            "task.shutdown.graceful.timeout.ms": "2000",
        },
    ).start()
    try:
        busy, stuck = unique_topic_name("host-busy"), unique_topic_name("host-stuck")
        for topic in (busy, stuck):
            create_topic(kafka.bootstrap_servers, topic)
        create(worker, "busy", files, busy)
        config = create(worker, "stuck", files, stuck)
        (busy_pid,) = pids(files / "busy.pids")[0]
        (stuck_pid,) = pids(files / "stuck.pids")[0]
        assert busy_pid == stuck_pid  # both in the one host
        consume_all(kafka.bootstrap_servers, busy, 20, timeout=30)
        Path(config["hang.flag"]).touch()
        time.sleep(0.5)

        assert httpx.delete(f"{worker.url}/connectors/stuck", timeout=30).status_code == 204
        moved = wait_for(lambda: pids(files / "busy.pids")[0], lambda p: len(p) == 2, timeout=15, what="busy to move")
        assert moved[1] != stuck_pid and alive(moved[1])
        wait_for(lambda: alive(stuck_pid), lambda a: not a, timeout=15, what="the hung task's host to be killed")
        assert "did not stop in time: killing its process" in worker.log()
        assert httpx.get(f"{worker.url}/connectors/busy/status", timeout=5).json()["tasks"][0]["state"] == "RUNNING"

        # The sibling stopped cleanly before it moved: it carries on from its committed offset, nothing lost.
        before = max(
            int(r.value.decode().split(":")[1]) for r in consume_all(kafka.bootstrap_servers, busy, 1, timeout=30)
        )
        wait_for(
            lambda: [
                int(r.value.decode().split(":")[1]) for r in consume_all(kafka.bootstrap_servers, busy, 1, timeout=30)
            ],
            lambda values: max(values) > before + 10,
            what="the moved task to keep producing",
        )
        values = [
            int(r.value.decode().split(":")[1]) for r in consume_all(kafka.bootstrap_servers, busy, 1, timeout=30)
        ]
        assert sorted(set(values)) == list(range(max(values) + 1))
        assert "was killed by signal" not in worker.log()  # no task but the hung one went down
    finally:
        assert worker.stop() == 0, worker.log()
