"""``sluice backfill`` against a real ``sluice standalone`` worker: the CLI, the REST resource, the
worker's ``backfill.spark.*`` keys and its file store surviving a restart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.jdbc_helpers import sql
from tests.integration.kafka_helpers import consume_all, unique_topic_name
from tests.integration.worker_process import WorkerProcess
from tests.services.postgres import PostgresServer

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def test_cli_runs_a_backfill_on_the_worker_and_schedules_survive_a_restart(
    kafka: KafkaBroker, postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.create_database("backfill_cli")
    sql(url, "CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL)")
    sql(url, "INSERT INTO customers SELECT i, 'name ' || i FROM generate_series(1, 5000) i")
    topic = unique_topic_name("customers")
    spec = {
        "id": "customers",
        "kind": "jdbc_to_topic",
        "source": {"connection.url": postgres.jdbc_url("backfill_cli"), "connection.user": "postgres", "table": "customers"},
        "target": {"topic": topic, "partitions": 2},
    }
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps(spec))
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **{"backfill.spark.master": "local[2]", "backfill.spark.driver.memory": "1g"})  # type: ignore[arg-type]
    worker.start()
    try:
        # A bad spec: 400 naming the key.
        bad = httpx.post(f"{worker.url}/backfills", json={**spec, "source": {"table": "customers"}}, timeout=10)
        assert bad.status_code == 400
        assert "source.connection.url" in bad.json()["message"]

        result = subprocess.run(
            [sys.executable, "-m", "sluice.cli", "backfill", "--url", worker.url, "run", str(job_file), "--interval", "0.5"],
            capture_output=True, text=True, timeout=600, cwd=REPO,
        )
        assert result.returncode == 0, result.stdout + result.stderr + worker.log()
        assert "Backfill customers succeeded: 5,000 rows" in result.stdout
        assert "Read at LSN " in result.stdout  # the CDC hand-off position…
        assert "Continue with the PostgreSQL CDC connector: snapshot.mode=no_data streaming.start.lsn=" in result.stdout
        handoff = subprocess.run(
            [sys.executable, "-m", "sluice.cli", "backfill", "--url", worker.url, "status", "customers", "--handoff"],
            capture_output=True, text=True, timeout=60, cwd=REPO,
        )
        assert handoff.returncode == 0, handoff.stderr
        assert json.loads(handoff.stdout)["snapshot.mode"] == "no_data"  # …and the settings, to merge into the connector's
        records = consume_all(kafka.bootstrap_servers, topic, 5000)
        assert len({r.key for r in records}) == 5000

        scheduled = {**spec, "id": "nightly", "schedule": {"cron": "0 3 * * *"}}
        assert httpx.post(f"{worker.url}/backfills", json=scheduled, timeout=10).status_code == 201
        listed = subprocess.run(
            [sys.executable, "-m", "sluice.cli", "backfill", "--url", worker.url, "list"],
            capture_output=True, text=True, timeout=60, cwd=REPO,
        )
        assert "customers" in listed.stdout and "SUCCEEDED" in listed.stdout and "0 3 * * *" in listed.stdout
    finally:
        worker.stop()

    worker.start()
    try:
        info = httpx.get(f"{worker.url}/backfills/nightly", timeout=10).json()
        assert info["schedule"]["cron"] == "0 3 * * *"
        assert info["next_run"]
        assert httpx.get(f"{worker.url}/backfills/customers", timeout=10).json()["status"]["state"] == "SUCCEEDED"
        # Secrets never leave the worker.
        assert "connection.password" not in json.dumps(info) or "[hidden]" in json.dumps(info)
    finally:
        worker.stop()
