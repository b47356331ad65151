"""``GET /health`` of a standalone worker (KIP-1017): starting, healthy and stuck."""

from __future__ import annotations

import threading

from fastapi.testclient import TestClient

from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.rest import create_app
from sluice.worker.config import WorkerConfig
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.worker import Worker


def test_starting_healthy_and_stuck(registry: PluginRegistry) -> None:
    """503 before the herder has started, 200 once it has, 500 while an operation holds it."""
    herder = StandaloneHerder(Worker(WorkerConfig.from_mapping({"bootstrap.servers": "127.0.0.1:1"}), registry, MemoryOffsetStore()))
    client = TestClient(create_app(herder), raise_server_exceptions=False)
    r = client.get("/health")
    assert r.status_code == 503 and r.json() == {"status": "starting", "message": "Worker is still starting up."}
    herder.start()
    try:
        r = client.get("/health")
        assert r.status_code == 200
        assert r.json() == {"status": "healthy", "message": "Worker has completed startup and is ready to handle requests."}
        herder.health_timeout_s = 0.2
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with herder._lock:
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        assert held.wait(5)
        r = client.get("/health")
        release.set()
        holder.join(5)
        assert r.status_code == 500 and r.json()["status"] == "unhealthy" and "busy" in r.json()["message"], r.json()
        assert client.get("/health").status_code == 200
    finally:
        herder.stop()
