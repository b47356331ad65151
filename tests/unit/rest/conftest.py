"""A standalone herder with an in-memory offset store behind the REST app, no Kafka needed.

Connectors are created ``STOPPED`` (or never started) in these tests, so no task needs a broker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.rest import create_app
from sluice.worker.backfill import BackfillManager
from sluice.worker.config.models import WorkerConfig
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.worker import Worker

AppFactory = Callable[..., TestClient]


@pytest.fixture(autouse=True)
def _stop_backfill_managers(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every herder starts a backfill manager (an apscheduler thread), which only stopping the
    herder stops; stop each after its test, also for herders a test never stops, or hundreds of
    idle threads pile up over the suite (and truncate the thread dumps other tests read)."""
    started: list[BackfillManager] = []
    original = BackfillManager.start

    def start(self: BackfillManager) -> None:
        started.append(self)
        original(self)

    monkeypatch.setattr(BackfillManager, "start", start)
    yield
    for manager in started:
        manager.stop()


@pytest.fixture(scope="session")
def registry() -> PluginRegistry:
    # The test-only connectors (tests.plugins.…) are named by Python path: the package directory
    # is the plugin path, scanned as the registry is built.
    return PluginRegistry([str(Path(__file__).resolve().parents[2] / "plugins")])


@pytest.fixture
def make_client(registry: PluginRegistry) -> Iterator[AppFactory]:
    herders: list[StandaloneHerder] = []

    def make(**worker_settings: Any) -> TestClient:
        # Connectors here name files anywhere (/dev/null, tmp_path): "*" grants them all but the
        # worker's own; the confinement tests set connector.allowed.paths themselves.
        defaults = {"bootstrap.servers": "127.0.0.1:1", "connector.allowed.paths": "*"}
        config = WorkerConfig.from_mapping({**defaults, **worker_settings})
        herder = StandaloneHerder(Worker(config, registry, MemoryOffsetStore()))
        herder.start()
        herders.append(herder)
        return TestClient(create_app(herder, backfills=herder.backfills), raise_server_exceptions=False)

    yield make
    for herder in herders:
        herder.stop()


@pytest.fixture
def client(make_client: AppFactory) -> TestClient:
    return make_client()
