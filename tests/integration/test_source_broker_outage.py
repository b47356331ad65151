"""A source task's destination is Kafka: the broker going away for a few seconds is a retriable
failure. The task keeps RUNNING, the producer retries, and every record arrives once the broker
is back; offsets are only written for what was delivered, so nothing is lost.

The outage is never silent: past ``task.degraded.after.ms`` the RUNNING status carries a degraded
trace naming Kafka, the log names the outage once when it starts and once when it ends (not one
ERROR line per retry), and recovery clears the trace."""

from __future__ import annotations

import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

COUNT = 3_000  # records per task, produced over about ten seconds
RATE = 300


@pytest.fixture
def broker(tmp_path: Path):
    # Its own broker: the session broker is shared by every other test and must stay up.
    b = KafkaBroker(data_dir=tmp_path / "kafka")
    b.start()
    yield b
    b.stop()


def task_state(worker: WorkerProcess, name: str) -> str:
    r = httpx.get(f"{worker.url}/connectors/{name}/status", timeout=10)
    r.raise_for_status()
    tasks = r.json()["tasks"]
    return tasks[0]["state"] if tasks else "NONE"


def task_statuses(worker: WorkerProcess, name: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{worker.url}/connectors/{name}/status", timeout=10)
    r.raise_for_status()
    return list(r.json()["tasks"])


def wait_statuses(worker: WorkerProcess, name: str, done: Any, timeout: float, what: str) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    tasks = task_statuses(worker, name)
    while not done(tasks):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {tasks}\n{worker.log()[-3000:]}")
        time.sleep(0.3)
        tasks = task_statuses(worker, name)
    return tasks


def test_a_broker_outage_is_retried_and_loses_no_record(broker: KafkaBroker, tmp_path: Path) -> None:
    topic = unique_topic_name("outage")
    create_topic(broker.bootstrap_servers, topic)
    (tmp_path / "worker").mkdir()
    settings: dict[str, Any] = {"offset.flush.interval.ms": "500", "task.degraded.after.ms": "3000"}
    worker = WorkerProcess(tmp_path / "worker", broker.bootstrap_servers, **settings).start()
    try:
        config = {
            "connector.class": "SequenceSource",
            "topic": topic,
            "tasks.max": "2",
            "sequence.count": str(COUNT),
            "sequence.rate": str(RATE),
            "sequence.batch.size": "50",
            "key.converter": "StringConverter",
            "value.converter": "JsonConverter",
            "value.converter.schemas.enable": "false",
        }
        r = httpx.post(f"{worker.url}/connectors", json={"name": "counter", "config": config}, timeout=10)
        assert r.status_code == 201, r.text
        worker.wait_running("counter", tasks=2)
        time.sleep(2)  # mid-stream: some records delivered, most still to come

        broker.stop()
        stopped_at = time.monotonic()
        # Out of reach, the tasks keep running (the producer holds what they poll meanwhile), and
        # after task.degraded.after.ms their status says why.
        degraded = wait_statuses(
            worker,
            "counter",
            lambda tasks: len(tasks) == 2 and all("cannot reach Kafka" in t.get("trace", "") for t in tasks),
            timeout=30,
            what="both tasks degraded",
        )
        print(f"\ndegraded {time.monotonic() - stopped_at:.1f}s after the broker stopped: {degraded[0]['trace']}")
        for t in degraded:
            assert t["state"] == "RUNNING", degraded
            assert re.fullmatch(
                rf"Degraded since \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\dZ: cannot reach Kafka at {re.escape(broker.bootstrap_servers)} "
                r"\([^)]+\); \d+ retries",
                t["trace"],
            ), t["trace"]
        time.sleep(max(0.0, 8 - (time.monotonic() - stopped_at)))
        broker.start()

        try:
            records = consume_all(broker.bootstrap_servers, topic, 2 * COUNT, timeout=120)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; worker log: {worker.log()[-3000:]}") from exc
        values = [orjson.loads(r.value) for r in records]
        seen = Counter(v["task"] * COUNT + v["seq"] for v in values)
        missing = sorted(set(range(2 * COUNT)) - set(seen))
        assert not missing, f"{len(missing)} records lost, first {missing[:10]}; {worker.log()[-3000:]}"
        # Recovered: RUNNING again, the degraded trace gone.
        wait_statuses(
            worker,
            "counter",
            lambda tasks: len(tasks) == 2 and all(t["state"] == "RUNNING" and "trace" not in t for t in tasks),
            timeout=30,
            what="the degraded trace cleared",
        )
        # The log names the outage when it starts and when it ends, per task; no line per retry.
        full_log = worker.log_path.read_text(errors="replace")
        assert len(re.findall(r"WARNING .*Cannot reach Kafka at", full_log)) == 2, full_log[-5000:]
        assert len(re.findall(r"INFO .*Reached Kafka at .* again after", full_log)) == 2, full_log[-5000:]
        assert len(re.findall(r"Connection refused", full_log)) <= 10, full_log[-5000:]
        assert " ERROR " not in full_log, full_log[-5000:]
        # Per task, records are in sequence order: retries never reorder (idempotent producer).
        for task in (0, 1):
            seqs = [v["seq"] for v in values if v["task"] == task]
            first_seen = list(dict.fromkeys(seqs))
            assert first_seen == sorted(first_seen)
    finally:
        assert worker.stop() == 0, worker.log()
