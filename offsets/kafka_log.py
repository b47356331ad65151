"""A compacted Kafka topic read from the beginning into memory: the basis of every distributed store.

Kafka Connect keeps its configs, statuses and source offsets in compacted topics that every
worker reads from the start and then follows. :class:`KafkaLog` is that reader: one consumer
assigned to every partition of the topic (no consumer group, so no rebalances and no commits),
a thread that hands each record to a callback in partition order, and :meth:`read_to_end`, which
blocks until everything written before the call has been seen. Reads are ``read_committed``, so
a leader's transactional writes appear whole or not at all.

:meth:`read_to_end` asks for the end offsets (the last stable offsets: what a ``read_committed``
reader can reach) on an admin client's connection of its own, from the caller's thread: the
consumer's connection is usually held by a fetch that waits up to ``fetch.wait.max.ms`` for data,
and a query sent on it queues behind that fetch. When the reader is already there, the call
returns at once; otherwise the reader completes it as its position passes the ends (an end-of-
partition event wakes it when the last thing it passes is a transaction marker).

"Written before the call" means what a ``read_committed`` reader can see: a transaction counts once
its markers are in the log. The transaction coordinator answers ``commit_transaction`` before it
writes them (a few milliseconds later, up to ~0.1 s measured here), so another producer's commit
returning does not put its records before a call; a newer instance's ``init_transactions`` (or a
fencing) does, since it waits for the older instance's markers — what a task start relies on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from sluice.connectors.api import ConnectError

log = logging.getLogger(__name__)

#: Called on the reader thread for every record: ``(key, value)``; ``value`` is ``None`` for a tombstone.
RecordCallback = Callable[[bytes | None, bytes | None], None]

#: Consumer settings an admin client has no use for (librdkafka would warn about each one).
_CONSUMER_ONLY = ("group.", "isolation.", "enable.auto.", "enable.partition.eof", "fetch.", "auto.", "queued.",
                  "max.poll.", "session.", "heartbeat.", "partition.assignment.", "check.crcs")  # fmt: skip


#: How long every broker connection of the end-offsets client must have been up, by reports at
#: most this old, before it is asked (see :class:`SteadyConnections`).
STEADY_S = 2.0


class SteadyConnections:
    """Whether an admin client's connections to every broker have all been up for :data:`STEADY_S`,
    by its statistics (``stats_cb``: :meth:`on_stats`). librdkafka has aborted whole processes on admin requests made while connections
    come and go (a broker restart: #4605, and ``rd_kafka_admin_response_parse`` seen here), so the
    client is asked only while they are steady; otherwise the reader asks on the consumer, the
    slower path that never did."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._up_since: float | None = None
        self._last_report: float | None = None

    def on_stats(self, stats_json: str) -> None:
        try:
            brokers = (orjson.loads(stats_json).get("brokers") or {}).values()
        except (orjson.JSONDecodeError, AttributeError):
            return
        known = [b for b in brokers if isinstance(b, dict) and b.get("nodeid", -1) >= 0]  # not the bootstrap entries
        up = bool(known) and all(b.get("state") == "UP" for b in known)
        now = time.monotonic()
        with self._lock:
            gap = self._last_report is None or now - self._last_report > STEADY_S
            self._last_report = now
            if not up:
                self._up_since = None
            elif gap or self._up_since is None:
                self._up_since = now

    def __bool__(self) -> bool:
        now = time.monotonic()
        with self._lock:
            up_since, last = self._up_since, self._last_report
        return up_since is not None and last is not None and now - up_since >= STEADY_S and now - last <= STEADY_S


def _end_offsets_client(
    bootstrap_servers: str, client_id: str, consumer_overrides: Mapping[str, Any], steady: SteadyConnections
) -> AdminClient:
    """The admin client :meth:`KafkaLog.read_to_end` asks for end offsets, with the consumer's
    connection settings (security ones, say); it keeps its connections open and reports on them."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        "client.id": f"{client_id}-ends",
        **{k: v for k, v in consumer_overrides.items() if not k.startswith(_CONSUMER_ONLY)},
        "enable.sparse.connections": False,
        "statistics.interval.ms": 500,
        "stats_cb": steady.on_stats,
    }
    return AdminClient(config)


class KafkaLogError(ConnectError):
    """The topic cannot be read or written (the message names the topic and the cause)."""


class _EndRequest:
    """A caller of :meth:`KafkaLog.read_to_end`, waiting for the reader thread."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ends: dict[int, int] | None = None
        self.error: BaseException | None = None


class KafkaLog:
    """Follow ``topic`` from its beginning on a background thread; write to it with :meth:`send`."""

    def __init__(
        self,
        topic: str,
        bootstrap_servers: str,
        on_record: RecordCallback,
        *,
        client_id: str,
        consumer_overrides: Mapping[str, Any] | None = None,
        producer_overrides: Mapping[str, Any] | None = None,
        with_producer: bool = True,
    ) -> None:
        self.topic = topic
        self._on_record = on_record
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                # Never joins a group (assign() only); librdkafka still wants an id.
                "group.id": f"{client_id}-reader",
                "client.id": f"{client_id}-reader",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 100,
                # Wakes the reader's poll when it reaches an end, past markers no record stands for.
                "enable.partition.eof": True,
                **dict(consumer_overrides or {}),
            }
        )
        #: Asks for end offsets off the consumer's connection (see the module's docstring).
        self._steady = SteadyConnections()
        self._admin: AdminClient | None = _end_offsets_client(
            bootstrap_servers, client_id, consumer_overrides or {}, self._steady
        )
        self._producer: Producer | None = None
        if with_producer:
            self._producer = Producer(
                {
                    "bootstrap.servers": bootstrap_servers,
                    "client.id": f"{client_id}-writer",
                    "enable.idempotence": True,
                    "linger.ms": 0,
                    # Connect's partitioner, so keys land on the partitions a Java worker would pick.
                    "partitioner": "murmur2_random",
                    **dict(producer_overrides or {}),
                }
            )
        self._partitions: list[TopicPartition] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._positions: dict[int, int] = {}
        self._requests: list[_EndRequest] = []
        self._error: BaseException | None = None
        #: Who closes the consumer: :meth:`stop`, or the reader thread when stop could not wait for it.
        self._close_lock = threading.Lock()
        self._reader_done = False
        self._reader_closes = False

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Assign every partition from the beginning, read to the end, then keep following."""
        metadata = self._consumer.list_topics(self.topic, timeout=timeout)
        topic = metadata.topics.get(self.topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise KafkaLogError(f"Cannot read topic {self.topic}: {getattr(topic, 'error', None) or 'it does not exist'}")
        self._partitions = [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in sorted(topic.partitions)]
        self._consumer.assign(self._partitions)
        self._thread = threading.Thread(target=self._run, name=f"kafka-log-{self.topic}", daemon=True)
        self._thread.start()
        self.read_to_end(timeout)

    def stop(self) -> None:
        self._stop.set()
        reader = self._thread
        if reader is not None:
            reader.join(10)
        # Dropped here; a read_to_end asking through it still holds its own reference until it returns.
        self._admin = None
        producer, self._producer = self._producer, None
        if producer is not None:
            left = producer.flush(5)
            if left:
                log.warning("%d record(s) for %s were not written before the worker stopped", left, self.topic)
                producer.purge()
                producer.flush(0)
            # The last reference: the client is destroyed now, with its threads and its connection
            # attempts, rather than retrying an unreachable broker for as long as the process lives.
            del producer
        with self._close_lock:
            if reader is not None and reader.is_alive() and not self._reader_done:
                # Still inside a call to a broker out of reach (end offsets wait up to 10 s per
                # partition): closing the consumer under it would pull the client from under a
                # call in flight, so the reader closes it as it returns.
                log.info("The reader of %s is still waiting on Kafka; it closes its consumer when it returns", self.topic)
                self._reader_closes = True
                return
        self._close_consumer()

    def _close_consumer(self) -> None:
        try:
            self._consumer.close()
        except (KafkaException, RuntimeError):
            pass

    # -- reading ------------------------------------------------------------------------------------

    def read_to_end(self, timeout: float = 30.0) -> None:
        """Block until every record written to the topic before this call has been handed to the callback.

        The reader thread hands the records over (a librdkafka consumer must not be driven from two
        threads); this thread only asks for the end offsets and returns at once if the reader has
        already passed them.
        """
        self._await(self._end_offsets(timeout), timeout)

    def read_past(self, ends: Mapping[int, int], timeout: float = 30.0) -> None:
        """Block until the reader has passed ``ends`` (``{partition: offset}``): the offsets just past
        records this process wrote, from their delivery reports. Exact where :meth:`read_to_end`
        is not for the caller's own transaction (visible a moment after its commit returns)."""
        self._await(dict(ends), timeout)

    def _await(self, ends: dict[int, int] | None, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        request = _EndRequest()
        request.ends = ends
        with self._cond:
            if self._error is not None:
                raise KafkaLogError(f"Reading {self.topic} failed: {self._error}")
            if request.ends is not None and self._reached(request.ends):
                return
            self._requests.append(request)
        if not request.done.wait(max(0.0, deadline - time.monotonic())):
            with self._cond:
                if request in self._requests:
                    self._requests.remove(request)
            raise KafkaLogError(
                f"Timed out after {timeout:.0f}s reading {self.topic} to its end (at {self._positions}, end {request.ends})"
            )
        if request.error is not None:
            raise KafkaLogError(f"Reading {self.topic} failed: {request.error}")

    def _end_offsets(self, timeout: float) -> dict[int, int] | None:
        """Each partition's last stable offset, or ``None`` if the admin client could not tell (a
        topic created a moment ago, a broker out of reach): the reader thread then asks itself."""
        admin = self._admin
        if admin is None or not self._partitions:
            return None
        admin.poll(0)  # its statistics
        if not self._steady:
            return None
        try:
            futures = admin.list_offsets(
                {TopicPartition(self.topic, tp.partition): OffsetSpec.latest() for tp in self._partitions},
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=max(1.0, min(timeout, 10.0)),
            )
            return {tp.partition: future.result().offset for tp, future in futures.items()}
        except KafkaException as exc:
            log.debug("End offsets of %s not available from the admin client: %s", self.topic, exc)
            return None

    def _reached(self, ends: Mapping[int, int]) -> bool:
        """Whether the reader has passed ``ends`` (call with ``_cond`` held). Positions count
        transaction markers and aborted records, which occupy offsets but never reach the callback."""
        return all(self._positions.get(p, 0) >= end for p, end in ends.items())

    def _run(self) -> None:
        try:
            self._follow()
        finally:
            with self._close_lock:
                self._reader_done = True
                if self._reader_closes:
                    self._close_consumer()

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                self._ask_for_ends()
                msg: Message | None = self._consumer.poll(0.05 if self._requests else 0.2)
                eof: tuple[int, int] | None = None
                if msg is not None:
                    err = msg.error()
                    if err is None:
                        try:
                            self._on_record(msg.key(), msg.value())
                        except Exception:
                            log.exception("Could not apply a record of %s at offset %s", self.topic, msg.offset())
                    elif err.code() == KafkaError._PARTITION_EOF:
                        eof = (msg.partition() or 0, msg.offset() or 0)
                    else:
                        log.warning("Error reading %s: %s", self.topic, err)
                self._advance(eof)
            except Exception as exc:  # a closed consumer during stop, or a fatal client error
                if self._stop.is_set():
                    return
                log.exception("Reader of %s failed", self.topic)
                with self._cond:
                    self._error = exc
                    for request in self._requests:
                        request.error = exc
                        request.done.set()
                    self._requests.clear()
                return

    def _ask_for_ends(self) -> None:
        """End offsets for the requests whose caller could not get them from the admin client."""
        with self._cond:
            pending = [r for r in self._requests if r.ends is None]
        for request in pending:
            try:
                request.ends = {
                    tp.partition: self._consumer.get_watermark_offsets(TopicPartition(self.topic, tp.partition), timeout=10)[1]
                    for tp in self._partitions
                }
            except KafkaException as exc:
                # A topic created a moment ago may not have partition leaders yet; the
                # caller's timeout bounds the retries.
                if not exc.args[0].retriable() and exc.args[0].code() != KafkaError.NOT_LEADER_FOR_PARTITION:
                    raise
                log.debug("End offsets of %s not available yet: %s", self.topic, exc)

    def _advance(self, eof: tuple[int, int] | None) -> None:
        """Publish the consumer's positions and complete the requests they satisfy. An end-of-
        partition event carries the end the consumer reached: the position past a trailing
        transaction marker, and a position at all for a partition that had nothing to read."""
        reached = [(tp.partition, tp.offset) for tp in self._consumer.position(self._partitions)]
        if eof is not None:
            reached.append(eof)
        with self._cond:
            # Only forward: the position the consumer reports may still be short of the event's end.
            for partition, offset in reached:
                if offset > self._positions.get(partition, -1):
                    self._positions[partition] = offset
            for request in list(self._requests):
                if request.ends is not None and self._reached(request.ends):
                    self._requests.remove(request)
                    request.done.set()

    # -- writing ------------------------------------------------------------------------------------

    def send(self, key: bytes, value: bytes | None, *, timeout: float = 30.0) -> None:
        """Write one record and wait until the broker has it."""
        self.send_all([(key, value)], timeout=timeout)

    def send_all(self, records: list[tuple[bytes, bytes | None]], *, timeout: float = 30.0) -> None:
        """Write ``records`` and wait until the broker acknowledged every one; raise on any failure."""
        if self._producer is None:
            raise KafkaLogError(f"This log of {self.topic} is {'stopped' if self._stop.is_set() else 'read-only'}")
        errors: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err)

        for key, value in records:
            self._produce(key, value, on_delivery)
        left = self._producer.flush(timeout)
        if left:
            raise KafkaLogError(f"Timed out after {timeout:.0f}s writing {left} record(s) to {self.topic}")
        if errors:
            raise KafkaLogError(f"Writing to {self.topic} failed: {errors[0].str()}")

    def send_async(self, key: bytes, value: bytes | None) -> None:
        """Write one record without waiting (status updates); failures are logged."""
        if self._producer is None:
            raise KafkaLogError(f"This log of {self.topic} is {'stopped' if self._stop.is_set() else 'read-only'}")

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                log.warning("Could not write %r to %s: %s", key, self.topic, err.str())

        self._produce(key, value, on_delivery)
        self._producer.poll(0)

    def _produce(self, key: bytes, value: bytes | None, on_delivery: Callable[[KafkaError | None, Message], None]) -> None:
        assert self._producer is not None
        while True:
            try:
                self._producer.produce(self.topic, value, key, on_delivery=on_delivery)
                return
            except BufferError:
                self._producer.poll(0.1)
