"""``sluice backfill status <id> --handoff [--apply]`` for a job that names its CDC connector."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from sluice.cli.main import main
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.rest import create_app
from sluice.worker.backfill import BackfillManager, MemoryBackfillStore
from sluice.worker.config.models import WorkerConfig
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.worker import Worker
from tests.unit.backfill.test_rest_and_cli import PositionRunner

CDC = {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "database.hostname": "db", "database.dbname": "shop", "database.user": "cdc", "topic.prefix": "shop",
    "table.include.list": "public\\.orders", "slot.name": "debezium",
}  # fmt: skip


def job(**cdc_config: str) -> dict[str, Any]:
    return {
        "id": "job",
        "kind": "jdbc_to_topic",
        "source": {"connection.url": "jdbc:postgresql://db/shop", "table": "public.orders"},
        "target": {"partitions": 8, "cdc": {"name": "shop-cdc", "config": {**CDC, **cdc_config}}},
    }


class Recording(httpx.BaseTransport):
    """Forwards to the app, except ``POST /connectors``, which it records and answers 201."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self.inner = inner
        self.created: list[Any] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path == "/connectors":
            body = orjson.loads(request.read())
            self.created.append(body)
            return httpx.Response(201, json={"name": body["name"], "config": body["config"], "tasks": []})
        return self.inner.handle_request(request)


@pytest.fixture
def client() -> Iterator[TestClient]:
    config = WorkerConfig.from_mapping({"bootstrap.servers": "127.0.0.1:1"})
    herder = StandaloneHerder(Worker(config, PluginRegistry([]), MemoryOffsetStore()))
    herder.start()
    runner = PositionRunner()
    runner.release.set()
    manager = BackfillManager(MemoryBackfillStore(), runner=runner, canceller=runner.cancel)
    manager.start()
    app = create_app(herder, backfills=manager)
    try:
        yield TestClient(app, raise_server_exceptions=False)
    finally:
        manager.stop()
        herder.stop()


def run(client: TestClient, spec: dict[str, Any], *args: str) -> tuple[Any, Recording]:
    assert client.post("/backfills", json=spec).status_code == 201
    client.app.state.backfills.wait("job", 5)  # type: ignore[attr-defined]
    transport = Recording(client._transport)
    return CliRunner().invoke(main, ["backfill", "status", "job", "--handoff", *args], obj=transport), transport


def test_handoff_prints_the_whole_connector_with_its_start_position(client: TestClient) -> None:
    result, _ = run(client, job(**{"database.password": "${env:PG_PASSWORD}"}))
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.output) == {
        "name": "shop-cdc",
        "config": {
            **CDC,
            "database.password": "${env:PG_PASSWORD}",
            "snapshot.mode": "no_data",
            "streaming.start.lsn": "0/16B3747",
        },
    }


def test_apply_creates_the_connector(client: TestClient) -> None:
    result, transport = run(client, job(), "--apply")
    assert result.exit_code == 0, result.output
    assert "Created connector shop-cdc: streaming from 0/16B3747" in result.output
    assert transport.created == [{"name": "shop-cdc", "config": {**CDC, "snapshot.mode": "no_data", "streaming.start.lsn": "0/16B3747"}}]


def test_apply_refuses_a_password_the_worker_hides_unless_it_is_given(client: TestClient) -> None:
    result, transport = run(client, job(**{"database.password": "secret"}), "--apply")
    assert result.exit_code == 1 and "the worker hides database.password: pass --set database.password=" in result.output
    assert transport.created == []
    result = CliRunner().invoke(
        main, ["backfill", "status", "job", "--handoff", "--apply", "--set", "database.password=secret"], obj=transport
    )
    assert result.exit_code == 0, result.output
    assert transport.created[0]["config"]["database.password"] == "secret"
