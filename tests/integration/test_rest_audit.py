"""The audit trail in a Kafka topic: a real worker with roles and ``rest.audit.topic``, read back
with a consumer from the session broker."""

from __future__ import annotations

import base64
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name
from tests.integration.worker_process import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


ADMIN, VIEWER = _basic("alice", "alice-pw"), _basic("victor", "victor-pw")


@pytest.fixture(scope="module")
def audit_topic(kafka) -> str:
    topic = unique_topic_name("rest-audit")
    create_topic(kafka.bootstrap_servers, topic)
    return topic


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory, audit_topic: str) -> WorkerProcess:
    settings: dict[str, Any] = {
        "rest.auth.basic.users": "alice:alice-pw,victor:victor-pw",
        "rest.auth.roles": "alice:admin,victor:viewer",
        "rest.audit.topic": audit_topic,
    }
    return module_worker_process(**settings)


def test_writes_and_refusals_reach_the_audit_topic(worker: WorkerProcess, kafka, audit_topic: str, tmp_path: Path) -> None:
    source = tmp_path / "in.txt"
    source.write_text("one\n")
    config = {"connector.class": "FileStreamSource", "file": str(source), "topic": unique_topic_name("rest-audit-data")}
    started = time.time()

    created = httpx.post(f"{worker.url}/connectors", json={"name": "audited-src", "config": config}, headers=ADMIN, timeout=10)
    assert created.status_code == 201, created.text
    assert httpx.put(f"{worker.url}/connectors/audited-src/pause", headers=VIEWER, timeout=10).status_code == 403
    assert httpx.get(f"{worker.url}/connectors/audited-src", headers=VIEWER, timeout=10).status_code == 200  # not audited
    assert httpx.delete(f"{worker.url}/connectors/audited-src", timeout=10).status_code == 401

    records = consume_all(kafka.bootstrap_servers, audit_topic, expected_count=3, timeout=30)
    assert [r.key for r in records] == [b"audited-src"] * 3
    entries = [json.loads(r.value or b"") for r in records]
    assert [(e["principal"], e["method"], e["path"], e["connector"], e["status"], e["outcome"]) for e in entries] == [
        ("alice", "POST", "/connectors", "audited-src", 201, "ok"),
        ("victor", "PUT", "/connectors/audited-src/pause", "audited-src", 403, "refused"),
        ("anonymous", "DELETE", "/connectors/audited-src", "audited-src", 401, "refused"),
    ]
    for entry in entries:
        assert entry["client"] == "127.0.0.1"
        assert started - 5 <= _epoch(entry["time"]) <= time.time() + 5
    raw = b"".join(r.value or b"" for r in records)
    assert b"alice-pw" not in raw and b"victor-pw" not in raw and str(source).encode() not in raw
    # The same records are lines of the worker's log.
    assert worker.log_path.read_text(errors="replace").count('"connector":"audited-src"') == 3


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()
