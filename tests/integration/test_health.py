"""``GET /health`` as KIP-1017 defines it, on a distributed worker in each state: starting (503),
healthy (200), its herder thread stuck (500), and out of contact with its Kafka cluster (500),
then healthy again once the cluster is back. The worker runs in this process, on a broker of
its own that the test stops and starts again (the session broker is shared).

A standalone worker (a real ``sluice standalone`` process) reports Kafka the same way: 500 naming
the bootstrap servers when it starts with no broker, 200 once one answers, 500 again when it stops."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sluice.cli.distributed import DistributedWorker
from sluice.deploy.kafka_stack import DEFAULT_KAFKA_VERSION, KafkaBroker
from tests.integration.distributed_helpers import cluster_settings
from tests.integration.worker_process import WorkerProcess, free_port

pytestmark = pytest.mark.integration

#: What /health says of the task sandbox when tasks run as threads of the worker (no host to confine).
THREADS = {"sandbox": "off: tasks run in the worker process (task.executor=thread)"}
STARTING_BODY = {"status": "starting", "message": "Worker is still starting up.", "details": THREADS}
HEALTHY_BODY = {
    "status": "healthy",
    "message": "Worker has completed startup and is ready to handle requests.",
    "details": THREADS,
}


@pytest.fixture
def stopped_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    """A broker of this test's own, its address known but not started yet."""
    broker = KafkaBroker(
        version=os.environ.get("SLUICE_KAFKA_VERSION", DEFAULT_KAFKA_VERSION),
        data_dir=tmp_path / "kafka",
        kill_with_parent=True,
    )
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def own_broker(stopped_broker: KafkaBroker) -> KafkaBroker:
    stopped_broker.start()
    return stopped_broker


def _health(url: str) -> tuple[int, dict[str, Any]]:
    r = httpx.get(f"{url}/health", timeout=15)
    return r.status_code, r.json()


def _wait_health(url: str, status: int, timeout: float = 60, saying: str = "") -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: tuple[int, dict[str, Any]] | None = None
    while time.monotonic() < deadline:
        try:
            last = _health(url)
        except httpx.HTTPError:
            last = None
        if last is not None and last[0] == status and saying in last[1]["message"]:
            return last[1]
        time.sleep(0.2)
    raise AssertionError(f"/health never answered {status}; last: {last}")


def test_distributed_health_in_each_state(own_broker: KafkaBroker) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    settings = cluster_settings(
        f"health-{time.time_ns()}",
        **{"bootstrap.servers": own_broker.bootstrap_servers, "listeners": url, "task.executor": "thread"},
    )
    node = DistributedWorker(settings)
    node.herder.health_timeout_s = 2.0
    # Hold the herder's start until the test has seen the REST server answer "starting".
    gate = threading.Event()
    start_herder = node.herder.start

    def gated_start() -> None:
        gate.wait(30)
        start_herder()

    node.herder.start = gated_start  # type: ignore[method-assign]
    starter = threading.Thread(target=node.start, daemon=True)
    starter.start()
    try:
        body = _wait_health(url, 503, timeout=30)
        assert body == STARTING_BODY
        gate.set()
        body = _wait_health(url, 200)
        assert body == HEALTHY_BODY
        starter.join(30)

        # Stuck: an operation holds the herder, so its tick thread cannot finish a tick.
        with node.herder._lock:
            body = _wait_health(url, 500, timeout=20)
        assert body["status"] == "unhealthy" and "has not completed a tick" in body["message"], body
        _wait_health(url, 200, timeout=20)

        # Out of contact: the cluster goes away; the worker says so (its tick, waiting for Kafka, may
        # be reported stalled first), and recovers when it is back.
        own_broker.stop()
        body = _wait_health(url, 500, timeout=30, saying="lost contact with the Kafka cluster")
        assert body["status"] == "unhealthy" and own_broker.bootstrap_servers in body["message"], body
        # What the group client itself reports, so a worker that does not rejoin says where it is stuck.
        assert "the group client reports coordinator state" in body["message"], body
        own_broker.start()
        _wait_health(url, 200, timeout=90)
    finally:
        gate.set()
        starter.join(30)
        node.stop()


def test_standalone_health_follows_kafka(stopped_broker: KafkaBroker, tmp_path: Path) -> None:
    """No broker at start: 500 naming Kafka after distributed mode's delay (8 s), on the REST listener
    and on ``metrics.listeners``; the broker starts: 200; it stops: 500 again. The log names each
    loss once and the return once, with no line per failed connection."""
    bootstrap = stopped_broker.bootstrap_servers
    metrics_url = f"http://127.0.0.1:{free_port()}"
    worker = WorkerProcess(tmp_path / "worker", bootstrap, **{"metrics.listeners": metrics_url})
    try:
        started = time.monotonic()
        worker.start()  # 200 at first: the delay has not passed
        body = _wait_health(worker.url, 500, timeout=20, saying="cannot reach the Kafka cluster")
        assert 8 <= time.monotonic() - started < 20
        assert body["status"] == "unhealthy", body
        assert body["message"].startswith(
            f"Worker 127.0.0.1:{worker.port} cannot reach the Kafka cluster at {bootstrap}: "
        ), body
        assert "(last error: Connection refused)" in body["message"], body
        assert _health(metrics_url)[0] == 500

        stopped_broker.start()
        assert _wait_health(worker.url, 200, timeout=20)["status"] == "healthy"
        assert _health(metrics_url)[0] == 200

        stopped_broker.stop()
        body = _wait_health(worker.url, 500, timeout=20, saying="has lost contact with the Kafka cluster")
        assert f"at {bootstrap}: no broker has answered for " in body["message"], body
        # The probe that finds the loss logs it; /health may have said so a moment before.
        deadline = time.monotonic() + 5
        while worker.log(tail=1_000_000).count("GET /health reports it unhealthy until a broker answers") < 2:
            assert time.monotonic() < deadline, worker.log()
            time.sleep(0.2)
    finally:
        worker.stop()
    log = worker.log(tail=1_000_000)
    assert log.count("GET /health reports it unhealthy until a broker answers") == 2, log
    assert log.count(f"In contact with the Kafka cluster at {bootstrap} again") == 1, log
    assert "Connection refused" not in log.replace("(last error: Connection refused)", ""), log
