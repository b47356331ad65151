"""The status store's view of its own writes: applied at once, never undone by older records
its topic reader reaches later, and in step with the topic again once they are read back."""

from __future__ import annotations

from typing import Any

import orjson

from sluice.worker.herder.stores.kafka_status_store import KafkaStatusStore, encode_status, task_key
from sluice.worker.status import ConnectorTaskId, State, Status

TASK = ConnectorTaskId("fwd", 0)


class FakeLog:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes | None]] = []

    def send_async(self, key: bytes, value: bytes | None) -> None:
        self.sent.append((key, value))


def store() -> tuple[KafkaStatusStore, FakeLog]:
    s = KafkaStatusStore("status", "127.0.0.1:9", client_id="test", generation=lambda: 1)
    log = FakeLog()
    s._log = log  # type: ignore[assignment]
    return s, log


def record(state: State, worker: str = "w1") -> bytes:
    return encode_status(Status(state, worker, generation=1))


def test_an_older_record_read_after_our_write_does_not_undo_it() -> None:
    s, log = store()
    s._apply(task_key(TASK), record(State.RUNNING))
    s.put_task(TASK, Status(State.PAUSED, "w1"))
    assert s.task(TASK).state is State.PAUSED  # type: ignore[union-attr]
    # The reader was behind: it now reaches a RUNNING written before our PAUSED.
    s._apply(task_key(TASK), record(State.RUNNING))
    assert s.task(TASK).state is State.PAUSED  # type: ignore[union-attr]
    # Our write comes back; from then on the topic rules again.
    key, value = log.sent[-1]
    s._apply(key, value)
    s._apply(task_key(TASK), record(State.RUNNING, "w2"))
    assert s.task(TASK) == Status(State.RUNNING, "w2", generation=1)


def test_records_of_other_keys_apply_as_they_come() -> None:
    s, _ = store()
    s.put_task(TASK, Status(State.PAUSED, "w1"))
    other = ConnectorTaskId("fwd", 1)
    s._apply(task_key(other), record(State.RUNNING, "w2"))
    assert s.task(other).state is State.RUNNING  # type: ignore[union-attr]


def test_a_write_that_never_comes_back_stops_blocking_after_the_expiry(monkeypatch: Any) -> None:
    import sluice.worker.herder.stores.kafka_status_store as module

    s, _ = store()
    s.put_task(TASK, Status(State.PAUSED, "w1"))
    monkeypatch.setattr(module, "UNREAD_WRITE_EXPIRY_S", -1.0)
    s._apply(task_key(TASK), record(State.FAILED, "w2"))
    assert s.task(TASK).state is State.FAILED  # type: ignore[union-attr]


def test_active_topics_are_records_every_worker_reads_and_a_reset_tombstones_them() -> None:
    resets: list[str] = []
    s, log = store()
    s._on_topic_reset = resets.append
    s.put_topic("fwd", "orders", 0)
    s.put_topic("fwd", "orders", 1)  # known already: not written again
    assert [k for k, _ in log.sent] == [b"status-topic-orders:connector-fwd"]
    value = log.sent[0][1]
    assert value is not None and orjson.loads(value)["topic"] | {"discoverTimestamp": 0} == {
        "name": "orders", "connector": "fwd", "task": 0, "discoverTimestamp": 0
    }
    # Another worker's task of the same connector used another topic.
    other = orjson.dumps({"topic": {"name": "refunds", "connector": "fwd", "task": 1, "discoverTimestamp": 1}})
    s._apply(b"status-topic-refunds:connector-fwd", other)
    assert s.topics("fwd") == {"orders", "refunds"} and s.topics("other") == set()
    # Another worker reset the connector's topics: its tombstones reach this worker, which tells the herder.
    s._apply(b"status-topic-refunds:connector-fwd", None)
    assert s.topics("fwd") == {"orders"} and resets == ["fwd"]
    # A reset here tombstones every topic of the connector; reading them back is no news.
    s.reset_topics("fwd")
    assert log.sent[-1] == (b"status-topic-orders:connector-fwd", None) and s.topics("fwd") == set()
    s._apply(*log.sent[-1])
    assert resets == ["fwd"]


def test_active_topics_from_an_earlier_sluice_are_read_and_move_to_connects_key() -> None:
    resets: list[str] = []
    s, log = store()
    s._on_topic_reset = resets.append
    legacy = orjson.dumps({"topic": {"name": "orders", "connector": "fwd", "task": 0, "discoverTimestamp": 1}})
    s._apply(b"topic-orders-connector-fwd", legacy)
    s._apply(b"topic-refunds-connector-fwd", legacy.replace(b"orders", b"refunds"))
    assert s.topics("fwd") == {"orders", "refunds"}
    # The next use writes Connect's key (which a Connect worker reads) and tombstones the old one.
    s.put_topic("fwd", "orders", 0)
    assert [k for k, _ in log.sent] == [b"status-topic-orders:connector-fwd", b"topic-orders-connector-fwd"]
    assert log.sent[1][1] is None
    # Reading that tombstone back (here or on another worker) is no reset, and the topic stays.
    s._apply(b"topic-orders-connector-fwd", None)
    assert resets == [] and s.topics("fwd") == {"orders", "refunds"}
    # A reset tombstones the connector's records under both shapes.
    s.reset_topics("fwd")
    assert set(log.sent[-2:]) == {(b"status-topic-orders:connector-fwd", None), (b"topic-refunds-connector-fwd", None)}
    assert s.topics("fwd") == set()


def test_deleting_a_connector_resets_its_topics() -> None:
    s, log = store()
    s.put_topic("fwd", "orders", 0)
    s.forget("fwd")
    assert (b"status-topic-orders:connector-fwd", None) in log.sent and s.topics("fwd") == set()
