"""Helpers for integration tests that talk to a real Kafka broker.

Plain functions taking ``bootstrap`` (a ``bootstrap.servers`` string), so they work with the
session ``kafka`` fixture, a ``sluice dev`` broker, or any other cluster::

    create_topic(kafka.bootstrap_servers, "orders", partitions=3)
    produce(kafka.bootstrap_servers, "orders", [OutgoingRecord(key=b"k", value=b"v")])
    records = consume_all(kafka.bootstrap_servers, "orders", expected_count=1)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    """A record to :func:`produce`; ``partition=None`` lets the partitioner choose by key."""

    value: bytes | str | None
    key: bytes | str | None = None
    headers: Sequence[tuple[str, bytes | str | None]] = ()
    partition: int | None = None
    timestamp: int | None = None


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    """A record read back by :func:`consume_all`."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = field(default=())
    timestamp: int = 0
    """Milliseconds since the epoch (create time unless the topic uses log-append time)."""
    timestamp_type: int = 0
    """confluent_kafka.TIMESTAMP_CREATE_TIME or TIMESTAMP_LOG_APPEND_TIME."""


class ClosingAdminClient:
    """An AdminClient that its owner closes: confluent_kafka's has no ``close()``, and its librdkafka
    handle is destroyed with the last reference to it. Left to the cyclic garbage collector (a
    ``future.result()`` that raised puts the client's frame in a cycle with the exception), it may be
    destroyed on a librdkafka thread that runs Python (the one completing AdminClient futures), and
    ``rd_kafka_destroy()`` there aborts the process. :meth:`close` (or the end of a ``with`` block)
    drops the only reference, so the handle is destroyed then, on the caller's thread. Everything
    else goes to the client."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._client: AdminClient | None = AdminClient(dict(config))

    def __getattr__(self, name: str) -> Any:
        client = self.__dict__.get("_client")
        if client is None:
            raise RuntimeError(f"AdminClient.{name} used after close()")
        return getattr(client, name)

    def close(self) -> None:
        self._client = None

    def __enter__(self) -> ClosingAdminClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def unique_topic_name(prefix: str = "test") -> str:
    """A topic name no other test uses, so tests sharing a broker do not see each other's data."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    *,
    replication_factor: int = 1,
    config: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> None:
    """Create a topic and wait until every partition has a leader.

    CreateTopics returns once the controller committed the topic; the broker may serve its
    metadata a moment later, so producing right away could still hit UNKNOWN_TOPIC.
    """
    topic = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=dict(config or {}))
    with ClosingAdminClient({"bootstrap.servers": bootstrap}) as admin:
        for future in admin.create_topics([topic], request_timeout=timeout).values():
            future.result(timeout=timeout)
        deadline = time.monotonic() + timeout
        while True:
            metadata = admin.list_topics(topic=name, timeout=timeout).topics.get(name)
            if (
                metadata is not None
                and metadata.error is None
                and len(metadata.partitions) == partitions
                and all(p.leader >= 0 for p in metadata.partitions.values())
            ):
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"topic {name} has no leader for all {partitions} partitions after {timeout}s")
            time.sleep(0.05)


def wait_topic(bootstrap: str, topic: str, timeout: float = 30) -> None:
    """Wait until ``topic`` exists with partitions (a task's producer creates it on first use)."""
    with ClosingAdminClient({"bootstrap.servers": bootstrap, "allow.auto.create.topics": False}) as admin:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            meta = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                return
            time.sleep(0.2)
    raise AssertionError(f"topic {topic} was not created within {timeout}s")


def delete_topic(bootstrap: str, name: str, *, timeout: float = 30.0) -> None:
    """Delete a topic (the broker finishes removing its files asynchronously)."""
    with ClosingAdminClient({"bootstrap.servers": bootstrap}) as admin:
        for future in admin.delete_topics([name], request_timeout=timeout).values():
            future.result(timeout=timeout)


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[OutgoingRecord],
    *,
    config: Mapping[str, str | int | bool] | None = None,
    timeout: float = 30.0,
) -> list[tuple[int, int]]:
    """Produce ``records`` with an idempotent, acks=all producer and wait for every delivery.

    Returns the (partition, offset) of each record, in input order. Raises
    :class:`KafkaException` on the first delivery error.
    """
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5, **(config or {})}
    )
    results: list[tuple[int, int] | None] = []
    errors: list[KafkaError] = []

    def on_delivery(index: int) -> object:
        def callback(err: KafkaError | None, msg: object) -> None:
            if err is not None:
                errors.append(err)
            else:
                results[index] = (msg.partition(), msg.offset())  # type: ignore[attr-defined]

        return callback

    try:
        for index, record in enumerate(records):
            results.append(None)
            kwargs: dict[str, object] = {"key": record.key, "value": record.value, "on_delivery": on_delivery(index)}
            if record.headers:
                kwargs["headers"] = list(record.headers)
            if record.partition is not None:
                kwargs["partition"] = record.partition
            if record.timestamp is not None:
                kwargs["timestamp"] = record.timestamp
            while True:
                try:
                    producer.produce(topic, **kwargs)  # type: ignore[arg-type]
                    break
                except BufferError:  # local queue full: let deliveries drain it
                    producer.poll(0.1)
            producer.poll(0)
        remaining = producer.flush(timeout)
    finally:
        close_producer(producer)
    if errors:
        raise KafkaException(errors[0])
    if remaining:
        raise TimeoutError(f"{remaining} records to {topic} were not delivered within {timeout}s")
    return [r for r in results if r is not None]


def close_producer(producer: Producer) -> None:
    """Close ``producer`` now, on this thread; what it still holds (a delivery that failed or timed
    out) is purged first, since ``Producer.close()`` flushes without a timeout."""
    if len(producer):
        producer.purge()
        producer.flush(0)
    producer.close()


def consume_all(
    bootstrap: str,
    topic: str,
    expected_count: int,
    timeout: float = 30.0,
    *,
    settle: float = 0.5,
    isolation_level: str = "read_committed",
) -> list[ConsumedRecord]:
    """Read ``topic`` from the beginning of every partition until ``expected_count`` records arrived.

    Uses partition assignment, not a consumer group, so it commits nothing and leaves no
    group behind. A topic that does not exist yet is waited for (within ``timeout``): a source
    task reports RUNNING before its first send auto-creates its topic. After the expected count
    it keeps reading for ``settle`` seconds, so duplicates or extra records show up in the
    result instead of being missed. Returns the records sorted by (partition, offset); raises
    :class:`TimeoutError` naming how many arrived if fewer than ``expected_count`` did within
    ``timeout``.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"consume-all-{uuid.uuid4().hex[:8]}",  # required, but never joined
            "enable.auto.commit": False,
            "isolation.level": isolation_level,
            "enable.partition.eof": False,
        }
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            metadata = consumer.list_topics(topic=topic, timeout=timeout).topics.get(topic)
            if metadata is not None and metadata.error is None and metadata.partitions:
                break
            if time.monotonic() >= deadline:
                error = metadata.error if metadata is not None else "unknown topic"
                raise TimeoutError(f"topic {topic} is not available after {timeout}s: {error}")
            time.sleep(0.1)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(metadata.partitions)])
        records: list[ConsumedRecord] = []
        settle_until: float | None = None
        while True:
            now = time.monotonic()
            if settle_until is None and len(records) >= expected_count:
                settle_until = now + settle
            if settle_until is not None and now >= settle_until:
                break
            if settle_until is None and now >= deadline:
                raise TimeoutError(
                    f"read {len(records)} of {expected_count} expected records from {topic} in {timeout}s"
                )
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                if msg.error() is not None:
                    raise KafkaException(msg.error())
                records.append(
                    ConsumedRecord(
                        topic=msg.topic() or topic,
                        partition=msg.partition() or 0,
                        offset=msg.offset() or 0,
                        key=msg.key(),
                        value=msg.value(),
                        headers=tuple(cast(list[tuple[str, bytes | None]], msg.headers() or [])),
                        timestamp=msg.timestamp()[1],
                        timestamp_type=msg.timestamp()[0],
                    )
                )
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def consume_to_end(bootstrap: str, topic: str, timeout: float = 60.0) -> list[ConsumedRecord]:
    """Every record ``topic`` holds as of the call (``read_committed``): each partition is read
    until the consumer reports its end at or past the high watermark taken first. Unlike
    :func:`consume_all` with a settle time, a partition that lags behind another is read whole."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"consume-to-end-{uuid.uuid4().hex[:8]}",  # required, but never joined
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        partitions = sorted(consumer.list_topics(topic=topic, timeout=timeout).topics[topic].partitions)
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        done = {p for p, end in ends.items() if end == 0}
        records: list[ConsumedRecord] = []
        deadline = time.monotonic() + timeout
        while len(done) < len(ends):
            if time.monotonic() >= deadline:
                raise TimeoutError(f"read {len(records)} records of {topic}, partitions {sorted(set(ends) - done)} unfinished")
            for msg in consumer.consume(num_messages=1000, timeout=0.2):
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    if (msg.offset() or 0) >= ends[msg.partition() or 0]:
                        done.add(msg.partition() or 0)
                elif err is not None:
                    raise KafkaException(err)
                else:
                    records.append(
                        ConsumedRecord(topic, msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value())
                    )
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def committed_offset(bootstrap: str, group: str, topic: str, partition: int = 0) -> int:
    """The offset consumer group ``group`` committed for ``topic``/``partition`` (negative: none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([TopicPartition(topic, partition)], timeout=10)
        return int(tp.offset)
    finally:
        consumer.close()
