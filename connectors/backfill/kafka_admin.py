"""Kafka metadata the driver needs: create a target topic, read partition counts and end offsets.

Only metadata goes through Python (confluent-kafka); record data is read and written by Spark's
Kafka data source in the JVM.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.connectors.backfill.errors import BackfillJobError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: What a partition's leader answers while it is not ready yet: just after the topic was created
#: (the metadata lists the partitions some 50-150 ms before the leader serves ListOffsets), or
#: during a leader change. Asking again shortly after succeeds.
_LEADER_NOT_READY = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)


def _when_leader_ready(call: Callable[[], T], what: str, timeout: float = 30.0) -> T:
    """``call()``, asked again while the partition's leader is not ready (see ``_LEADER_NOT_READY``)."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        try:
            return call()
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.code() if isinstance(error, KafkaError) else None
            if code not in _LEADER_NOT_READY:
                raise
            if time.monotonic() + delay > deadline:
                reason = error.str() if isinstance(error, KafkaError) else str(exc)
                raise BackfillJobError(f"cannot read {what} from Kafka: {reason} (for {timeout:.0f}s)") from None
            log.debug("Reading %s: %s; asking again", what, error)
        time.sleep(delay)
        delay = min(1.0, delay * 2)


def ensure_topic(bootstrap: str, topic: str, partitions: int | None, replication: int = -1) -> int:
    """Create ``topic`` if missing; return its partition count."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = partition_count(bootstrap, topic, admin=admin)
    if existing:
        return existing
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions or 1, replication_factor=replication)])
    # exception(), not result(): raised, the future's exception would get a traceback holding this
    # frame (the AdminClient, and the future holding the exception: a reference cycle), and the garbage
    # collector may destroy the client on a librdkafka thread, where rd_kafka_destroy() aborts the process.
    failure = futures[topic].exception(timeout=30)
    if failure is not None and "TOPIC_ALREADY_EXISTS" not in str(failure):
        error = failure.args[0] if isinstance(failure, KafkaException) and failure.args else None
        raise BackfillJobError(f"cannot create topic {topic}: {error.str() if isinstance(error, KafkaError) else failure}") from None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        count = partition_count(bootstrap, topic, admin=admin)
        if count:
            return count
        time.sleep(0.05)
    raise BackfillJobError(f"topic {topic} was created but its metadata did not appear within 30s")


def partition_count(bootstrap: str, topic: str, *, admin: AdminClient | None = None) -> int:
    """Partitions of ``topic``; 0 if it does not exist."""
    admin = admin or AdminClient({"bootstrap.servers": bootstrap})
    try:
        # Not list_topics(topic=...): that metadata request auto-creates the topic on brokers that allow it.
        meta = admin.list_topics(timeout=15)
    except KafkaException as exc:
        raise BackfillJobError(f"cannot reach Kafka at {bootstrap}: {exc}") from None
    info = meta.topics.get(topic)
    if info is None or info.error is not None:
        return 0
    return len(info.partitions)


def watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    """Low and high watermark of each partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "sluice-backfill-metadata", "enable.auto.commit": False})
    try:
        return {
            p: _when_leader_ready(
                partial(consumer.get_watermark_offsets, TopicPartition(topic, p), timeout=15), f"the offsets of {topic}[{p}]"
            )
            for p in range(partitions)
        }
    finally:
        consumer.close()


def offsets_for_times(bootstrap: str, topic: str, partitions: int, timestamp_ms: int) -> dict[int, int]:
    """Per partition, the first offset at or after ``timestamp_ms`` (the high watermark if none)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "sluice-backfill-metadata", "enable.auto.commit": False})
    try:
        found = _when_leader_ready(
            lambda: consumer.offsets_for_times([TopicPartition(topic, p, timestamp_ms) for p in range(partitions)], timeout=15),
            f"the offsets of {topic} at {timestamp_ms}",
        )
        out = {}
        for tp in found:
            offset = tp.offset
            if offset < 0:
                offset = _when_leader_ready(
                    partial(consumer.get_watermark_offsets, TopicPartition(topic, tp.partition), timeout=15),
                    f"the offsets of {topic}[{tp.partition}]",
                )[1]
            out[tp.partition] = offset
        return out
    finally:
        consumer.close()


class TopicGrowthMonitor:
    """Counts records appended to a topic while a job writes it, and reports them every ``interval`` s.

    The growth of the high watermarks is exactly the number of records written (plus any other
    producer's), which is live progress for a write Spark does not report per row.
    """

    def __init__(self, bootstrap: str, topic: str, partitions: int, report: Callable[[int], None], interval: float = 1.0):
        self._bootstrap = bootstrap
        self._topic = topic
        self._partitions = partitions
        self._report = report
        self._interval = interval
        self._stop = threading.Event()
        self._start = self._high()
        self._mean: float | None = None
        self._thread = threading.Thread(target=self._run, name=f"backfill-progress-{topic}", daemon=True)

    def _high(self) -> Mapping[int, int]:
        return {p: hw for p, (_, hw) in watermarks(self._bootstrap, self._topic, self._partitions).items()}

    def written(self) -> int:
        now = self._high()
        return sum(max(0, now[p] - self._start.get(p, 0)) for p in now)

    def mean_record_bytes(self, sample: int = 200) -> float:
        """Mean key + value size of up to ``sample`` records written since the start (sampled once)."""
        if self._mean is not None:
            return self._mean
        consumer = Consumer({"bootstrap.servers": self._bootstrap, "group.id": "sluice-backfill-metadata", "enable.auto.commit": False})
        try:
            sizes: list[int] = []
            for p, start in self._start.items():
                consumer.assign([TopicPartition(self._topic, p, start)])
                for msg in consumer.consume(sample, timeout=2.0):
                    if msg.error() is None:
                        sizes.append(len(msg.value() or b"") + len(msg.key() or b""))
                if sizes:
                    break
        finally:
            consumer.close()
        if not sizes:
            return 0.0
        self._mean = sum(sizes) / len(sizes)
        return self._mean

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._report(self.written())
            except Exception:
                log.debug("Reading %s's watermarks failed", self._topic, exc_info=True)

    def __enter__(self) -> TopicGrowthMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
