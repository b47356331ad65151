"""A flood of idle connections against a worker with few file descriptors (issue 36, item 8).

The reproduction: 1,260 unauthenticated idle connections from 42 loopback addresses, each under
the per-client cap, against ``RLIMIT_NOFILE=1024``: ``/health`` timed out, asyncio logged 163,652
``accept() out of system resource`` lines, a source task failed writing offsets and the worker
never recovered. Here the worker runs with a small ``RLIMIT_NOFILE`` and a sequence source that
commits offsets to a file every second, and the test floods it from several 127.0.0.x addresses
(Linux routes the whole 127/8 to the 127.0.0.1 listener):

- with the default caps, ``/health`` answers during the flood and nothing fails;
- with the caps opened wide, the flood really exhausts the descriptors: the log gets a handful of
  lines, and once the flood ends the worker answers and its task runs again without a hand.
"""

from __future__ import annotations

import contextlib
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
NOFILE = 384
#: Flood sources: 127.0.0.10 … 127.0.0.(10+SOURCES-1), each under the per-client cap of 32.
SOURCES = 16
PER_SOURCE = 30
#: Slack for a loaded machine, not a measurement.
RECOVERY_S = 30.0


class LimitedWorker(WorkerProcess):
    """A worker whose process starts with ``RLIMIT_NOFILE=NOFILE``."""

    def start(self, *connector_files: Path) -> WorkerProcess:
        log = self.log_path.open("ab")

        def limit() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sluice.cli", self.mode, str(self.props_path), *map(str, connector_files)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"},
            preexec_fn=limit,  # noqa: PLW1509 - only setrlimit, before exec
        )
        self.wait_healthy()
        return self

    def open_fds(self) -> int:
        assert self.proc is not None
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))


@pytest.fixture
def started(kafka: KafkaBroker, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LimitedWorker]:
    settings: dict[str, Any] = getattr(request, "param", {})
    worker = LimitedWorker(tmp_path, kafka.bootstrap_servers, **{"task.executor": "thread", **settings})
    worker.start()
    topic = unique_topic_name("fd-flood")
    config = {
        "connector.class": "SequenceSource",
        "tasks.max": "1",
        "topic": topic,
        "sequence.rate": "50",
        "sequence.batch.size": "5",
    }
    assert httpx.put(f"{worker.url}/connectors/flooded/config", json=config, timeout=10).status_code in (200, 201)
    worker.wait_running("flooded")
    deadline = time.monotonic() + 20
    while not offset_of(worker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert offset_of(worker), f"the task committed no offsets before the flood:\n{worker.log()}"
    try:
        yield worker
    finally:
        assert worker.stop() == 0, worker.log(20_000)


@contextlib.contextmanager
def flood(worker: WorkerProcess) -> Iterator[list[socket.socket]]:
    """Idle connections from SOURCES loopback addresses; whatever the worker closes stays closed."""
    held: list[socket.socket] = []
    try:
        for n in range(PER_SOURCE):
            for source in range(SOURCES):
                sock = socket.socket()
                sock.setblocking(False)
                sock.bind((f"127.0.0.{10 + source}", 0))
                with contextlib.suppress(BlockingIOError):
                    sock.connect(("127.0.0.1", worker.port))
                held.append(sock)
            if n % 5 == 4:
                time.sleep(0.05)  # let the worker's loop run between waves, as a real flood's latency would
        yield held
    finally:
        for sock in held:
            sock.close()


def health(worker: WorkerProcess, source: str = "127.0.0.2") -> int | None:
    """The status of ``GET /health`` from ``source``; None when refused, reset or timed out."""
    try:
        transport = httpx.HTTPTransport(local_address=source)
        with httpx.Client(base_url=worker.url, timeout=2, transport=transport) as client:
            return client.get("/health").status_code
    except httpx.HTTPError:
        return None


def tasks_running(worker: WorkerProcess, connector: str) -> bool:
    r = httpx.get(f"{worker.url}/connectors/{connector}/status", timeout=5)
    return r.status_code == 200 and [t["state"] for t in r.json()["tasks"]] == ["RUNNING"]


def offset_of(worker: WorkerProcess) -> int:
    """When the sequence task last committed offsets (the file's modification time; 0 before the first)."""
    path = worker.offsets_path
    return path.stat().st_mtime_ns if path.exists() else 0


def accept_error_lines(worker: WorkerProcess) -> int:
    text = worker.log_path.read_text(errors="replace")
    return sum(
        1 for line in text.splitlines() if "out of system resource" in line or "cannot accept connections" in line
    )


def test_with_the_default_caps_the_worker_serves_health_and_its_task_through_the_flood(started: LimitedWorker) -> None:
    worker = started
    log_before = worker.log_path.stat().st_size
    with flood(worker):
        time.sleep(1)
        during = [health(worker) for _ in range(3)]
        fds = worker.open_fds()
        running = tasks_running(worker, "flooded")
    assert during == [200, 200, 200]
    # The listener stayed within its cap (a quarter of 384) and kept the reserve free.
    assert fds < NOFILE - NOFILE // 4, fds
    assert running
    assert accept_error_lines(worker) == 0
    assert worker.log_path.stat().st_size - log_before < 20_000, worker.log(20_000)


@pytest.mark.parametrize(
    "started", [{"rest.connections.max": "100000", "rest.connections.fd.reserve": "0"}], indirect=True
)
def test_when_descriptors_run_out_the_log_stays_short_and_the_worker_recovers_by_itself(started: LimitedWorker) -> None:
    worker = started
    log_before = worker.log_path.stat().st_size
    with flood(worker):
        deadline = time.monotonic() + 10
        while worker.open_fds() < NOFILE - 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        exhausted_fds = worker.open_fds()
        time.sleep(3)  # long enough for the task's offset commits to fail and its restarts to be tried
    assert exhausted_fds >= NOFILE - 2, f"the flood did not exhaust the worker's descriptors ({exhausted_fds})"
    deadline = time.monotonic() + RECOVERY_S
    while time.monotonic() < deadline and not (health(worker) == 200 and tasks_running(worker, "flooded")):
        time.sleep(0.5)
    assert health(worker) == 200
    assert tasks_running(worker, "flooded"), worker.log(20_000)
    committed = offset_of(worker)
    time.sleep(2.5)
    assert offset_of(worker) > committed, "the task no longer commits offsets"
    assert accept_error_lines(worker) <= 3, worker.log(20_000)
    assert worker.log_path.stat().st_size - log_before < 100_000
