"""Backfill jobs in a distributed cluster's config topic: shared by workers, fired by the leader only.

The topic is an in-memory fake with KafkaLog's interface (records reach every follower in order);
the integration test with real workers is in tests/integration/test_backfill_distributed.py.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest

from sluice.connectors.api import AlreadyExistsError
from sluice.worker.backfill import BackfillManager, JobState, StoredJob
from sluice.worker.backfill.kafka_store import KafkaBackfillStore, job_key
from sluice.worker.herder import Conflict
from tests.unit.backfill.test_manager import FakeRunner, spec


class FakeTopic:
    """A one-partition topic: an append-only list every follower replays from the start."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes | None]] = []
        self.followers: list[FakeLog] = []
        self.lock = threading.RLock()

    def log(self, topic: str, bootstrap: str, on_record: Callable[[bytes | None, bytes | None], None], **_: Any) -> FakeLog:
        return FakeLog(self, on_record)


class FakeLog:
    def __init__(self, topic: FakeTopic, on_record: Callable[[bytes | None, bytes | None], None]) -> None:
        self.topic = topic
        self.on_record = on_record
        self.started = False

    def start(self, timeout: float = 30.0) -> None:
        with self.topic.lock:
            for key, value in self.topic.records:
                self.on_record(key, value)
            self.topic.followers.append(self)
            self.started = True

    def stop(self) -> None:
        with self.topic.lock:
            self.topic.followers.remove(self)

    def send(self, key: bytes, value: bytes | None, *, timeout: float = 30.0) -> None:
        with self.topic.lock:
            self.topic.records.append((key, value))
            for follower in list(self.topic.followers):
                follower.on_record(key, value)

    def read_to_end(self, timeout: float = 30.0) -> None:
        assert self.started


def store(topic: FakeTopic) -> KafkaBackfillStore:
    s = KafkaBackfillStore("connect-configs", "unused:9092", client_id="w", log_factory=topic.log)
    s.start()
    return s


def cluster_manager(topic: FakeTopic, runner: FakeRunner, worker: str, leader: Callable[[], bool]) -> BackfillManager:
    s = KafkaBackfillStore("connect-configs", "unused:9092", client_id=worker, log_factory=topic.log)
    m = BackfillManager(s, runner=runner, canceller=runner.cancel, is_leader=leader, worker_id=worker)
    s.on_change = m._on_store_change
    m.start()
    return m


@contextmanager
def two_workers() -> Iterator[tuple[FakeTopic, BackfillManager, FakeRunner, BackfillManager, FakeRunner]]:
    """Workers ``a`` (the leader) and ``b`` sharing one config topic, each with its own runner."""
    topic = FakeTopic()
    ra, rb = FakeRunner(), FakeRunner()
    a = cluster_manager(topic, ra, "a", lambda: True)
    b = cluster_manager(topic, rb, "b", lambda: False)
    try:
        yield topic, a, ra, b, rb
    finally:
        a.stop()
        b.stop()


def test_a_job_written_by_one_worker_is_read_by_the_others_and_after_a_restart() -> None:
    topic = FakeTopic()
    a, b = store(topic), store(topic)
    a.put(StoredJob("nightly", {"kind": "topic_to_s3"}, {"state": "SUCCEEDED"}))
    seen = b.get("nightly")
    assert seen is not None and seen.spec == {"kind": "topic_to_s3"} and seen.status == {"state": "SUCCEEDED"}
    b.put(StoredJob("other", {"kind": "jdbc_to_topic"}))
    assert [j.id for j in a.list()] == ["nightly", "other"]
    a.delete("other")
    assert b.get("other") is None
    # The herder's records and a broken value share the topic; neither becomes a job.
    topic.records.append((b"connector-orders", b'{"properties": {}}'))
    topic.records.append((job_key("broken"), b"not json"))
    topic.records.append((job_key("mismatch"), orjson.dumps({"id": "elsewhere", "spec": {}})))
    restarted = store(topic)
    assert [j.id for j in restarted.list()] == ["nightly"]
    assert topic.records[0][0] == b"sluice-backfill-nightly"


def test_schedules_reach_every_worker_and_fire_on_the_leader_only() -> None:
    topic = FakeTopic()
    leader = {"a": True, "b": False}
    ra, rb = FakeRunner(), FakeRunner()
    ra.release.set()
    rb.release.set()
    a = cluster_manager(topic, ra, "a", lambda: leader["a"])
    b = cluster_manager(topic, rb, "b", lambda: leader["b"])
    try:
        b.submit(spec(schedule={"cron": "0 3 * * *"}))  # submitted on a follower
        assert a._scheduler.get_job("job") is not None and b._scheduler.get_job("job") is not None
        assert a.get("job")["next_run"] is not None
        b._scheduled_run("job")  # due on both; b is no leader
        a._scheduled_run("job")
        assert a.wait("job", 5).state is JobState.SUCCEEDED
        assert (ra.runs, rb.runs) == (1, 0)
        assert b.get("job")["status"]["worker_id"] == "a"
        # Leadership moves: the next firing runs on b.
        leader.update(a=False, b=True)
        a._scheduled_run("job")
        b._scheduled_run("job")
        assert b.wait("job", 5).state is JobState.SUCCEEDED
        assert (ra.runs, rb.runs) == (1, 1)
        # Unscheduling on one worker unschedules everywhere.
        a.submit(spec())
        a.wait("job", 5)
        assert a._scheduler.get_job("job") is None and b._scheduler.get_job("job") is None
    finally:
        a.stop()
        b.stop()


def test_a_job_running_on_one_worker_cannot_start_on_another() -> None:
    with two_workers() as (topic, a, ra, b, rb):
        a.submit(spec())
        assert ra.running.wait(5)
        assert b.get("job")["status"]["state"] == "RUNNING"
        with pytest.raises(Conflict, match="running on worker a"):
            b.submit(spec())
        with pytest.raises(AlreadyExistsError, match="worker a"):
            b.run_now("job")
        b._scheduled_run("job")
        assert rb.runs == 0
        ra.release.set()
        assert a.wait("job", 5).state is JobState.SUCCEEDED
        rb.release.set()
        b.run_now("job")
        assert b.wait("job", 5).state is JobState.SUCCEEDED


def _eventually(probe: Callable[[], bool], timeout: float = 5.0) -> bool:
    import time

    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_cancel_taken_by_another_worker_reaches_the_run() -> None:
    with two_workers() as (topic, a, ra, b, rb):
        a.submit(spec())
        assert ra.running.wait(5)
        b.cancel("job")
        assert a.wait("job", 5).state is JobState.CANCELLED
        assert ra.cancelled_groups and not rb.cancelled_groups
        assert _eventually(lambda: b.get("job")["status"]["state"] == "CANCELLED")
        # The request was for that run only: the next run is not cancelled by it.
        ra.release.set()
        a.run_now("job")
        assert a.wait("job", 5).state is JobState.SUCCEEDED
        assert "cancel_run" not in orjson.loads(topic.records[-1][1] or b"{}")


def test_deleting_a_job_on_another_worker_stops_its_run() -> None:
    with two_workers() as (topic, a, ra, b, rb):
        a.submit(spec())
        assert ra.running.wait(5)
        b.delete("job")
        assert _eventually(lambda: "job" not in a._active)
        assert ra.cancelled_groups
        assert a.store.get("job") is None and b.store.get("job") is None


def test_a_restarted_worker_fails_only_its_own_cut_off_runs() -> None:
    topic = FakeTopic()
    s = store(topic)
    s.put(StoredJob("mine", spec("mine"), {"state": "RUNNING", "worker_id": "a"}))
    s.put(StoredJob("theirs", spec("theirs"), {"state": "RUNNING", "worker_id": "b"}))
    a = cluster_manager(topic, FakeRunner(), "a", lambda: True)
    try:
        assert a.get("mine")["status"]["state"] == "FAILED"
        assert a.get("theirs")["status"]["state"] == "RUNNING"
    finally:
        a.stop()


def test_the_config_store_skips_backfill_records() -> None:
    from sluice.worker.herder.stores.kafka_config_store import KafkaConfigStore

    changes: list[int] = []
    configs = KafkaConfigStore("connect-configs", "127.0.0.1:1", "g", client_id="c", on_change=lambda: changes.append(1))
    try:
        configs._apply(job_key("nightly"), orjson.dumps({"id": "nightly", "spec": {}}))
        assert changes == [] and configs.snapshot().sequence == 0
        configs._apply(b"connector-x", orjson.dumps({"properties": {"connector.class": "X"}}))
        assert changes == [1] and "x" in configs.snapshot().connectors
    finally:
        configs.stop()  # both readers' consumers, destroyed now rather than by the garbage collector


def test_jobs_an_earlier_sluice_kept_in_the_config_topic_are_read_and_move_out_of_it() -> None:
    """A Kafka Connect worker logs unknown config-topic keys as errors: jobs live in
    sluice.storage.topic, and the ones an earlier Sluice wrote to the config topic move there."""
    sluice_topic, config_topic = FakeTopic(), FakeTopic()
    config_topic.records.append((job_key("old"), orjson.dumps(StoredJob("old", {"kind": "topic_to_s3"}).to_json())))

    def factory(topic: str, *args: Any, **kwargs: Any) -> FakeLog:
        return (sluice_topic if topic == "c-sluice" else config_topic).log(topic, *args, **kwargs)

    s = KafkaBackfillStore("c-sluice", "unused:9092", client_id="w", log_factory=factory, legacy_topic="c")
    s.start()
    assert [j.id for j in s.list()] == ["old"]
    s.put(StoredJob("new", {"kind": "jdbc_to_topic"}))
    assert config_topic.records[-1][0] == job_key("old") and len(config_topic.records) == 1, "new jobs stay out of it"
    old = s.get("old")
    assert old is not None
    old.status = {"state": "SUCCEEDED"}
    s.put(old)
    assert config_topic.records[-1] == (job_key("old"), None), "a job written again leaves the config topic"
    assert [k for k, _ in sluice_topic.records] == [job_key("new"), job_key("old")]
    assert (s.get("old") or old).status == {"state": "SUCCEEDED"} and [j.id for j in s.list()] == ["new", "old"]
    s.delete("old")
    assert [j.id for j in s.list()] == ["new"]
