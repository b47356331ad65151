"""A source task's destination is Kafka: the broker going away for a few seconds is a retriable
failure. The task keeps RUNNING, the producer retries, and every record arrives once the broker
is back; offsets are only written for what was delivered, so nothing is lost."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import httpx
import orjson
import pytest

from deploy.kafka_stack import KafkaBroker
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


def test_a_broker_outage_is_retried_and_loses_no_record(broker: KafkaBroker, tmp_path: Path) -> None:
    topic = unique_topic_name("outage")
    create_topic(broker.bootstrap_servers, topic)
    (tmp_path / "worker").mkdir()
    worker = WorkerProcess(
        tmp_path / "worker", broker.bootstrap_servers, **{"offset.flush.interval.ms": "500"}
    ).start()
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
        time.sleep(6)
        # Out of reach, the tasks keep running; the producer holds what they poll meanwhile.
        assert [task_state(worker, "counter")] == ["RUNNING"], worker.log()
        broker.start()

        try:
            records = consume_all(broker.bootstrap_servers, topic, 2 * COUNT, timeout=120)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; worker log: {worker.log()[-3000:]}") from exc
        values = [orjson.loads(r.value) for r in records]
        seen = Counter(v["task"] * COUNT + v["seq"] for v in values)
        missing = sorted(set(range(2 * COUNT)) - set(seen))
        assert not missing, f"{len(missing)} records lost, first {missing[:10]}; {worker.log()[-3000:]}"
        assert task_state(worker, "counter") == "RUNNING"
        # Per task, records are in sequence order: retries never reorder (idempotent producer).
        for task in (0, 1):
            seqs = [v["seq"] for v in values if v["task"] == task]
            first_seen = list(dict.fromkeys(seqs))
            assert first_seen == sorted(first_seen)
    finally:
        assert worker.stop() == 0, worker.log()
