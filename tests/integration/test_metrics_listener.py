"""``metrics.listeners``: a worker serves ``GET /metrics`` and ``GET /health`` on a port of its
own, as on its REST port and behind the same authentication, and nothing else there; a port
already taken stops the worker's start with an error that says which listener and address."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import httpx
import pytest

from tests.integration.distributed_helpers import cluster_settings
from tests.integration.worker_process import WorkerProcess, free_port

pytestmark = pytest.mark.integration


def _families(text: str) -> set[str]:
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}


@pytest.mark.parametrize("mode", ["standalone", "distributed"])
def test_metrics_and_health_on_a_port_of_their_own(kafka, tmp_path: Path, mode: str) -> None:
    metrics_url = f"http://127.0.0.1:{free_port()}"
    cluster = cluster_settings(f"metrics-port-{uuid.uuid4().hex[:8]}") if mode == "distributed" else {}
    worker = WorkerProcess(
        tmp_path, kafka.bootstrap_servers, mode=mode, **cluster, **{"metrics.listeners": metrics_url}
    )
    worker.start()
    try:
        on_rest = httpx.get(f"{worker.url}/metrics", timeout=10)
        on_own = httpx.get(f"{metrics_url}/metrics", timeout=10)
        assert on_own.status_code == 200, on_own.text
        assert on_own.headers["content-type"] == on_rest.headers["content-type"]
        assert "kafka_connect_connect_worker_metrics_connector_count" in _families(on_own.text)
        assert _families(on_own.text) == _families(on_rest.text)
        health = httpx.get(f"{metrics_url}/health", timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "healthy"
        assert httpx.get(f"{metrics_url}/connectors", timeout=10).status_code == 404
        assert httpx.get(f"{worker.url}/connectors", timeout=10).status_code == 200
    finally:
        assert worker.stop() == 0
    with pytest.raises(httpx.ConnectError):  # stopped with the worker
        httpx.get(f"{metrics_url}/health", timeout=5)


def test_the_metrics_port_asks_for_the_rest_credentials(kafka, tmp_path: Path) -> None:
    metrics_url = f"http://127.0.0.1:{free_port()}"
    worker = WorkerProcess(
        tmp_path,
        kafka.bootstrap_servers,
        **{
            "metrics.listeners": metrics_url,
            "rest.auth.basic.users": "ops:ops-secret,prometheus:scrape-secret",
            "rest.auth.roles": "ops:admin,prometheus:viewer",
        },
    ).start()
    try:
        assert httpx.get(f"{metrics_url}/metrics", timeout=10).status_code == 401
        assert httpx.get(f"{metrics_url}/metrics", auth=("prometheus", "wrong"), timeout=10).status_code == 401
        scraped = httpx.get(f"{metrics_url}/metrics", auth=("prometheus", "scrape-secret"), timeout=10)
        assert scraped.status_code == 200
        assert "kafka_connect_connect_worker_metrics_connector_count" in _families(scraped.text)
        assert httpx.get(f"{metrics_url}/health", timeout=10).status_code == 200  # open, as on the REST port
        assert httpx.get(f"{metrics_url}/connectors", auth=("ops", "ops-secret"), timeout=10).status_code == 404
    finally:
        worker.stop()


def test_a_busy_metrics_port_stops_the_start_naming_the_key_and_address(kafka, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **{"metrics.listeners": f"http://127.0.0.1:{port}"})
        with pytest.raises(AssertionError, match="worker exited with 1"):
            worker.start()
        assert f"metrics.listeners) could not listen on 127.0.0.1:{port}" in worker.log()
        # The REST listener it had opened is closed again.
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{worker.url}/health", timeout=5)
