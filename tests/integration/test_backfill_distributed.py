"""Backfill jobs in a distributed cluster: kept in the config topic, seen by every worker, kept
across restarts.

Two ``sluice distributed`` processes on the session broker. A scheduled job (its cron fires at
03:00, so nothing runs Spark here) is submitted to one worker and read from the other; after
every worker has been stopped and started again the job and its schedule are still there. A
job due every minute runs on exactly one worker, the leader (its run fails fast on a missing
table, after the worker's SparkSession started).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.distributed_helpers import Cluster, wait_for
from tests.services.postgres import PostgresServer

pytestmark = pytest.mark.integration

JOB = {
    "id": "nightly-export",
    "kind": "topic_to_s3",
    "source": {"topic": "orders"},
    "target": {"config": {"s3.bucket.name": "archive", "format.class": "JsonFormat"}},
    "schedule": {"cron": "0 3 * * *"},
}


def _get(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/backfills/{JOB['id']}", timeout=10)
    return response.json() if response.status_code == 200 else {"http": response.status_code}


def test_a_scheduled_job_is_shared_by_the_workers_and_survives_restarts(tmp_path: Path, kafka: KafkaBroker) -> None:
    cluster = Cluster(tmp_path, kafka.bootstrap_servers, 2)
    try:
        cluster.start()
        first, second = cluster.workers
        created = httpx.post(f"{first.url}/backfills", json=JOB, timeout=30)
        assert created.status_code == 201, created.text
        seen = wait_for(lambda: _get(second.url), lambda body: "id" in body, timeout=30, what="the job on the other worker")
        assert seen["schedule"] == {"cron": "0 3 * * *", "timezone": "UTC"}
        assert seen["next_run"] is not None and "T03:00:00" in seen["next_run"]
        assert seen["status"]["state"] == "PENDING"  # never ran
        assert [j["id"] for j in httpx.get(f"{second.url}/backfills", timeout=10).json()] == [JOB["id"]]
        # A bad spec is refused the same way on any worker.
        bad = httpx.post(f"{second.url}/backfills", json={**JOB, "schedule": {"cron": "never"}}, timeout=30)
        assert bad.status_code == 400 and "schedule.cron" in bad.text

        cluster.stop()  # every worker, before any starts again: the job can only come from the topic
        cluster.start()
        for url in (first.url, second.url):
            back = wait_for(partial(_get, url), lambda body: "id" in body, timeout=60, what="the job after a restart")
            assert back["schedule"]["cron"] == "0 3 * * *" and back["next_run"] is not None

        # Forgetting it on one worker forgets it everywhere.
        assert httpx.delete(f"{second.url}/backfills/{JOB['id']}", params={"forget": "true"}, timeout=30).status_code == 204
        wait_for(lambda: _get(first.url), lambda body: body.get("http") == 404, timeout=30, what="the job gone on the other worker")
    finally:
        cluster.stop()


def test_a_due_schedule_runs_once_in_the_cluster_on_the_leader(tmp_path: Path, kafka: KafkaBroker, postgres: PostgresServer) -> None:
    cluster = Cluster(tmp_path, kafka.bootstrap_servers, 2)
    job = {
        "id": "every-minute",
        "kind": "jdbc_to_topic",
        "source": {"connection.url": postgres.jdbc_url(), "connection.user": "postgres", "table": "public.no_such_table"},
        "target": {"topic": "unused-every-minute"},
        "spark": {"conf": {"spark.master": "local[1]", "spark.driver.memory": "512m"}},
        "schedule": {"cron": "* * * * *"},
    }
    try:
        cluster.start()
        first, second = cluster.workers
        assert httpx.post(f"{first.url}/backfills", json=job, timeout=30).status_code == 201
        seen: set[tuple[str, str]] = set()

        def finished() -> dict[str, Any]:
            for url in (first.url, second.url):
                body = httpx.get(f"{url}/backfills/every-minute", timeout=10).json()
                status = body.get("status", {})
                if status.get("run_id"):
                    seen.add((status["run_id"], status.get("worker_id") or ""))
            return status

        status = wait_for(finished, lambda s: s.get("state") == "FAILED", timeout=240, what="the scheduled run")
        assert "no_such_table" in (status.get("error") or "")
        assert len(seen) == 1, seen  # one run, on one worker
        ran_on = next(iter(seen))[1]
        logs = {w.url: w.log_path.read_text(errors="replace") for w in cluster.workers}
        starters = [url for url, text in logs.items() if "Backfill every-minute (jdbc_to_topic) started" in text]
        assert len(starters) == 1 and starters[0].endswith(ran_on), (starters, ran_on)
        assert httpx.delete(f"{first.url}/backfills/every-minute", params={"forget": "true"}, timeout=30).status_code == 204
    finally:
        cluster.stop()
