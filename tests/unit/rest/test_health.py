"""``GET /health`` of a standalone worker (KIP-1017): starting, healthy, stuck, and out of reach of Kafka."""

from __future__ import annotations

import threading

from fastapi.testclient import TestClient

from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.rest import create_app
from sluice.rest.app import metrics_only
from sluice.worker.config.models import WorkerConfig
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.worker import Worker

#: What /health says of the task sandbox when tasks run as threads of the worker (no host to confine).
THREADS = {"sandbox": "off: tasks run in the worker process (task.executor=thread)"}
STARTING_BODY = {"status": "starting", "message": "Worker is still starting up.", "details": THREADS}
HEALTHY_BODY = {
    "status": "healthy",
    "message": "Worker has completed startup and is ready to handle requests.",
    "details": THREADS,
}


def test_starting_healthy_and_stuck(registry: PluginRegistry) -> None:
    """503 before the herder has started, 200 once it has, 500 while an operation holds it."""
    herder = StandaloneHerder(
        Worker(WorkerConfig.from_mapping({"bootstrap.servers": "127.0.0.1:1"}), registry, MemoryOffsetStore())
    )
    client = TestClient(create_app(herder), raise_server_exceptions=False)
    r = client.get("/health")
    assert r.status_code == 503 and r.json() == STARTING_BODY
    herder.start()
    try:
        r = client.get("/health")
        assert r.status_code == 200
        assert r.json() == HEALTHY_BODY
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


def test_unhealthy_naming_kafka_when_no_broker_answers(registry: PluginRegistry) -> None:
    """A standalone worker whose Kafka never answers: 500 naming the bootstrap servers, on the REST
    listener and on ``metrics.listeners`` (same handler), once the delay has passed (moved by the test, not waited for)."""
    herder = StandaloneHerder(
        Worker(WorkerConfig.from_mapping({"bootstrap.servers": "127.0.0.1:1"}), registry, MemoryOffsetStore())
    )
    herder.kafka_contact.lost_after_s = 3600.0  # no clock race on a loaded machine: the delay is moved
    app = create_app(herder)
    clients = [
        TestClient(app, raise_server_exceptions=False),
        TestClient(metrics_only(app), raise_server_exceptions=False),
    ]
    herder.start()
    try:
        assert clients[0].get("/health").status_code == 200  # within the delay
        herder.kafka_contact.lost_after_s = 0.0  # … and now it has passed
        for client in clients:
            r = client.get("/health")
            assert r.status_code == 500, r.json()
            body = r.json()
            assert body["status"] == "unhealthy"
            assert body["message"].startswith(
                f"Worker {herder.worker_id} cannot reach the Kafka cluster at 127.0.0.1:1: no broker has answered"
            ), body
            assert body["details"] == THREADS
    finally:
        herder.stop()
