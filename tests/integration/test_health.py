"""``GET /health`` as KIP-1017 defines it, on a distributed worker in each state: starting (503),
healthy (200), its herder thread stuck (500), and out of contact with its Kafka cluster (500),
then healthy again once the cluster is back. The worker runs in this process, on a broker of
its own that the test stops and starts again (the session broker is shared)."""

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
from tests.integration.worker_process import free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    broker = KafkaBroker(
        version=os.environ.get("SLUICE_KAFKA_VERSION", DEFAULT_KAFKA_VERSION), data_dir=tmp_path / "kafka", kill_with_parent=True
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


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
        f"health-{time.time_ns()}", **{"bootstrap.servers": own_broker.bootstrap_servers, "listeners": url, "task.executor": "thread"}
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
        assert body == {"status": "starting", "message": "Worker is still starting up."}
        gate.set()
        body = _wait_health(url, 200)
        assert body == {"status": "healthy", "message": "Worker has completed startup and is ready to handle requests."}
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
        own_broker.start()
        _wait_health(url, 200, timeout=90)
    finally:
        gate.set()
        starter.join(30)
        node.stop()
