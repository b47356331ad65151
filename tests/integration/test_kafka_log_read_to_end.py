"""``KafkaLog.read_to_end`` against a real broker: once it returns, the callback has seen every
record a ``read_committed`` reader can see — another producer's committed transactions included,
its aborted ones never — whether the reader was already at the end or still had records,
transaction markers or aborted records to pass.

The ordering a task start relies on is the one tested: a producer's transaction is decided (its
markers written) once a newer producer with the same ``transactional.id`` finished
``init_transactions``; the coordinator answers a commit before it writes the markers, so a bare
``commit_transaction`` returning orders nothing for another reader.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException, Producer

from sluice.deploy.kafka_stack import KafkaBroker
from sluice.offsets.kafka_log import KafkaLog
from tests.integration.kafka_helpers import close_producer, create_topic, unique_topic_name

pytestmark = pytest.mark.integration

PARTITIONS = 3


class Follower:
    """A started log on a fresh topic and the values its callback was handed, in order. The callback
    may take ``delay`` seconds a record, as one applying records to a store does: the reader then
    still has records in hand when a test calls ``read_to_end``, which must wait for them."""

    def __init__(self, bootstrap: str, topic: str, delay: float = 0.0) -> None:
        self.values: list[bytes | None] = []
        self.delay = delay
        self.log = KafkaLog(topic, bootstrap, self._apply, client_id=topic)
        self.log.start(30)

    def _apply(self, _key: bytes | None, value: bytes | None) -> None:
        time.sleep(self.delay)
        self.values.append(value)


@pytest.fixture
def topic(kafka: KafkaBroker) -> str:
    name = unique_topic_name("kafka-log")
    create_topic(kafka.bootstrap_servers, name, PARTITIONS)
    return name


@pytest.fixture
def follower(kafka: KafkaBroker, topic: str) -> Iterator[Follower]:
    f = Follower(kafka.bootstrap_servers, topic, delay=0.2)
    yield f
    f.log.stop()


def _transactional(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 0})
    producer.init_transactions(30)
    return producer


def _write(producer: Producer, topic: str, value: bytes) -> None:
    """One record of ``value`` on every partition, inside the producer's open transaction."""
    for partition in range(PARTITIONS):
        producer.produce(topic, value, f"{value.decode()}-{partition}".encode(), partition=partition)
    producer.flush(30)


def test_read_to_end_applies_what_a_fenced_producer_committed_and_never_what_it_left_open(
    kafka: KafkaBroker, topic: str, follower: Follower
) -> None:
    bootstrap, transactional_id = kafka.bootstrap_servers, f"log-{uuid.uuid4().hex[:8]}"
    follower.log.read_to_end(10)  # caught up on the empty topic
    older = _transactional(bootstrap, transactional_id)
    older.begin_transaction()
    _write(older, topic, b"committed")
    older.commit_transaction(30)
    older.begin_transaction()
    _write(older, topic, b"left-open")
    # The newer instance fences the older one: its open transaction is aborted, and the call
    # returns only once both of its transactions' markers are written.
    newer = _transactional(bootstrap, transactional_id)
    newest: Producer | None = None
    try:
        follower.log.read_to_end(10)
        assert follower.values == [b"committed"] * PARTITIONS
        # Caught up on a log whose every partition ends in an abort marker: nothing more to apply.
        follower.log.read_to_end(10)
        assert len(follower.values) == PARTITIONS
        newer.begin_transaction()
        _write(newer, topic, b"newer")
        newer.commit_transaction(30)
        newest = _transactional(bootstrap, transactional_id)
        follower.log.read_to_end(10)
        assert follower.values.count(b"newer") == PARTITIONS
        assert b"left-open" not in follower.values
    finally:
        close_producer(newer)
        if newest is not None:
            close_producer(newest)
        # Fenced: its state is fatal and close() reports it again; the client is released all the same.
        with contextlib.suppress(KafkaException):
            older.close()


def test_a_log_started_on_a_topic_ending_in_markers_has_every_committed_record(kafka: KafkaBroker, topic: str) -> None:
    bootstrap, transactional_id = kafka.bootstrap_servers, f"log-{uuid.uuid4().hex[:8]}"
    writer = _transactional(bootstrap, transactional_id)
    for round_ in range(20):
        writer.begin_transaction()
        _write(writer, topic, f"r{round_}".encode())
        if round_ % 3 == 2:
            writer.abort_transaction(30)
        else:
            writer.commit_transaction(30)
    close_producer(writer)
    close_producer(_transactional(bootstrap, transactional_id))  # waits for the last markers
    follower = Follower(bootstrap, topic)  # start() reads to the end
    try:
        expected = sorted(f"r{r}".encode() for r in range(20) if r % 3 != 2 for _ in range(PARTITIONS))
        assert sorted(v or b"" for v in follower.values) == expected
        follower.log.send_all([(b"own", b"own-write")])
        follower.log.read_to_end(10)
        assert follower.values[-1] == b"own-write"
    finally:
        follower.log.stop()


def test_read_past_sees_a_transaction_the_moment_its_own_commit_returned(kafka: KafkaBroker, topic: str) -> None:
    """What the config store's leader relies on to read its own write back: the offsets of its
    records (their delivery reports, served by the commit) and ``read_past`` — ``read_to_end`` may
    return before the commit's markers exist. Ten commits in a row, each seen at once."""
    follower = Follower(kafka.bootstrap_servers, topic)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers, "transactional.id": f"own-{uuid.uuid4().hex}"})
    try:
        producer.init_transactions(30)
        for round_ in range(10):
            ends: dict[int, int] = {}

            def delivered(err: object, msg: object, ends: dict[int, int] = ends) -> None:
                assert err is None
                ends[msg.partition()] = msg.offset() + 1  # type: ignore[attr-defined]

            producer.begin_transaction()
            producer.produce(topic, f"own-{round_}".encode(), b"k", partition=round_ % PARTITIONS, on_delivery=delivered)
            producer.commit_transaction(30)
            producer.poll(0)
            assert ends, "the commit served no delivery report"
            follower.log.read_past(ends, 10)
            assert follower.values[-1] == f"own-{round_}".encode()
    finally:
        close_producer(producer)
        follower.log.stop()
