"""The JDBC sink's database goes away while records keep arriving, then comes back.

What a user checks: the task never shows FAILED; while PostgreSQL is down its status is RUNNING
with a degraded trace naming the outage (past ``task.degraded.after.ms``); once it is back every
record is in the table and the trace is gone; the worker log names the outage when it starts and
when it ends instead of one line per retry.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.jdbc_helpers import (
    JDBC_SINK,
    JSON_CONVERTER,
    WORKER_SETTINGS,
    envelope,
    sql,
    struct_schema,
    wait_for,
)
from tests.integration.kafka_helpers import OutgoingRecord, create_topic, produce, unique_topic_name
from tests.integration.postgres_fixtures import private_postgres_fixture  # noqa: F401 - the private_postgres fixture
from tests.integration.worker_process import WorkerProcess
from tests.services.postgres import PostgresServer

pytestmark = pytest.mark.integration

SCHEMA = struct_schema("event", ("id", "int64", False), ("body", "string", True))


def _records(start: int, stop: int, schemas: bool = True) -> list[OutgoingRecord]:
    values = [{"id": i, "body": f"event {i}"} for i in range(start, stop)]
    return [OutgoingRecord(value=envelope(SCHEMA, v) if schemas else orjson.dumps(v)) for v in values]


def _task(worker: WorkerProcess, name: str) -> dict[str, Any]:
    return dict(httpx.get(f"{worker.url}/connectors/{name}/tasks/0/status", timeout=10).json())


# With schemas and without: both take the sink's fast path, whose writes run in the background
# (a failure there surfaces at the next commit, not in a put()).
@pytest.mark.parametrize("schemas", [True, False], ids=["schemas", "schemaless"])
def test_a_database_outage_degrades_the_status_and_loses_nothing(
    kafka: Any, private_postgres: PostgresServer, tmp_path: Path, schemas: bool
) -> None:
    server = private_postgres
    url = server.url()
    sql(url, "CREATE TABLE events (id bigint PRIMARY KEY, body text)")
    topic = unique_topic_name("db-outage")
    create_topic(kafka.bootstrap_servers, topic)
    produce(kafka.bootstrap_servers, topic, _records(0, 100, schemas))
    settings: dict[str, Any] = {
        **WORKER_SETTINGS,
        "value.converter": JSON_CONVERTER,
        "value.converter.schemas.enable": str(schemas).lower(),
        "offset.flush.interval.ms": "500",
        "task.degraded.after.ms": "3000",
    }
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **settings).start()
    name = "to-db"
    try:
        r = httpx.post(
            f"{worker.url}/connectors",
            json={
                "name": name,
                "config": {
                    "connector.class": JDBC_SINK,
                    "topics": topic,
                    "connection.url": url,
                    "table.name.format": "events",
                    "insert.mode": "upsert",
                    "pk.mode": "record_value",
                    "pk.fields": "id",
                    # Keep retrying through the outage (Confluent's default gives up after 10).
                    "max.retries": "1000",
                    "retry.backoff.ms": "500",
                },
            },
            timeout=30,
        )
        assert r.status_code == 201, r.text
        worker.wait_running(name)

        def rows() -> list[tuple[Any, ...]]:
            return sql(url, "SELECT count(DISTINCT id), min(id), max(id) FROM events")

        wait_for(rows, lambda got: got == [(100, 0, 99)], timeout=60, what="the first 100 rows")

        server.stop()  # the database goes away while records keep arriving
        stopped_at = time.monotonic()
        produce(kafka.bootstrap_servers, topic, _records(100, 300, schemas))
        degraded = wait_for(
            lambda: _task(worker, name),
            lambda status: "trace" in status,
            timeout=30,
            what="the degraded trace",
        )
        print(f"\ndegraded {time.monotonic() - stopped_at:.1f}s after PostgreSQL stopped: {degraded['trace']}")
        assert degraded["state"] == "RUNNING", degraded
        assert re.fullmatch(
            r"Degraded since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ: cannot reach the system JdbcSinkTask writes to "
            r"\(Database unavailable: .+\); \d+ retries",
            degraded["trace"],
        ), degraded["trace"]
        while time.monotonic() - stopped_at < 8:  # down a while longer: still RUNNING, still degraded
            status = _task(worker, name)
            assert status["state"] == "RUNNING" and "trace" in status, f"{status}\n{worker.log()}"
            time.sleep(0.5)
        server.start()  # the same server, port and data

        wait_for(rows, lambda got: got == [(300, 0, 299)], timeout=90, what="every record in the table")
        recovered = wait_for(
            lambda: _task(worker, name), lambda status: "trace" not in status, timeout=30, what="the trace cleared"
        )
        assert recovered["state"] == "RUNNING", recovered
        assert recovered["errors"]["total-retries"] > 0, recovered
        assert recovered["errors"]["total-record-failures"] == 0, recovered

        full_log = worker.log_path.read_text(errors="replace")
        assert len(re.findall(r"WARNING .*Cannot reach the system JdbcSinkTask writes to", full_log)) == 1, full_log[-5000:]
        assert len(re.findall(r"INFO .*Reached the system JdbcSinkTask writes to again after", full_log)) == 1, full_log[-5000:]
        assert " ERROR " not in full_log, full_log[-5000:]
    finally:
        assert worker.stop() == 0, worker.log()
