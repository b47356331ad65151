"""Drives a :class:`~connectors.api.SinkTask`: consume → convert → transform → put → commit.

The runner's other parts are its base classes, one module each: ``sink_errors`` (``put()`` and
what happens when records cannot be used), ``sink_redelivery`` (raw values given back) and
``sink_offsets`` (consumed and committed offsets).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sluice.connectors.api import (
    ConnectError,
    Converter,
    DataError,
    ErrantRecordReporter,
    HeaderConverter,
    LocalFiles,
    SinkRecordBatch,
    SinkTask,
    TopicPartition,
    UnusableRawValues,
    ValueFormat,
    WireFormat,
)
from sluice.worker.errors import DeadLetterQueue, ErrorHandlingConfig, Stage
from sluice.worker.local_paths import NO_LOCAL_FILES
from sluice.worker.outages import DEFAULT_DEGRADED_AFTER_MS
from sluice.worker.runners.base import TaskStatusListener
from sluice.worker.runners.sink_errors import SinkErrantRecordReporter, Transform, _batches
from sluice.worker.runners.sink_offsets import SinkOffsetTracking
from sluice.worker.runners.sink_redelivery import _rewound
from sluice.worker.status import ConnectorTaskId, TargetState
from sluice.worker.task_metrics import consumer_lag
from sluice.worker.tracing import BatchTracer, Step, batch_tracer, commit_attributes, sink_attributes

log = logging.getLogger(__name__)

__all__ = ["SinkErrantRecordReporter", "SinkTaskContextImpl", "SinkTaskRunner"]


#: Consumer errors for a subscribed topic that does not exist: not a reason to fail the task.
_MISSING_TOPIC = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})


class SinkTaskContextImpl:
    """The context a sink task sees; every call comes from the task thread."""

    def __init__(self, runner: SinkTaskRunner) -> None:
        self._runner = runner

    @property
    def connector_name(self) -> str:
        return self._runner.id.connector

    @property
    def task_id(self) -> int:
        return self._runner.id.task

    @property
    def local_files(self) -> LocalFiles:
        return self._runner.local_files

    def assignment(self) -> set[TopicPartition]:
        return set(self._runner.assignment)

    def pause(self, *partitions: TopicPartition) -> None:
        self._runner.pause_partitions(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._runner.resume_partitions(partitions)

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._runner.rewind(offsets)

    def request_commit(self) -> None:
        self._runner.commit_requested = True

    @property
    def errant_record_reporter(self) -> ErrantRecordReporter | None:
        return self._runner.errant_record_reporter


class SinkTaskRunner(SinkOffsetTracking):
    """Runs a sink task with at-least-once delivery.

    Delivery order, each step only after the one before it:

    1. ``consume()`` a batch of messages from the assigned partitions.
    2. Convert keys, values and headers into Connect data.
    3. Apply the transformation chain.
    4. ``put()`` the records into the task (a ``RetriableError`` re-offers the same batch after a
       backoff, with consumption paused).
    5. Every ``offset.flush.interval.ms``, on ``request_commit()``, before partitions are revoked
       and when stopping: call ``pre_commit()`` with the next offset of everything consumed; the
       task makes its data durable and returns the offsets that are safe.
    6. Commit exactly those offsets to the consumer group ``connect-<connector>``, synchronously.

    A crash between 4 and 6 re-delivers the records since the last commit: duplicates, never loss.
    """

    metrics_kind = "sink"

    def __init__(
        self,
        task_id: ConnectorTaskId,
        task: SinkTask,
        task_config: Mapping[str, Any],
        *,
        listener: TaskStatusListener,
        initial_state: TargetState,
        consumer_config: Mapping[str, Any],
        topics: Sequence[str],
        topics_regex: str | None,
        key_converter: Converter,
        value_converter: Converter,
        header_converter: HeaderConverter,
        transform: Transform | None = None,
        offset_flush_interval_ms: int = 60_000,
        batch_size: int = 2_000,
        errant_record_reporter: ErrantRecordReporter | None = None,
        errors: ErrorHandlingConfig | None = None,
        dlq: DeadLetterQueue | None = None,
        degraded_after_ms: int = DEFAULT_DEGRADED_AFTER_MS,
        local_files: LocalFiles = NO_LOCAL_FILES,
    ) -> None:
        super().__init__(task_id, listener, initial_state, degraded_after_ms=degraded_after_ms)
        self.task = task
        #: The files the task may open (connector.allowed.paths); without a grant, none.
        self.local_files = local_files
        self.task_config = dict(task_config)
        self._consumer_config = dict(consumer_config)
        self._topics = list(topics)
        self._topics_regex = topics_regex
        # Subscribed to one topic by name: every batch is of that topic, nothing to look at per record.
        self._one_topic = len(self._topics) == 1 and not topics_regex
        self._key_converter = key_converter
        self._value_converter = value_converter
        self._header_converter = header_converter
        self._transform = transform
        self._flush_interval_s = offset_flush_interval_ms / 1000
        self._batch_size = batch_size
        self._consumer: Consumer | None = None
        self.assignment: set[TopicPartition] = set()
        self._paused_by_task: set[TopicPartition] = set()
        self._consumed: dict[TopicPartition, int] = {}  # next offset to consume, per partition
        self._consumed_ts: dict[tuple[str, int], int] = {}  # timestamp (ms) of the last record consumed, per partition
        self._committed: dict[TopicPartition, int] = {}
        self._rewinds: dict[TopicPartition, int] = {}
        self.commit_requested = False
        self._closing = False
        self._next_commit = 0.0
        self.records_put = 0
        self._init_error_handling(errors, dlq, errant_record_reporter)
        # Raw values for a task that asks for them (SinkTask.value_format, read after its start()).
        self._raw = False
        self._raw_format: WireFormat | None = None
        # Partitions consumed again after UnusableRawValues: their records are delivered decoded
        # until the consumer is past this offset again.
        self._decode_until: dict[TopicPartition, int] = {}
        self._read_committed = str(self._consumer_config.get("isolation.level", "")).lower() == "read_committed"
        self._tracer = batch_tracer(task_id, "sink")  # None unless tracing is configured

    # -- lifecycle --------------------------------------------------------------------------------

    def _initialize(self) -> None:
        config = dict(self._consumer_config)
        config["error_cb"] = self._on_client_error
        self._watch_kafka(config)
        try:
            self._consumer = Consumer(config)
        except KafkaException as exc:
            raise ConnectError(f"Invalid consumer configuration: {exc.args[0].str()}") from exc
        if self.dlq is not None:
            self.dlq.start()
        self.task.start(self.task_config, SinkTaskContextImpl(self))
        self._raw = self._takes_raw_values()
        subscription = list(self._topics)
        if self._topics_regex:
            # librdkafka treats a leading ^ as a regex; Connect's topics.regex must match the whole name.
            subscription = [f"^(?:{self._topics_regex})$"]
            re.compile(self._topics_regex)
        self._consumer.subscribe(
            subscription, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        self._next_commit = time.monotonic() + self._flush_interval_s

    def _takes_raw_values(self) -> bool:
        """Whether batches carry raw values (see :meth:`_raw_values_format`, kept for the batches)."""
        self._raw_format = self._raw_values_format()
        return self._raw_format is not None

    def _raw_values_format(self) -> WireFormat | None:
        """The converter's wire format when batches carry raw values (``None``: they do not): the
        task asked (after its start()), no transform reads the values, and the value converter's
        bytes are what the task asked for."""
        wanted = ValueFormat(self.task.value_format)
        if wanted is ValueFormat.CONNECT or self._transform is not None:
            return None
        wire = self._value_converter.wire_format()
        if wanted is ValueFormat.RAW_BYTES or wire.schemaless_json:
            return wire
        if wanted is ValueFormat.RAW_TYPED and (
            (wire.kind == "json" and wire.decimal_format == "BASE64") or wire.kind == "avro"
        ):
            return wire
        return None

    def _on_kafka_stats(self, stats_json: str) -> None:
        """Also the consumer lag for ``GET /metrics`` (once per statistics interval, not per batch)."""
        super()._on_kafka_stats(stats_json)
        if self._target is TargetState.PAUSED:
            return  # paused partitions are not fetched, so their ends go stale: _while_paused asks
        try:
            stats = orjson.loads(stats_json)
        except orjson.JSONDecodeError:
            return
        positions = {(tp.topic, tp.partition): offset for tp, offset in self._consumed.items()}
        self.metrics.lag = consumer_lag(stats, positions, self._read_committed, self._consumed_ts)

    def _on_client_error(self, err: KafkaError) -> None:
        if not self._kafka_unreachable(err):
            log.warning("Kafka consumer: %s", err.str())

    def _close(self) -> None:
        consumer = self._consumer
        if consumer is None:
            return
        try:
            if self.assignment:
                if not self.failed:
                    self._commit(sorted(self.assignment))
                self.task.close(sorted(self.assignment))
        finally:
            # Leaving the group revokes the partitions again; they are committed and closed already.
            self._closing = True
            self.assignment = set()
            try:
                consumer.close()
            finally:
                self._consumer = None
                try:
                    self.task.stop()
                finally:
                    if self.dlq is not None:
                        self.dlq.close()

    # -- rebalance callbacks (run inside consumer.consume on the task thread) ----------------------

    def _on_assign(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        self._assign_from_committed(consumer, partitions)
        tps = [TopicPartition(p.topic, p.partition) for p in partitions]
        self.assignment.update(tps)
        self.metrics.partitions = len(self.assignment)
        log.info("Assigned partitions %s", ", ".join(f"{t.topic}-{t.partition}" for t in tps))
        self.task.open(tps)

    def _on_revoke(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        tps = [TopicPartition(p.topic, p.partition) for p in partitions]
        if not tps or self._closing:
            return
        try:
            self._commit(tps)
        finally:
            self.task.close(tps)
            for tp in tps:
                self.assignment.discard(tp)
                self._consumed.pop(tp, None)
                self._consumed_ts.pop(tp, None)
                self._committed.pop(tp, None)
                self._decode_until.pop(tp, None)
            self.metrics.partitions = len(self.assignment)

    def _on_lost(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        tps = [TopicPartition(p.topic, p.partition) for p in partitions]
        if self._closing:
            return
        log.warning("Partitions lost without a clean revoke: %s", tps)
        self.task.close(tps)
        for tp in tps:
            self.assignment.discard(tp)
            self._consumed.pop(tp, None)
            self._consumed_ts.pop(tp, None)
            self._decode_until.pop(tp, None)
        self.metrics.partitions = len(self.assignment)

    # -- task context support ---------------------------------------------------------------------

    def pause_partitions(self, partitions: Sequence[TopicPartition]) -> None:
        self._paused_by_task.update(partitions)
        if self._consumer is not None and partitions:
            self._consumer.pause([KafkaTopicPartition(t.topic, t.partition) for t in partitions])

    def resume_partitions(self, partitions: Sequence[TopicPartition]) -> None:
        self._paused_by_task.difference_update(partitions)
        if self._consumer is not None and partitions:
            self._consumer.resume([KafkaTopicPartition(t.topic, t.partition) for t in partitions])

    # -- pause ------------------------------------------------------------------------------------

    def _on_paused(self) -> None:
        if self._consumer is not None and self.assignment:
            self._consumer.pause([KafkaTopicPartition(t.topic, t.partition) for t in self.assignment])

    def _while_paused(self) -> None:
        # Keep calling the consumer so the group does not evict us (max.poll.interval.ms).
        if self._consumer is not None:
            self._consumer.consume(num_messages=1, timeout=0)
            self._paused_lag(self._consumer)

    def _on_resumed(self) -> None:
        if self._consumer is not None:
            active = self.assignment - self._paused_by_task
            if active:
                self._consumer.resume([KafkaTopicPartition(t.topic, t.partition) for t in active])

    # -- main loop --------------------------------------------------------------------------------

    def _execute(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        tracer = self._tracer
        while not self.stopping:
            if not self._await_unpaused():
                break
            self._apply_rewinds()
            if tracer is not None:
                self._consume_traced(consumer, tracer)
                continue
            messages = consumer.consume(num_messages=self._batch_size, timeout=0.5)
            if messages:
                self.outages.reached(self._kafka)  # fetched: Kafka answers
                self._deliver(messages)
            if self.commit_requested or time.monotonic() >= self._next_commit:
                self._commit(sorted(self.assignment))

    def _consume_traced(self, consumer: Consumer, tracer: BatchTracer) -> None:
        """One turn of :meth:`_execute`'s loop with each step timed for the batch's trace."""
        started = time.time_ns()
        messages = consumer.consume(num_messages=self._batch_size, timeout=0.5)
        if messages:
            self.outages.reached(self._kafka)  # fetched: Kafka answers
            good = self._usable(messages)
            if good:
                consumed = time.time_ns()
                batches = self._converted(good)
                attributes = sink_attributes(good, self._consumed, len(self.assignment))
                converted = time.time_ns()
                self._put_all(good, batches)
                steps: list[Step] = [
                    ("consume", consumed, None),
                    ("convert", converted, None),
                    ("put", time.time_ns(), None),
                ]
                tracer.record(started, steps, attributes)
        if self.commit_requested or time.monotonic() >= self._next_commit:
            begun = time.time_ns()
            committed = self._commit(sorted(self.assignment))
            if committed:
                tracer.commit(begun, time.time_ns(), commit_attributes(committed))

    def _deliver(self, messages: list[Any]) -> None:
        """Steps 2-4 for what one ``consume()`` returned."""
        good = self._usable(messages)
        if good:
            self._put_all(good, self._converted(good))

    def _usable(self, messages: list[Any]) -> list[Any]:
        """The messages without an error; an error other than the end of a partition or a missing
        topic fails the task."""
        good = [m for m in messages if m.error() is None]
        if len(good) != len(messages):
            for m in messages:
                err = m.error()
                if err is None or err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.code() in _MISSING_TOPIC and not err.fatal():
                    self._topic_missing(m.topic(), err)
                    continue
                where = f"topic {m.topic()!r} partition {m.partition()}"
                raise self.retry.unrecoverable(
                    Stage.KAFKA_CONSUME, "confluent_kafka.Consumer", KafkaException(err), where
                )
        return good

    def _converted(self, good: list[Any]) -> list[tuple[SinkRecordBatch, list[Any]]]:
        """Steps 2 and 3: batches of one topic each, with the messages they came from."""
        self._track_consumed(good)
        try:
            batches = self._convert(good)
            if self._transform is not None:
                batches = self._transformed(batches)
        except Exception:
            # Only now go record by record, to isolate the bad record(s) of this poll.
            batches = _batches(self._convert_each(good), good)
        return batches

    def _put_all(self, good: list[Any], batches: list[tuple[SinkRecordBatch, list[Any]]]) -> None:
        """Step 4 for every batch of one ``consume()``."""
        started, put_before = time.monotonic(), self.records_put
        for batch, consumed in batches:
            if self._rewinds and _rewound(batch, self._rewinds):
                continue  # given back by UnusableRawValues: consumed again, decoded
            self._messages = consumed  # where a refused record's consumed bytes are found
            try:
                self._put_recovering(batch)
            except UnusableRawValues as unusable:
                self._give_back(unusable, consumed)
            finally:
                self._messages = []
        self.metrics.batch(len(good), self.records_put - put_before, time.monotonic() - started)

    def _transformed(self, batches: list[tuple[SinkRecordBatch, list[Any]]]) -> list[tuple[SinkRecordBatch, list[Any]]]:
        """Step 3: a batch a transform turned into records of several topics is put per topic."""
        transform = self._transform
        assert transform is not None
        out: list[tuple[SinkRecordBatch, list[Any]]] = []
        for batch, consumed in batches:
            result = transform(batch)
            if isinstance(result, SinkRecordBatch):
                out.append((result, consumed))
            elif result:
                out.extend(_batches(result, consumed))
        return out

    def _convert(self, messages: list[Any]) -> list[tuple[SinkRecordBatch, list[Any]]]:
        """Step 2, one batch per topic: keys and values are converted now, as whole columns (or
        the values are handed over raw, see :meth:`_takes_raw_values`); the other columns (and
        record objects) only if the task or a transform asks for them."""
        topic = messages[0].topic()
        if not self._one_topic and not _one_topic(messages, topic):
            by_topic: dict[str, list[Any]] = {}
            for m in messages:
                by_topic.setdefault(m.topic(), []).append(m)
            return [pair for group in by_topic.values() for pair in self._convert(group)]
        raws = [m.value() for m in messages]
        raw = self._raw and not (self._decode_until and self._decoding(messages))
        values: list[Any] | None = None
        value_schemas: list[Any] | None = None
        try:
            key_schemas, keys = self._key_converter.to_connect_batch(topic, [m.key() for m in messages])
            if not raw:
                value_schemas, values = self._value_converter.to_connect_batch(topic, raws)
        except DataError as exc:
            raise DataError(f"Converter failed on a record of topic {topic!r}: {exc}") from exc
        batch = SinkRecordBatch(
            topic,
            values,
            value_schemas,
            keys,
            key_schemas,
            partial(self._column, topic, messages),
            raw_values=raws if raw else None,
            decode=partial(self._value_converter.to_connect_batch, topic, raws) if raw else None,
            raw_format=self._raw_format if raw else None,
            writer_schema=self._value_converter.writer_schema if raw else None,
        )
        return [(batch, messages)]

    def _column(self, topic: str, messages: list[Any], column: str) -> list[Any]:
        """A batch's column other than keys and values, from the consumed messages."""
        if column == "partition":
            return [m.partition() for m in messages]
        if column == "kafka_offset":
            return [m.offset() for m in messages]
        if column == "timestamp":
            return [ts if kind else None for kind, ts in (m.timestamp() for m in messages)]
        if column == "timestamp_type":
            return [m.timestamp()[0] for m in messages]
        if column == "headers":
            convert_headers = self._convert_headers
            return [convert_headers(topic, h) if h else None for h in (m.headers() for m in messages)]
        raise KeyError(column)

    # -- offsets ----------------------------------------------------------------------------------


def _one_topic(messages: list[Any], topic: str) -> bool:
    """Whether every message is of ``topic``: a list and a count, a third of a generator's cost."""
    topics = [m.topic() for m in messages]
    return topics.count(topic) == len(topics)
