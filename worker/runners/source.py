"""Drives a :class:`~connectors.api.SourceTask`: poll → transform → convert → produce → store offsets."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from connectors.api import (
    ConnectError,
    Converter,
    DataError,
    EncodedRecordBatch,
    HeaderConverter,
    RecordMetadata,
    RetriableError,
    SourceRecord,
    SourceRecordBatch,
    SourceTask,
)
from offsets import OffsetStore, StoreOffsetReader, offset_key
from worker.errors import (
    SKIPPED,
    DeadLetterQueue,
    ErrorContext,
    ErrorHandlingConfig,
    RetryWithTolerance,
    Stage,
    context_headers,
    transform_each,
)
from worker.outages import DEFAULT_DEGRADED_AFTER_MS
from worker.runners.base import TaskStatusListener, WorkerTask
from worker.status import ConnectorTaskId, TargetState
from worker.topic_creation import TopicCreator

log = logging.getLogger(__name__)

Transform = Callable[[list[SourceRecord]], list[SourceRecord]]


class SourceTaskContextImpl:
    """The context a source task sees."""

    def __init__(self, task_id: ConnectorTaskId, offset_reader: StoreOffsetReader) -> None:
        self._id = task_id
        self._reader = offset_reader

    @property
    def connector_name(self) -> str:
        return self._id.connector

    @property
    def task_id(self) -> int:
        return self._id.task

    @property
    def offset_reader(self) -> StoreOffsetReader:
        return self._reader


class SourceTaskRunner(WorkerTask):
    """Runs a source task with at-least-once delivery.

    Delivery order, each step only after the one before it:

    1. ``poll()`` the task for a batch of records.
    2. Apply the transformation chain; a record a transform drops is done.
    3. Convert keys, values and headers to bytes with the connector's converters.
    4. Hand every record to the producer (asynchronous: librdkafka batches and sends them).
    5. Remember the record's ``source_offset`` as the pending offset of its ``source_partition``.
    6. Every ``offset.flush.interval.ms``, and when stopping: snapshot the pending offsets, wait
       until the producer has delivered everything it was handed (``flush``), and only when every
       record was acknowledged write the snapshot to the offset store, then call ``task.commit()``.

    A delivery failure fails the task before any offset that covers the failed record is written,
    so a restart resumes from the last stored offsets: nothing is lost, and duplicates come only
    from the interval after the last commit. Delivery reports are requested for errors only, so the
    happy path costs no Python callback per record.
    """

    def __init__(
        self,
        task_id: ConnectorTaskId,
        task: SourceTask,
        task_config: Mapping[str, Any],
        *,
        listener: TaskStatusListener,
        initial_state: TargetState,
        producer_config: Mapping[str, Any],
        offset_store: OffsetStore,
        key_converter: Converter,
        value_converter: Converter,
        header_converter: HeaderConverter,
        transform: Transform | None = None,
        offset_flush_interval_ms: int = 60_000,
        offset_flush_timeout_ms: int = 5_000,
        errors: ErrorHandlingConfig | None = None,
        dlq: DeadLetterQueue | None = None,
        degraded_after_ms: int = DEFAULT_DEGRADED_AFTER_MS,
        topic_creator: TopicCreator | None = None,
    ) -> None:
        super().__init__(task_id, listener, initial_state, degraded_after_ms=degraded_after_ms)
        self.task = task
        self._topic_creator = topic_creator
        self.task_config = dict(task_config)
        self._producer_config = dict(producer_config)
        self._offset_store = offset_store
        self._key_converter = key_converter
        self._value_converter = value_converter
        self._header_converter = header_converter
        self._transform = transform
        self._flush_interval_s = offset_flush_interval_ms / 1000
        self._flush_timeout_s = offset_flush_timeout_ms / 1000
        self._producer: Producer | None = None
        self._delivery_error: KafkaError | None = None
        # pending offsets: key bytes → (partition, offset); _key_cache maps id(partition dict) to its
        # key so tasks that reuse one partition object pay for the JSON key once, not per record.
        self._pending: dict[bytes, tuple[Mapping[str, Any], Mapping[str, Any] | None]] = {}
        self._key_cache: dict[int, tuple[Mapping[str, Any], bytes]] = {}
        self._wants_commit_record = type(task).commit_record is not SourceTask.commit_record
        self._encoded = False  # the task serializes its records (decided after start)
        self._next_commit = 0.0
        self.records_produced = 0
        self.records_polled = 0
        self.errors = errors if errors is not None else ErrorHandlingConfig()
        self.dlq = dlq
        self.retry = RetryWithTolerance(self.errors, reporter=self._report_failed_record, stop_event=self._stopping, task_id=task_id, dlq=dlq)
        self._source_system = f"the system {type(task).__name__} reads from"

    # -- lifecycle --------------------------------------------------------------------------------

    def _initialize(self) -> None:
        config = dict(self._producer_config)
        config["error_cb"] = self._on_client_error
        self._watch_kafka(config)
        if self._wants_commit_record:
            config["delivery.report.only.error"] = False
        else:
            config["on_delivery"] = self._on_delivery
        try:
            self._producer = Producer(config)
        except KafkaException as exc:
            raise ConnectError(f"Invalid producer configuration: {exc.args[0].str()}") from exc
        if self.dlq is not None:
            self.dlq.start()
        reader = StoreOffsetReader(self._offset_store, self.id.connector)
        self.task.start(self.task_config, SourceTaskContextImpl(self.id, reader))
        # A task may serialize its records itself when nothing needs them as Connect data on the way.
        self._encoded = (
            self._transform is None
            and not self._wants_commit_record
            and bool(self.task.accept_encoded(self._key_converter, self._value_converter))
        )
        self._next_commit = time.monotonic() + self._flush_interval_s

    def _on_stop_requested(self) -> None:
        self.task.stop()

    def _close(self) -> None:
        try:
            if self._producer is not None and not self.failed:
                self._commit_offsets(final=True)
        finally:
            if self._producer is not None:
                self._producer.flush(self._flush_timeout_s)
                self._producer = None
            if self.dlq is not None:
                self.dlq.close(self._flush_timeout_s)

    # -- delivery reports -------------------------------------------------------------------------

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None and self._delivery_error is None:
            self._delivery_error = err

    def _on_client_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._delivery_error = err
        elif not self._kafka_unreachable(err):
            log.warning("Kafka producer: %s", err.str())

    def _check_delivery(self) -> None:
        err = self._delivery_error
        if err is not None:
            raise self.retry.unrecoverable(Stage.KAFKA_PRODUCE, _PRODUCER, KafkaException(err), "a delivery report")

    # -- main loop --------------------------------------------------------------------------------

    def _execute(self) -> None:
        assert self._producer is not None
        producer = self._producer
        while not self.stopping:
            if not self._await_unpaused():
                break
            try:
                records = self.task.poll()
            except RetriableError as exc:
                # Logged by the tracker: when the outage starts, in summaries, and when it ends.
                log.debug("Retriable error from poll(), polling again: %s", exc)
                self._system_unreachable(self._source_system, exc)
                self.retry.total_retries += 1
                records = None
                self._stopping.wait(0.1)
            except Exception as exc:
                raise self.retry.unrecoverable(Stage.TASK_POLL, _class_name(self.task), exc) from exc
            else:
                self.outages.reached(self._source_system)
            self._check_delivery()
            if records and not self._unfenced():
                # Out of contact with the group, possibly frozen mid-loop: the task may already run
                # elsewhere. Drop the batch; its offsets were never stored, so its next owner polls it again.
                continue
            if records:
                self.records_polled += len(records)
                self._send(records)
            else:
                producer.poll(0)
            if time.monotonic() >= self._next_commit:
                self._commit_offsets()

    def _send(self, records: Sequence[SourceRecord]) -> None:
        producer = self._producer
        assert producer is not None
        if isinstance(records, SourceRecordBatch):
            if type(records) is EncodedRecordBatch and self._encoded:
                self._send_encoded(records)
                return
            if self._transform is None and not self._wants_commit_record and self._send_columns(records):
                return
            records = records.records()
        try:
            polled = records
            if self._transform is not None:
                records = self._transform(list(records))
                if not records:
                    return
            keys, values = self._convert(records)
        except Exception:
            # Only now go record by record, to isolate the bad record(s) of this batch.
            records, keys, values = self._convert_each(polled)
            if not records:
                producer.poll(0)
                return
        produce = producer.produce
        pending = self._pending
        key_cache = self._key_cache
        connector = self.id.connector
        last_sp: Any = None
        last_key = b""
        commit_record = self.task.commit_record if self._wants_commit_record else None
        active_topics = self.active_topics
        last_topic: str | None = None
        for record, k, v in zip(records, keys, values):
            if record.topic is not last_topic:  # an identity check: tasks reuse one topic string
                last_topic = record.topic
                if last_topic not in active_topics:
                    self._first_write(last_topic)
                active_topics.add(last_topic)
            try:
                if commit_record is None and record.partition is None and record.timestamp is None and record.headers is None:
                    produce(record.topic, v, k)
                else:
                    produce(record.topic, v, k, **self._produce_extras(record, commit_record))
            except BufferError:
                self._produce_when_room(record, k, v, commit_record)
            except KafkaException as exc:
                # KIP-779: a record the producer refuses is tolerated (skipped, sent to the DLQ) or fails the task.
                self.retry.fail(ErrorContext(Stage.KAFKA_PRODUCE, _PRODUCER, exc, f"topic {record.topic!r}", record))
            sp = record.source_partition
            if sp is not None:
                if sp is not last_sp:
                    cached = key_cache.get(id(sp))
                    if cached is None or cached[0] is not sp:
                        if len(key_cache) > 10_000:
                            key_cache.clear()
                        cached = (sp, offset_key(connector, sp))
                        key_cache[id(sp)] = cached
                    last_sp, last_key = sp, cached[1]
                pending[last_key] = (sp, record.source_offset)
        self.records_produced += len(records)
        producer.poll(0)

    def _send_columns(self, batch: SourceRecordBatch) -> bool:
        """Steps 3-5 for a columnar batch: one conversion call per column, a tight produce loop,
        and one pending offset (the batch's last) instead of one per record. ``False`` (nothing
        sent) when conversion failed: the caller goes record by record."""
        producer = self._producer
        assert producer is not None
        topic = batch.topic
        n = len(batch)
        self._first_write(topic)
        self.active_topics.add(topic)
        try:
            values = self._value_converter.from_connect_batch(topic, [batch.value_schema] * n, batch.values)
            keys = None
            if batch.keys is not None or batch.key_schema is not None:
                key_values = batch.keys if batch.keys is not None else [None] * n
                keys = self._key_converter.from_connect_batch(topic, [batch.key_schema] * n, key_values)
        except Exception:
            return False
        produce = producer.produce
        # The tight loops stop at the first full queue or refused record; the rest goes the
        # careful way, which waits for room and hands a refused record to errors.* (KIP-779).
        if keys is None:
            for i, v in enumerate(values):
                try:
                    produce(topic, v)
                except (BufferError, KafkaException):
                    self._produce_columns_carefully(batch, values, None, i)
                    break
        else:
            for i, (k, v) in enumerate(zip(keys, values)):
                try:
                    produce(topic, v, k)
                except (BufferError, KafkaException):
                    self._produce_columns_carefully(batch, values, keys, i)
                    break
        sp = batch.source_partition
        if sp is not None and n:
            self._pending[offset_key(self.id.connector, sp)] = (sp, batch.last_offset)
        self.records_produced += n
        producer.poll(0)
        return True

    def _send_encoded(self, batch: EncodedRecordBatch) -> None:
        """Produce a batch the task serialized itself (see ``SourceTask.accept_encoded``): no
        conversion, one pending offset."""
        producer = self._producer
        assert producer is not None
        produce = producer.produce
        topics, keys, values = batch.topics, batch.keys, batch.values
        assert keys is not None
        last_topic = None
        for i, (t, k, v) in enumerate(zip(topics, keys, values)):
            if t is not last_topic:
                self._first_write(t)
                self.active_topics.add(t)
                last_topic = t
            try:
                produce(t, v, k)
            except (BufferError, KafkaException):
                self._produce_columns_carefully(batch, values, keys, i, topics)
                break
        sp = batch.source_partition
        if sp is not None and values:
            self._pending[offset_key(self.id.connector, sp)] = (sp, batch.last_offset)
        self.records_produced += len(values)
        producer.poll(0)

    def _first_write(self, topic: str) -> None:
        """Before the first record to ``topic``: create it per ``topic.creation.*`` when it is
        missing (KIP-158). A set lookup once the topic is known."""
        if self._topic_creator is not None:
            self._topic_creator.ensure(topic)

    def _convert_each(self, records: Sequence[SourceRecord]) -> tuple[list[SourceRecord], list[bytes | None], list[bytes | None]]:
        """Steps 2 and 3 one record at a time, under ``errors.*``: a record that fails is skipped
        (its offset still counts as done, after it reached the DLQ) or fails the task."""
        execute = self.retry.execute
        kc, vc, transform = self._key_converter, self._value_converter, self._transform
        kname, vname, hname = _class_name(kc), _class_name(vc), _class_name(self._header_converter)
        out: list[SourceRecord] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        for polled in records:
            where = f"source partition {polled.source_partition} offset {polled.source_offset}"
            if transform is not None:
                transformed = transform_each(transform, polled, self.retry, where)
                if transformed is SKIPPED:
                    self._skip(polled)
                    continue
            else:
                transformed = [polled]
            for r in transformed:
                key = None
                if r.key is not None or r.key_schema is not None:
                    key = execute(Stage.KEY_CONVERTER, partial(kc.from_connect_data, r.topic, r.key_schema, r.key), class_name=kname, coordinates=where, record=r)
                    if key is SKIPPED:
                        self._skip(r)
                        continue
                value = execute(Stage.VALUE_CONVERTER, partial(vc.from_connect_data, r.topic, r.value_schema, r.value), class_name=vname, coordinates=where, record=r)
                if value is SKIPPED:
                    self._skip(r)
                    continue
                if r.headers and execute(Stage.HEADER_CONVERTER, partial(self._convert_headers, r), class_name=hname, coordinates=where, record=r) is SKIPPED:
                    self._skip(r)
                    continue
                out.append(r)
                keys.append(key)
                values.append(value)
        return out, keys, values

    def _skip(self, record: SourceRecord) -> None:
        """A skipped record is done: its offset may be stored once the DLQ has it (flushed at commit)."""
        sp = record.source_partition
        if sp is not None:
            self._pending[offset_key(self.id.connector, sp)] = (sp, record.source_offset)

    def _report_failed_record(self, ctx: ErrorContext) -> None:
        """Sluice's source DLQ: the record's converted bytes where they exist, else JSON."""
        dlq = self.dlq
        if dlq is None:
            return
        r: SourceRecord = ctx.record
        key = value = None
        try:
            if r.key is not None or r.key_schema is not None:
                key = self._key_converter.from_connect_data(r.topic, r.key_schema, r.key)
        except Exception:
            key = _json(r.key)
        try:
            value = self._value_converter.from_connect_data(r.topic, r.value_schema, r.value)
        except Exception:
            value = _json(r.value)
        try:
            headers = self._convert_headers(r) if r.headers else []
        except Exception:
            headers = [(k, _json(v)) for k, v in r.headers or ()]
        if self.errors.dlq_context_headers:
            headers = headers + context_headers(ctx, self.id.connector, self.id.task, r.topic)
        dlq.send(key, value, headers)

    def _produce_columns_carefully(
        self,
        batch: SourceRecordBatch,
        values: list[Any],
        keys: list[Any] | None,
        start: int,
        topics: list[str] | None = None,
    ) -> None:
        """Produce a columnar batch from ``start`` on: when the queue is full, serve delivery
        reports until there is room; a record the producer refuses is tolerated (skipped, sent
        to the DLQ) or fails the task, as on the record-by-record path. Also for an encoded batch
        (``topics``: each record's topic)."""
        producer = self._producer
        assert producer is not None
        topic = batch.topic
        for i in range(start, len(values)):
            if topics is not None:  # an encoded batch: each record names its topic
                topic = topics[i]
                self._first_write(topic)
                self.active_topics.add(topic)
            while True:
                try:
                    producer.produce(topic, values[i], keys[i] if keys is not None else None)
                    break
                except BufferError:
                    producer.poll(0.05)
                    self._check_delivery()
                except KafkaException as exc:
                    self.retry.fail(ErrorContext(Stage.KAFKA_PRODUCE, _PRODUCER, exc, f"topic {topic!r}", batch[i]))
                    break

    def _produce_extras(self, record: SourceRecord, commit_record: Any) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if record.partition is not None:
            kwargs["partition"] = record.partition
        if record.timestamp is not None:
            kwargs["timestamp"] = record.timestamp
        if record.headers:
            kwargs["headers"] = self._convert_headers(record)
        if commit_record is not None:
            kwargs["on_delivery"] = self._record_callback(record, commit_record)
        return kwargs

    def _produce_when_room(self, record: SourceRecord, k: bytes | None, v: bytes | None, commit_record: Any) -> None:
        """librdkafka's queue is full: serve delivery reports until the record fits."""
        producer = self._producer
        assert producer is not None
        kwargs = self._produce_extras(record, commit_record)
        while True:
            producer.poll(0.05)
            self._check_delivery()
            try:
                producer.produce(record.topic, v, k, **kwargs)
                return
            except BufferError:
                continue

    def _convert(self, records: Sequence[SourceRecord]) -> tuple[list[bytes | None], list[bytes | None]]:
        topic = records[0].topic
        same_topic = all(r.topic == topic for r in records)
        try:
            if same_topic:
                if all(r.key is None for r in records) and all(r.key_schema is None for r in records):
                    keys: list[bytes | None] = [None] * len(records)
                else:
                    keys = self._key_converter.from_connect_batch(topic, [r.key_schema for r in records], [r.key for r in records])
                values = self._value_converter.from_connect_batch(
                    topic, [r.value_schema for r in records], [r.value for r in records]
                )
            else:
                kc = self._key_converter.from_connect_data
                vc = self._value_converter.from_connect_data
                keys = [kc(r.topic, r.key_schema, r.key) for r in records]
                values = [vc(r.topic, r.value_schema, r.value) for r in records]
        except DataError:
            raise
        except Exception as exc:
            raise DataError(f"Converter failed on a record for topic {topic!r}: {exc}") from exc
        return keys, values

    def _convert_headers(self, record: SourceRecord) -> list[tuple[str, bytes | None]]:
        convert = self._header_converter.from_connect_header
        return [(k, convert(record.topic, k, None, v)) for k, v in record.headers or ()]

    def _record_callback(self, record: SourceRecord, commit_record: Callable[[SourceRecord, RecordMetadata | None], None]) -> Callable[[KafkaError | None, Any], None]:
        def callback(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self._on_delivery(err, msg)
                return
            commit_record(record, RecordMetadata(msg.topic(), msg.partition(), msg.offset()))

        return callback

    # -- offsets ----------------------------------------------------------------------------------

    def _commit_offsets(self, final: bool = False) -> bool:
        """Step 6: store the pending offsets once everything before them is acknowledged."""
        producer = self._producer
        assert producer is not None
        self._next_commit = time.monotonic() + self._flush_interval_s
        snapshot = self._pending
        self._pending = {}
        remaining = producer.flush(self._flush_timeout_s)
        if self.dlq is not None and not self.dlq.flush(self._flush_timeout_s):
            remaining += 1  # skipped records are not in the DLQ yet: their offsets must wait
        if remaining > 0 or self._delivery_error is not None:
            # Put the snapshot back under anything newer (there is nothing newer: this thread is
            # the only producer) and try again at the next interval.
            snapshot.update(self._pending)
            self._pending = snapshot
            if self._delivery_error is not None:
                self._check_delivery()
            # While Kafka is known to be out of reach the outage's own lines say why, once.
            log.log(
                logging.DEBUG if self.outages.is_open(self._kafka) else logging.WARNING,
                "Failed to flush, timed out while waiting for producer to flush outstanding %d messages; "
                "offsets not committed this time",
                remaining,
            )
            return False
        if snapshot:
            self.outages.reached(self._kafka)  # everything delivered: Kafka answers
        if snapshot and not self._unfenced():
            log.warning("Not storing source offsets of %s: the worker is out of contact with its group", self.id)
            return False
        if snapshot:
            self._offset_store.put(self.id.connector, list(snapshot.values()))
            log.debug("Committed offsets for %d source partitions", len(snapshot))
        try:
            self.task.commit()
        except Exception:
            log.exception("Exception in SourceTask.commit(); offsets were stored")
        return True


_PRODUCER = "confluent_kafka.Producer"


def _class_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _json(value: Any) -> bytes:
    import orjson

    return orjson.dumps(value, default=str)
