"""A compacted Kafka topic read from the beginning into memory: the basis of every distributed store.

Kafka Connect keeps its configs, statuses and source offsets in compacted topics that every
worker reads from the start and then follows. :class:`KafkaLog` is that reader: one consumer
assigned to every partition of the topic (no consumer group, so no rebalances and no commits),
a thread that hands each record to a callback in partition order, and :meth:`read_to_end`, which
blocks until everything written before the call has been seen. Reads are ``read_committed``, so
a leader's transactional writes appear whole or not at all.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from sluice.connectors.api import ConnectError

log = logging.getLogger(__name__)

#: Called on the reader thread for every record: ``(key, value)``; ``value`` is ``None`` for a tombstone.
RecordCallback = Callable[[bytes | None, bytes | None], None]


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
                **dict(consumer_overrides or {}),
            }
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

        The reader thread does the work: a librdkafka consumer must not be driven from two threads.
        """
        self._await(None, timeout)

    def read_past(self, ends: Mapping[int, int], timeout: float = 30.0) -> None:
        """Block until the reader has passed ``ends`` (``{partition: offset}``): the offsets just past
        records this process wrote, from their delivery reports. For the caller's own transaction,
        whose commit markers the coordinator writes a moment after ``commit_transaction`` returned,
        that is exact where "the end now" is not."""
        self._await(dict(ends), timeout)

    def _await(self, ends: dict[int, int] | None, timeout: float) -> None:
        request = _EndRequest()
        request.ends = ends  # None: the reader asks for the end offsets first
        with self._cond:
            if self._error is not None:
                raise KafkaLogError(f"Reading {self.topic} failed: {self._error}")
            self._requests.append(request)
        if not request.done.wait(timeout):
            with self._cond:
                if request in self._requests:
                    self._requests.remove(request)
            raise KafkaLogError(
                f"Timed out after {timeout:.0f}s reading {self.topic} to its end (at {self._positions}, end {request.ends})"
            )
        if request.error is not None:
            raise KafkaLogError(f"Reading {self.topic} failed: {request.error}")

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
                msg: Message | None = self._consumer.poll(0.05 if self._requests else 0.2)
                if msg is not None:
                    err = msg.error()
                    if err is None:
                        try:
                            self._on_record(msg.key(), msg.value())
                        except Exception:
                            log.exception("Could not apply a record of %s at offset %s", self.topic, msg.offset())
                    elif err.code() != KafkaError._PARTITION_EOF:
                        log.warning("Error reading %s: %s", self.topic, err)
                # Positions include transaction markers, which never reach the callback.
                for tp in self._consumer.position(self._partitions):
                    if tp.offset >= 0:
                        self._positions[tp.partition] = tp.offset
                with self._cond:
                    for request in list(self._requests):
                        ends = request.ends
                        if ends is not None and all(self._positions.get(p, 0) >= end for p, end in ends.items()):
                            self._requests.remove(request)
                            request.done.set()
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
