"""``/backfills`` over HTTP and ``sluice backfill`` against it, with a fake job runner."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from sluice.cli.backfill import progress_line
from sluice.cli.main import main
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.rest import create_app
from sluice.worker.backfill import BackfillManager, MemoryBackfillStore
from sluice.worker.backfill.progress import RunTracker
from sluice.worker.config.models import WorkerConfig
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.worker import Worker
from tests.unit.backfill.test_manager import FakeRunner, spec


@pytest.fixture
def runner() -> FakeRunner:
    return FakeRunner()


@pytest.fixture
def client(runner: FakeRunner) -> Iterator[TestClient]:
    config = WorkerConfig.from_mapping({"bootstrap.servers": "127.0.0.1:1"})
    herder = StandaloneHerder(Worker(config, PluginRegistry([]), MemoryOffsetStore()))
    herder.start()
    manager = BackfillManager(MemoryBackfillStore(), runner=runner, canceller=runner.cancel)
    manager.start()
    app = create_app(herder, backfills=manager)
    try:
        yield TestClient(app, raise_server_exceptions=False)
    finally:
        runner.release.set()
        manager.stop()
        herder.stop()


def test_submit_get_list_cancel(client: TestClient, runner: FakeRunner) -> None:
    created = client.post("/backfills", json=spec())
    assert created.status_code == 201, created.text
    assert created.headers["location"] == "/backfills/job"
    assert runner.running.wait(5)
    body = client.get("/backfills/job").json()
    assert body["kind"] == "topic_to_sink"
    assert body["status"]["state"] == "RUNNING"
    assert body["status"]["rows_done"] == 40
    assert [j["id"] for j in client.get("/backfills").json()] == ["job"]
    assert client.post("/backfills", json=spec()).status_code == 409
    cancelled = client.delete("/backfills/job")
    assert cancelled.status_code == 202
    client.app.state.backfills.wait("job", 5)  # type: ignore[attr-defined]
    assert client.get("/backfills/job").json()["status"]["state"] == "CANCELLED"
    assert client.delete("/backfills/job", params={"forget": "true"}).status_code == 204
    assert client.get("/backfills/job").status_code == 404


def test_a_bad_spec_is_a_400_naming_the_key(client: TestClient) -> None:
    response = client.post("/backfills", json={**spec(), "source": {"topic": "t", "start.offsets": {"x": 1}}})
    assert response.status_code == 400
    body = response.json()
    assert body["error_code"] == 400
    assert "source" in body["message"] and "start.offsets" in body["message"]
    missing = client.post("/backfills", json={"id": "j", "kind": "jdbc_to_topic", "source": {"table": "t"}, "target": {"topic": "x"}})
    assert missing.status_code == 400
    assert "source.connection.url: Field required" in missing.json()["message"]


def test_cli_run_follows_to_the_end(client: TestClient, runner: FakeRunner, tmp_path: Path) -> None:
    runner.release.set()
    job = tmp_path / "job.json"
    job.write_bytes(orjson.dumps(spec()))
    result = CliRunner().invoke(main, ["backfill", "run", str(job), "--interval", "0.05"], obj=client._transport)
    assert result.exit_code == 0, result.output
    assert "Backfill job succeeded: 100 rows" in result.output
    assert "Read at LSN 0/16B3748" in result.output
    listed = CliRunner().invoke(main, ["backfill", "list"], obj=client._transport)
    assert "job" in listed.output and "SUCCEEDED" in listed.output


class PositionRunner(FakeRunner):
    """Records a full PostgreSQL hand-off position, as ``jdbc_to_topic`` does."""

    POSITION: dict[str, Any] = {
        "database": "postgresql", "lsn": "0/16B3748", "slot": "debezium", "slot_created": True,
        "cdc": {"snapshot.mode": "no_data", "streaming.start.lsn": "0/16B3747", "slot.name": "debezium"},
    }  # fmt: skip

    def __call__(self, provider: Any, spec: Any, tracker: RunTracker, bootstrap: str) -> dict[str, Any]:
        summary = super().__call__(provider, spec, tracker, bootstrap)
        tracker.record("source_position", self.POSITION)  # over the fake's bare LSN
        return summary


def test_the_cdc_handoff_settings_in_get_and_the_cli(client: TestClient) -> None:
    runner = PositionRunner()
    runner.release.set()
    app: Any = client.app
    app.state.backfills.stop()
    manager = BackfillManager(MemoryBackfillStore(), runner=runner, canceller=runner.cancel)
    manager.start()
    app.state.backfills = manager
    try:
        assert client.post("/backfills", json=spec()).status_code == 201
        manager.wait("job", 5)
        assert client.get("/backfills/job").json()["status"]["source_position"]["cdc"]["streaming.start.lsn"] == "0/16B3747"
        shown = CliRunner().invoke(main, ["backfill", "status", "job"], obj=client._transport)
        assert "Read at LSN 0/16B3748 (slot debezium, created by this run)" in shown.output
        assert "snapshot.mode=no_data streaming.start.lsn=0/16B3747 slot.name=debezium" in shown.output
        handoff = CliRunner().invoke(main, ["backfill", "status", "job", "--handoff"], obj=client._transport)
        assert handoff.exit_code == 0, handoff.output
        assert orjson.loads(handoff.output) == PositionRunner.POSITION["cdc"]
    finally:
        manager.stop()


def test_cli_run_of_a_failing_job_prints_the_error_and_exits_1(tmp_path: Path) -> None:
    failing = FakeRunner("fail")
    config = WorkerConfig.from_mapping({"bootstrap.servers": "127.0.0.1:1"})
    herder = StandaloneHerder(Worker(config, PluginRegistry([]), MemoryOffsetStore()))
    manager = BackfillManager(MemoryBackfillStore(), runner=failing, canceller=failing.cancel)
    manager.start()
    app = create_app(herder, backfills=manager)
    try:
        job = tmp_path / "job.json"
        job.write_bytes(orjson.dumps(spec()))
        transport = TestClient(app)._transport
        result = CliRunner().invoke(main, ["backfill", "run", str(job), "--interval", "0.05"], obj=transport)
        assert result.exit_code == 1
        assert 'relation "nope" does not exist' in result.output
        status = CliRunner().invoke(main, ["backfill", "status", "job"], obj=transport)
        assert "FAILED" in status.output and "error:" in status.output
    finally:
        manager.stop()


def test_progress_line() -> None:
    status: dict[str, Any] = {"state": "RUNNING", "rows_done": 250_000, "rows_total": 1_000_000, "percent": 25.0, "rows_per_s": 50_000.0, "eta_s": 15.0}
    line = progress_line(status, width=20)
    assert line.startswith("RUNNING    [#####...............]  25.0%")
    assert "250,000/1,000,000 rows" in line and "50,000 rows/s" in line and "ETA 15s" in line


def test_a_standalone_herder_runs_its_own_backfill_manager(tmp_path: Path) -> None:
    """The herder starts its manager (schedules are live), stops it with itself, and keeps the jobs
    in ``backfills.json`` beside the offsets, so the next worker has them back."""
    settings = {"bootstrap.servers": "127.0.0.1:1", "offset.storage.file.filename": str(tmp_path / "offsets.json")}

    def started() -> tuple[StandaloneHerder, TestClient]:
        herder = StandaloneHerder(Worker(WorkerConfig.from_mapping(settings), PluginRegistry([]), MemoryOffsetStore()))
        herder.start()
        return herder, TestClient(create_app(herder, backfills=herder.backfills))

    herder, client = started()
    try:
        created = client.post("/backfills", json=spec(schedule={"cron": "0 3 * * *"}))
        assert created.status_code == 201, created.text
        assert "T03:00:00" in created.json()["next_run"]
    finally:
        herder.stop()
    assert client.get("/backfills/job").json()["next_run"] is None  # no scheduler once stopped
    assert (tmp_path / "backfills.json").is_file()
    herder, client = started()
    try:
        assert "T03:00:00" in client.get("/backfills/job").json()["next_run"]
    finally:
        herder.stop()
