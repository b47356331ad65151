"""How a connector's own offsets topic layers over the worker's (:class:`~offsets.connector_topics.OffsetTopics`).

The two topics are played by in-memory stores with the Kafka store's ``knows`` (what the topic holds
a record of, tombstones included): the layering is what is under test here; the Kafka stores
themselves are exercised against a broker in tests/integration/test_connector_offsets_topic.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from sluice.offsets.base import JsonMap, OffsetStoreError, partition_identity
from sluice.offsets.connector_topics import OffsetTopics
from sluice.offsets.kafka import KafkaOffsetStore
from sluice.offsets.memory import MemoryOffsetStore


class TopicStore(MemoryOffsetStore):
    """A topic's store in memory, remembering tombstones as the topic does."""

    def __init__(self, topic: str, *, fail_puts: bool = False) -> None:
        super().__init__()
        self.topic = topic
        self.fail_puts = fail_puts
        self.deleted: set[tuple[str, bytes]] = set()
        self.writes: list[list[tuple[JsonMap, JsonMap | None]]] = []
        self.started = self.stopped = False

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.stopped = True

    def put(self, connector: str, offsets: Sequence[tuple[JsonMap, JsonMap | None]]) -> None:
        if self.fail_puts:
            raise OffsetStoreError(f"cannot write to {self.topic}")
        self.writes.append(list(offsets))
        super().put(connector, offsets)
        for partition, offset in offsets:
            mark = (connector, partition_identity(partition))
            (self.deleted.add if offset is None else self.deleted.discard)(mark)

    def knows(self, connector: str, partitions: Sequence[JsonMap]) -> list[bool]:
        present = [o is not None for o in self.get(connector, partitions)]
        return [
            p or (connector, partition_identity(q)) in self.deleted for p, q in zip(present, partitions, strict=True)
        ]


def _topics(**opened: TopicStore) -> tuple[OffsetTopics, TopicStore, list[str]]:
    worker = TopicStore("connect-offsets")
    calls: list[str] = []

    def open_topic(topic: str) -> KafkaOffsetStore:
        calls.append(topic)
        store = opened.get(topic.replace("-", "_")) or TopicStore(topic)
        store.start()
        return store  # type: ignore[return-value]

    return OffsetTopics(worker, open_topic), worker, calls  # type: ignore[arg-type]


A, B, C = {"table": "a"}, {"table": "b"}, {"table": "c"}


def test_without_a_topic_of_its_own_a_connector_uses_the_worker_topic() -> None:
    topics, worker, calls = _topics()
    topics.use("orders", None)
    topics.use("orders", "connect-offsets")  # the worker's topic named explicitly: the same
    topics.put("orders", [(A, {"id": 1})])
    assert worker.get("orders", [A]) == [{"id": 1}]
    assert topics.get("orders", [A]) == [{"id": 1}]
    assert calls == [] and topics.topic_of("orders") == "connect-offsets"


def test_reads_prefer_the_connector_topic_and_fall_back_to_the_worker_topic() -> None:
    own = TopicStore("orders-offsets")
    topics, worker, calls = _topics(orders_offsets=own)
    worker.put("orders", [(A, {"id": 1}), (B, {"id": 2})])
    topics.use("orders", "orders-offsets")
    own.put("orders", [(A, {"id": 10})])
    assert topics.get("orders", [A, B, C]) == [{"id": 10}, {"id": 2}, None]
    assert sorted(topics.all("orders"), key=str) == sorted([(A, {"id": 10}), (B, {"id": 2})], key=str)
    assert calls == ["orders-offsets"] and own.started and topics.topic_of("orders") == "orders-offsets"
    # Another connector on the same topic shares the opened store; other connectors are untouched.
    topics.use("billing", "orders-offsets")
    assert calls == ["orders-offsets"]
    assert topics.get("customers", [A]) == [None]


def test_a_tombstone_in_the_connector_topic_hides_the_worker_topic_offset() -> None:
    own = TopicStore("orders-offsets")
    topics, worker, _ = _topics(orders_offsets=own)
    worker.put("orders", [(A, {"id": 1})])
    topics.use("orders", "orders-offsets")
    own.put("orders", [(A, None)])  # a transaction wrote the tombstone to the connector's topic only
    assert topics.get("orders", [A]) == [None]
    assert topics.all("orders") == []


def test_writes_go_to_both_topics_tombstones_first() -> None:
    own = TopicStore("orders-offsets")
    topics, worker, _ = _topics(orders_offsets=own)
    worker.put("orders", [(B, {"id": 2})])
    topics.use("orders", "orders-offsets")
    worker.writes.clear()
    topics.put("orders", [(A, {"id": 5}), (B, None)])
    assert own.get("orders", [A, B]) == [{"id": 5}, None]
    assert worker.get("orders", [A, B]) == [{"id": 5}, None]
    assert worker.writes == [[(B, None)], [(A, {"id": 5})]]  # the tombstone before anything else


def test_a_failed_tombstone_copy_fails_the_write_a_failed_offset_copy_does_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    own = TopicStore("orders-offsets")
    topics, worker, _ = _topics(orders_offsets=own)
    topics.use("orders", "orders-offsets")
    worker.fail_puts = True
    topics.put("orders", [(A, {"id": 5})])
    assert own.get("orders", [A]) == [{"id": 5}]
    assert "copy in the worker's offsets topic connect-offsets failed" in caplog.text
    with pytest.raises(OffsetStoreError, match="connect-offsets"):
        topics.put("orders", [(A, None)])
    assert own.get("orders", [A]) == [{"id": 5}]  # nothing deleted where reads would fall back


def test_delete_resets_both_topics() -> None:
    own = TopicStore("orders-offsets")
    topics, worker, _ = _topics(orders_offsets=own)
    worker.put("orders", [(B, {"id": 2})])
    topics.use("orders", "orders-offsets")
    own.put("orders", [(A, {"id": 1})])
    topics.delete("orders")
    assert topics.all("orders") == [] and worker.all("orders") == [] and own.all("orders") == []


def test_a_topic_that_cannot_be_opened_is_named() -> None:
    worker = TopicStore("connect-offsets")

    def refuse(topic: str) -> KafkaOffsetStore:
        raise RuntimeError("TOPIC_AUTHORIZATION_FAILED")

    topics = OffsetTopics(worker, refuse)  # type: ignore[arg-type]
    with pytest.raises(OffsetStoreError, match="offsets topic team-a-offsets: TOPIC_AUTHORIZATION_FAILED"):
        topics.use("orders", "team-a-offsets")
    assert topics.topic_of("orders") == "connect-offsets"


def test_stop_closes_every_opened_topic() -> None:
    own = TopicStore("orders-offsets")
    topics, worker, _ = _topics(orders_offsets=own)
    topics.use("orders", "orders-offsets")
    topics.stop()
    assert own.stopped and worker.stopped
