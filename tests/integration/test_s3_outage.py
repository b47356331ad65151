"""A retriable failure is retried and nothing is lost: the S3 server goes away for a few seconds
while the sink is writing, then comes back on the same port with the same data.

What a user checks: the task never shows FAILED, every record is in the bucket exactly once, the
consumer group commits to the end, and the retries show in the task's status or the worker log.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.kafka_helpers import OutgoingRecord, create_topic, produce, unique_topic_name
from tests.integration.test_s3_sink import S3_SINK, _deploy, _objects, _wait_committed, _worker
from tests.services.s3_server import S3Server

pytestmark = pytest.mark.integration


@pytest.fixture
def private_s3(tmp_path: Path) -> Any:
    """An S3 server of this test's own, so stopping it disturbs no other test."""
    server = S3Server(data_dir=tmp_path / "s3-data", kill_with_parent=True)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _records(start: int, stop: int) -> list[OutgoingRecord]:
    return [OutgoingRecord(orjson.dumps({"id": i, "body": f"record {i}"}), key=f"k{i}") for i in range(start, stop)]


def _ids(objects: dict[str, bytes]) -> list[int]:
    return sorted(orjson.loads(line)["id"] for data in objects.values() for line in data.splitlines() if line)


def _task_status(worker: Any, name: str) -> dict[str, Any]:
    return httpx.get(f"{worker.url}/connectors/{name}/tasks/0/status", timeout=10).json()


def test_sink_retries_through_an_s3_outage_and_loses_nothing(kafka: Any, private_s3: S3Server, tmp_path: Path) -> None:
    bucket = private_s3.create_bucket("outage")
    topic = unique_topic_name("s3-outage")
    create_topic(kafka.bootstrap_servers, topic)
    produce(kafka.bootstrap_servers, topic, _records(0, 100))
    (tmp_path / "worker").mkdir()
    worker = _worker(tmp_path / "worker", kafka.bootstrap_servers, **{"offset.flush.interval.ms": "500"})
    worker.start()
    name = f"outage-{topic}"
    try:
        _deploy(worker, name, {
            "connector.class": S3_SINK,
            "topics": topic,
            **private_s3.connector_config(bucket),
            "format.class": "json",
            "flush.size": "50",
            # botocore gives up quickly on a refused connection: the runner's put() retry does the rest.
            "s3.part.retries": "1",
        })
        deadline = time.monotonic() + 60
        while len(_objects(private_s3, bucket)) < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert _ids(_objects(private_s3, bucket)) == list(range(100)), worker.log()

        private_s3.stop()  # the destination goes away ...
        produce(kafka.bootstrap_servers, topic, _records(100, 300))
        down_until = time.monotonic() + 6
        while time.monotonic() < down_until:
            status = _task_status(worker, name)
            assert status["state"] == "RUNNING", f"{status}\n{worker.log()}"
            time.sleep(0.5)
        private_s3.start()  # ... and comes back with the same port and data

        deadline = time.monotonic() + 90
        while len(_objects(private_s3, bucket)) < 6 and time.monotonic() < deadline:
            time.sleep(0.5)
        objects = _objects(private_s3, bucket)
        assert sorted(objects) == [f"topics/{topic}/partition=0/{topic}+0+{o:010d}.json" for o in range(0, 300, 50)]
        assert _ids(objects) == list(range(300))  # every record, each exactly once
        _wait_committed(kafka.bootstrap_servers, f"connect-{name}", topic, [300])
        status = _task_status(worker, name)
        assert status["state"] == "RUNNING", status
        assert status["errors"]["total-record-failures"] == 0, status
        # The outage was noticed and retried: by put() (counted in total-retries) or, when the
        # upload ran in the background, by the next pre-commit (logged).
        full_log = worker.log_path.read_text(errors="replace")
        assert status["errors"]["total-retries"] > 0 or "Uploading the objects of" in full_log, worker.log()
    finally:
        assert worker.stop() == 0, worker.log()

