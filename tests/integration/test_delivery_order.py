"""The runners' delivery order, checked from outside as a user would: offsets in the store, the
committed consumer offsets, the records in the topic, and the worker's status."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import orjson
import pytest

from sluice.offsets import FileOffsetStore
from tests.integration.kafka_helpers import OutgoingRecord, consume_all, create_topic, produce
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration


def _stored(worker: WorkerProcess, connector: str) -> dict[bytes, dict]:
    store = FileOffsetStore(worker.offsets_path)
    store.start()
    try:
        return {orjson.dumps(p): dict(o) for p, o in store.all(connector)}
    finally:
        store.stop()


def _journal(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def _committed(bootstrap: str, group: str, topic: str) -> int:
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        [tp] = consumer.committed([KafkaTopicPartition(topic, 0)], timeout=10)
        return tp.offset
    finally:
        consumer.close()


def _wait(predicate, timeout: float = 30, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_source_offsets_are_stored_after_delivery_and_resume_from_there(kafka, tmp_path: Path) -> None:
    topic = f"scripted-{time.time_ns()}"
    create_topic(kafka.bootstrap_servers, topic, partitions=1)
    journal = tmp_path / "journal.jsonl"
    config = {
        "connector.class": "tests.plugins.scripted.ScriptedSource",
        "topic": topic,
        "count": "10",
        "journal": str(journal),
    }
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **{"offset.flush.interval.ms": "300"})
    worker.start()
    try:
        assert httpx.post(f"{worker.url}/connectors", json={"name": "scripted", "config": config}).status_code == 201
        assert [r.value for r in consume_all(kafka.bootstrap_servers, topic, 10)] == [
            f"v{i}".encode() for i in range(10)
        ]
        # A flush may land between delivery reports and store an earlier n first: wait for the last one.
        expected = {b'{"scripted":"main"}': {"n": 9}}
        _wait(lambda: _stored(worker, "scripted") == expected, what="the offset of the last record stored")
        assert _stored(worker, "scripted") == expected
        events = [e["event"] for e in _journal(journal)]
        assert events.index("poll") < events.index("commit")
    finally:
        assert worker.stop() == 0, worker.log()

    worker.start()  # resumes after n=9: nothing is sent again
    try:
        assert httpx.post(f"{worker.url}/connectors", json={"name": "scripted", "config": config}).status_code == 201
        _wait(lambda: [e for e in _journal(journal) if e["event"] == "start"][1:], what="second start")
        assert [e for e in _journal(journal) if e["event"] == "start"][1]["stored"] == {"n": 9}
        time.sleep(1)
        assert len(consume_all(kafka.bootstrap_servers, topic, 10)) == 10
    finally:
        assert worker.stop() == 0, worker.log()


def test_a_record_kafka_rejects_fails_the_task_and_stores_no_offset(kafka, tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    # Kafka refuses this topic name; the delivery report carries the error.
    config = {
        "connector.class": "tests.plugins.scripted.ScriptedSource",
        "topic": "no spaces allowed",
        "count": "5",
        "journal": str(journal),
    }
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **{"offset.flush.interval.ms": "300"})
    worker.start()
    try:
        assert httpx.post(f"{worker.url}/connectors", json={"name": "rejected", "config": config}).status_code == 201
        status: dict = {}

        def failed() -> bool:
            nonlocal status
            status = httpx.get(f"{worker.url}/connectors/rejected/status").json()
            return bool(status["tasks"]) and status["tasks"][0]["state"] == "FAILED"

        _wait(failed, what="the task to fail")
        assert "no spaces allowed" in status["tasks"][0]["trace"] or "topic" in status["tasks"][0]["trace"].lower()
        time.sleep(1)
        assert _stored(worker, "rejected") == {}
    finally:
        assert worker.stop() == 0, worker.log()


def test_sink_commits_exactly_what_pre_commit_returns(kafka, tmp_path: Path) -> None:
    topic = f"precommit-{time.time_ns()}"
    create_topic(kafka.bootstrap_servers, topic, partitions=1)
    produce(kafka.bootstrap_servers, topic, [OutgoingRecord(f"r{i}".encode()) for i in range(10)])
    journal = tmp_path / "journal.jsonl"
    config = {
        "connector.class": "tests.plugins.scripted.ScriptedSink",
        "topics": topic,
        "journal": str(journal),
        "durable.lag": "3",
    }
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **{"offset.flush.interval.ms": "300"})
    worker.start()
    try:
        assert httpx.post(f"{worker.url}/connectors", json={"name": "lagging", "config": config}).status_code == 201
        _wait(
            lambda: any(e["event"] == "pre_commit" and e["offered"].get(f"{topic}-0") == 10 for e in _journal(journal)),
            what="pre_commit",
        )
        _wait(lambda: _committed(kafka.bootstrap_servers, "connect-lagging", topic) == 7, what="commit of 7")
    finally:
        assert worker.stop() == 0, worker.log()
    events = _journal(journal)
    puts = [o for e in events if e["event"] == "put" for o in e["offsets"]]
    assert puts == list(range(10))
    first_put = next(i for i, e in enumerate(events) if e["event"] == "put")
    first_offer = next(i for i, e in enumerate(events) if e["event"] == "pre_commit" and e["offered"])
    assert first_put < first_offer
    # 10 consumed, pre_commit said 7 are durable: the group resumes at 7, never past it.
    assert _committed(kafka.bootstrap_servers, "connect-lagging", topic) == 7


def test_sigterm_flushes_and_commits_before_exit(kafka, tmp_path: Path) -> None:
    topic = f"term-{time.time_ns()}"
    create_topic(kafka.bootstrap_servers, topic, partitions=1)
    source_file, sink_file = tmp_path / "in.txt", tmp_path / "out.txt"
    source_file.write_text("".join(f"row {i}\n" for i in range(1000)))
    # Offsets would never be committed on the timer within this test: only shutdown commits them.
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **{"offset.flush.interval.ms": "600000"})
    worker.start()
    try:
        for name, config in {
            "src": {"connector.class": "FileStreamSource", "file": str(source_file), "topic": topic},
            "dst": {"connector.class": "FileStreamSink", "file": str(sink_file), "topics": topic},
        }.items():
            assert httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}).status_code == 201
        assert len(consume_all(kafka.bootstrap_servers, topic, 1000)) == 1000
        # Nothing outside the task shows what it consumed before a commit (its file buffer is flushed
        # only on commit); 5 s is ample for a sink that started with the source to read 1,000 records.
        time.sleep(5)
        assert _stored(worker, "src") == {}
        assert _committed(kafka.bootstrap_servers, "connect-dst", topic) < 0  # nothing committed yet
    finally:
        assert worker.stop() == 0, worker.log()
    assert _stored(worker, "src") == {
        orjson.dumps({"filename": str(source_file)}): {"position": source_file.stat().st_size}
    }
    assert _committed(kafka.bootstrap_servers, "connect-dst", topic) == 1000
    assert sink_file.read_text().splitlines() == [f"row {i}" for i in range(1000)]


def test_a_sink_started_before_its_topic_exists_waits_for_it(kafka, tmp_path: Path) -> None:
    # The common start-up order: the sink is deployed first and the source creates the topic later.
    topic = f"late-{time.time_ns()}"
    sink_file = tmp_path / "out.txt"
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **{"offset.flush.interval.ms": "300"})
    worker.start()
    try:
        config = {"connector.class": "FileStreamSink", "file": str(sink_file), "topics": topic}
        assert httpx.post(f"{worker.url}/connectors", json={"name": "early", "config": config}).status_code == 201
        worker.wait_running("early")
        _wait(lambda: "does not exist (yet)" in worker.log(), what="the missing-topic warning")
        create_topic(kafka.bootstrap_servers, topic, partitions=1)
        produce(kafka.bootstrap_servers, topic, [OutgoingRecord(f"r{i}".encode()) for i in range(5)])
        _wait(lambda: _committed(kafka.bootstrap_servers, "connect-early", topic) == 5, timeout=60, what="commit of 5")
        status = httpx.get(f"{worker.url}/connectors/early/status").json()
        assert [t["state"] for t in status["tasks"]] == ["RUNNING"]
        assert "failed" not in worker.log().lower()
    finally:
        assert worker.stop() == 0, worker.log()
    assert sink_file.read_text().splitlines() == [f"r{i}" for i in range(5)]
