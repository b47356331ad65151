"""Drives a :class:`~connectors.api.SinkTask`: consume → convert → transform → put → commit."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sluice.connectors.api import (
    ConnectError,
    Converter,
    DataError,
    ErrantRecordReporter,
    HeaderConverter,
    RetriableError,
    SinkRecord,
    SinkRecordBatch,
    SinkTask,
    TopicPartition,
    UnusableRawValues,
    UnwritableRecordError,
    ValueFormat,
)
from sluice.worker.errors import (
    SKIPPED,
    DeadLetterQueue,
    ErrorContext,
    ErrorHandlingConfig,
    RetryWithTolerance,
    Stage,
    ToleranceExceeded,
    context_headers,
    transform_each,
)
from sluice.worker.outages import DEFAULT_DEGRADED_AFTER_MS
from sluice.worker.runners.base import TaskStatusListener, WorkerTask
from sluice.worker.status import ConnectorTaskId, TargetState
from sluice.worker.task_metrics import consumer_lag

log = logging.getLogger(__name__)

Transform = Callable[[Sequence[SinkRecord]], Sequence[SinkRecord]]


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


class SinkErrantRecordReporter:
    """KIP-610: a record ``put()`` could not write goes to the DLQ (re-serialised with the task's
    converters, with context headers); ``errors.tolerance=none`` then fails the task."""

    def __init__(self, runner: SinkTaskRunner) -> None:
        self._runner = runner

    def report(self, record: SinkRecord, error: BaseException) -> None:
        runner = self._runner
        tp = record.topic_partition
        offset = record.original_offset if record.original_offset is not None else record.kafka_offset
        ctx = ErrorContext(
            Stage.TASK_PUT,
            f"{type(runner.task).__module__}.{type(runner.task).__qualname__}",
            error,
            f"topic {tp.topic!r} partition {tp.partition} offset {offset}",
            record,
        )
        dlq = runner.dlq
        if dlq is not None:
            message = runner.consumed_message(record)
            if message is not None:  # as Connect does: the bytes as they were consumed
                key, value, headers = message.key(), message.value(), list(message.headers() or [])
            else:
                key, value, headers = runner.serialise(record)
            if runner.errors.dlq_context_headers:
                headers = headers + context_headers(ctx, runner.id.connector, runner.id.task, tp.topic, tp.partition, offset)
            dlq.send(key, value, headers)
        runner.retry.fail(ctx, report=False)


class SinkTaskRunner(WorkerTask):
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
    ) -> None:
        super().__init__(task_id, listener, initial_state, degraded_after_ms=degraded_after_ms)
        self.task = task
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
        self.errors = errors if errors is not None else ErrorHandlingConfig()
        self.dlq = dlq
        self.retry = RetryWithTolerance(self.errors, reporter=self._report_failed_message, stop_event=self._stopping, task_id=task_id, dlq=dlq)
        if errant_record_reporter is None and (dlq is not None or self.errors.wants_reporter):
            errant_record_reporter = SinkErrantRecordReporter(self)
        self.errant_record_reporter = errant_record_reporter
        self._consumer: Consumer | None = None
        self.assignment: set[TopicPartition] = set()
        self._paused_by_task: set[TopicPartition] = set()
        self._consumed: dict[TopicPartition, int] = {}  # next offset to consume, per partition
        self._committed: dict[TopicPartition, int] = {}
        self._rewinds: dict[TopicPartition, int] = {}
        self.commit_requested = False
        self._closing = False
        self._next_commit = 0.0
        self.records_put = 0
        self._failed_message: Any = None
        self._messages: list[Any] = []  # the consumed messages of the batch being delivered
        # Raw values for a task that asks for them (SinkTask.value_format, read after its start()).
        self._raw = False
        # Partitions consumed again after UnusableRawValues: their records are delivered decoded
        # until the consumer is past this offset again.
        self._decode_until: dict[TopicPartition, int] = {}
        self._missing_topics: set[str] = set()  # subscribed topics reported missing (warned once each)
        self._sink_system = f"the system {type(task).__name__} writes to"
        self._read_committed = str(self._consumer_config.get("isolation.level", "")).lower() == "read_committed"

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
        """Whether batches carry raw values: the task asked (after its start()), no transform reads
        the values, and the value converter's bytes are what the task asked for."""
        wanted = ValueFormat(self.task.value_format)
        if wanted is ValueFormat.CONNECT or self._transform is not None:
            return False
        return wanted is ValueFormat.RAW_BYTES or self._value_converter.wire_format().schemaless_json

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
        self.metrics.lag = consumer_lag(stats, positions, self._read_committed)

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

    def _assign_from_committed(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        """Assign ``partitions`` at their committed offsets, and one without a commit at the start or
        end that ``auto.offset.reset`` names, as the Java consumer starts.

        Left to itself librdkafka looks the committed offsets up too, but for a partition without
        one it waits 100 ms before asking for the reset position: every new sink connector started
        a tenth of a second late. Only for the eager assignment protocol (the cooperative one
        assigns incrementally); if the lookup fails, librdkafka does it its own way.
        """
        start = _RESET_TO.get(str(self._consumer_config.get("auto.offset.reset", "earliest")).lower())
        strategy = str(self._consumer_config.get("partition.assignment.strategy", ""))
        if start is None or "cooperative" in strategy or not partitions:
            return
        try:
            committed = consumer.committed(partitions, timeout=_COMMITTED_TIMEOUT_S)
        except KafkaException as exc:
            log.debug("Looking up the committed offsets failed (%s); the consumer does it itself", exc)
            return
        for p, c in zip(partitions, committed, strict=True):
            p.offset = c.offset if c.offset >= 0 and c.error is None else start
        consumer.assign(partitions)

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

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._rewinds.update(offsets)

    def _apply_rewinds(self) -> None:
        if not self._rewinds or self._consumer is None:
            return
        for tp, offset in self._rewinds.items():
            if tp in self.assignment:
                self._consumer.seek(KafkaTopicPartition(tp.topic, tp.partition, offset))
                self._consumed[tp] = offset
        self._rewinds.clear()

    # -- pause ------------------------------------------------------------------------------------

    def _on_paused(self) -> None:
        if self._consumer is not None and self.assignment:
            self._consumer.pause([KafkaTopicPartition(t.topic, t.partition) for t in self.assignment])

    def _while_paused(self) -> None:
        # Keep calling the consumer so the group does not evict us (max.poll.interval.ms).
        if self._consumer is not None:
            self._consumer.consume(num_messages=1, timeout=0)
            self._paused_lag(self._consumer)

    def _paused_lag(self, consumer: Consumer) -> None:
        """The lag of paused partitions, whose ends librdkafka's statistics no longer follow: ask
        the brokers (about once a second, only while the task is paused)."""
        lag = []
        for tp in sorted(self.assignment):
            position = self._consumed.get(tp, self._committed.get(tp))
            if position is None:
                continue
            try:
                _, end = consumer.get_watermark_offsets(KafkaTopicPartition(tp.topic, tp.partition), timeout=1.0, cached=False)
            except KafkaException:
                return  # keep the last figures; the next second asks again
            lag.append((tp.topic, tp.partition, max(0, end - position)))
        self.metrics.lag = lag

    def _on_resumed(self) -> None:
        if self._consumer is not None:
            active = self.assignment - self._paused_by_task
            if active:
                self._consumer.resume([KafkaTopicPartition(t.topic, t.partition) for t in active])

    # -- main loop --------------------------------------------------------------------------------

    def _execute(self) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not self.stopping:
            if not self._await_unpaused():
                break
            self._apply_rewinds()
            messages = consumer.consume(num_messages=self._batch_size, timeout=0.5)
            if messages:
                self.outages.reached(self._kafka)  # fetched: Kafka answers
                self._deliver(messages)
            if self.commit_requested or time.monotonic() >= self._next_commit:
                self._commit(sorted(self.assignment))

    def _deliver(self, messages: list[Any]) -> None:
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
                raise self.retry.unrecoverable(Stage.KAFKA_CONSUME, "confluent_kafka.Consumer", KafkaException(err), where)
        if not good:
            return
        self._track_consumed(good)
        try:
            batches = self._convert(good)
            if self._transform is not None:
                batches = self._transformed(batches)
        except Exception:
            # Only now go record by record, to isolate the bad record(s) of this poll.
            batches = _batches(self._convert_each(good), good)
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

    def _give_back(self, unusable: UnusableRawValues, consumed: list[Any]) -> None:
        """``put`` could not use raw values from ``unusable.offsets`` on. When those are all in the
        batch at hand, put them again decoded now; otherwise (a task that wrote earlier batches
        in the background) consume them again (:meth:`_redeliver_decoded`)."""
        first: dict[TopicPartition, int] = {}
        for m in consumed:
            first.setdefault(TopicPartition(m.topic(), m.partition()), m.offset())
        if any(tp not in first or offset < first[tp] for tp, offset in unusable.offsets.items()):
            self._redeliver_decoded(unusable)
            return
        self._log_give_back(unusable, "delivering them again, decoded")
        offsets = unusable.offsets
        again = [m for m in consumed if m.offset() >= offsets.get(TopicPartition(m.topic(), m.partition()), 1 << 62)]
        self._messages = again
        try:
            for part, _ in _batches(self._convert_each(again), again):
                self._put_recovering(part)
        except UnusableRawValues as earlier:  # about records of an earlier put after all
            self._redeliver_decoded(earlier)

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

    def _redeliver_decoded(self, unusable: UnusableRawValues) -> None:
        """The task could not use raw values from ``unusable.offsets`` on: consume those partitions
        again from there and deliver the records decoded (record by record where conversion fails,
        under ``errors.*``) until past what had been consumed; commits stop there meanwhile."""
        for tp, offset in unusable.offsets.items():
            if tp not in self.assignment:
                continue
            consumed = self._consumed.get(tp, offset)
            self._decode_until[tp] = max(consumed, self._decode_until.get(tp, 0))
            self._rewinds[tp] = min(offset, self._rewinds.get(tp, offset))
            self._consumed[tp] = min(offset, consumed)
        self._log_give_back(unusable, "consuming them again, decoded")

    def _log_give_back(self, unusable: UnusableRawValues, then: str) -> None:
        where = ", ".join(f"{tp.topic}-{tp.partition} from offset {o}" for tp, o in sorted(unusable.offsets.items()))
        log.warning("%s could not use the raw values of %s (%s): %s", type(self.task).__name__, where, unusable, then)

    def _topic_missing(self, topic: str | None, err: KafkaError) -> None:
        """A subscribed topic that does not exist (yet): wait for it, as Connect's consumer does.

        A sink is often started before the source that creates its topic; the consumer picks the
        topic up once it appears (librdkafka re-reads the metadata of missing subscribed topics
        every few seconds). A misspelled name stays RUNNING with nothing consumed, and this warning.
        """
        name = topic or "?"
        if name not in self._missing_topics:
            self._missing_topics.add(name)
            log.warning("Topic %r does not exist (yet); waiting for it to be created: %s", name, err.str())

    def _convert_each(self, messages: list[Any]) -> list[SinkRecord]:
        """Steps 2 and 3 one record at a time, under ``errors.*``: a record that fails is skipped
        (and sent to the DLQ) with ``errors.tolerance=all``, or fails the task."""
        execute = self.retry.execute
        kc, vc, transform = self._key_converter, self._value_converter, self._transform
        kname, vname, hname = _class_name(kc), _class_name(vc), _class_name(self._header_converter)
        out: list[SinkRecord] = []
        for m in messages:
            topic = m.topic()
            where = f"topic {topic!r} partition {m.partition()} offset {m.offset()}"
            key = execute(Stage.KEY_CONVERTER, partial(kc.to_connect_batch, topic, [m.key()]), class_name=kname, coordinates=where, record=m)
            if key is SKIPPED:
                continue
            value = execute(Stage.VALUE_CONVERTER, partial(vc.to_connect_batch, topic, [m.value()]), class_name=vname, coordinates=where, record=m)
            if value is SKIPPED:
                continue
            raw_headers = m.headers()
            headers = None
            if raw_headers:
                headers = execute(Stage.HEADER_CONVERTER, partial(self._convert_headers, topic, raw_headers), class_name=hname, coordinates=where, record=m)
                if headers is SKIPPED:
                    continue
            ts_type, ts = m.timestamp()
            record = SinkRecord(
                topic, m.partition(), m.offset(), value[1][0], value[0][0], key[1][0], key[0][0],
                ts if ts_type else None, ts_type, headers,
            )
            if transform is None:
                out.append(record)
                continue
            self._failed_message = m
            try:
                result = transform_each(transform, record, self.retry, where)
            finally:
                self._failed_message = None
            if result is not SKIPPED:
                out.extend(result)
        return out

    def _report_failed_message(self, ctx: ErrorContext) -> None:
        """A tolerated failure: the original consumed bytes go to the DLQ (Connect semantics)."""
        dlq = self.dlq
        if dlq is None:
            return
        m = ctx.record if ctx.stage is not Stage.TRANSFORMATION else self._failed_message
        if m is None:
            return
        headers = list(m.headers() or [])
        if self.errors.dlq_context_headers:
            headers += context_headers(ctx, self.id.connector, self.id.task, m.topic(), m.partition(), m.offset())
        dlq.send(m.key(), m.value(), headers)

    def serialise(self, record: SinkRecord) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """``record`` as bytes again, with the task's converters (for the errant record reporter)."""
        topic = record.topic_partition.topic
        try:
            key = self._key_converter.from_connect_data(topic, record.key_schema, record.key)
            value = self._value_converter.from_connect_data(topic, record.value_schema, record.value)
            convert = self._header_converter.from_connect_header
            headers = [(k, convert(topic, k, None, v)) for k, v in record.headers or ()]
        except Exception as exc:  # the reporter must not fail on a record it cannot serialise
            log.warning("Could not serialise a reported record for the dead letter queue: %s", exc)
            return None, repr(record.value).encode(), []
        return key, value, headers

    def _track_consumed(self, messages: list[Any]) -> None:
        """Remember the next offset of each partition in the batch.

        Messages of one partition arrive in offset order, so scanning from the end finds each
        partition's last offset; with one assigned partition that is a single step.
        """
        consumed = self._consumed
        distinct = max(1, len(self.assignment))
        seen: set[tuple[str, int]] = set()
        for m in reversed(messages):
            tp = (m.topic(), m.partition())
            if tp not in seen:
                seen.add(tp)
                self.active_topics.add(tp[0])
                consumed[TopicPartition(*tp)] = m.offset() + 1
                if len(seen) >= distinct:
                    break

    def _put(self, records: SinkRecordBatch) -> None:
        backoff = 0.1
        paused = False
        try:
            while True:
                try:
                    self.task.put(records)
                    self.records_put += len(records)
                    self.outages.reached(self._sink_system)
                    return
                except RetriableError as exc:
                    self.retry.total_retries += 1
                    if self.stopping:
                        raise ConnectError("Task stopped while retrying put()") from exc
                    # Logged by the tracker: when the outage starts, in summaries, and when it ends.
                    log.debug("put() failed with a retriable error, retrying in %.1fs: %s", backoff, exc)
                    self._system_unreachable(self._sink_system, exc)
                    if not paused and self._consumer is not None and self.assignment:
                        self._consumer.pause([KafkaTopicPartition(t.topic, t.partition) for t in self.assignment])
                        paused = True
                    self._stopping.wait(backoff)
                    if self._consumer is not None:
                        self._consumer.consume(num_messages=1, timeout=0)
                    backoff = min(backoff * 2, 10.0)
                except (ToleranceExceeded, UnusableRawValues):
                    raise  # the errant record reporter failed the task already; the runtime redelivers
                except Exception as exc:
                    if isinstance(exc, DataError):
                        raise _Refused(exc) from exc  # nothing of the batch was written (SinkTask.put)
                    raise self.retry.unrecoverable(Stage.TASK_PUT, _class_name(self.task), exc) from exc
        finally:
            if paused and self._consumer is not None:
                active = self.assignment - self._paused_by_task
                if active:
                    self._consumer.resume([KafkaTopicPartition(t.topic, t.partition) for t in active])

    def _put_recovering(self, batch: SinkRecordBatch) -> None:
        """Step 4: :meth:`_put`, recovering from refusals. A batch with raw values that the task
        refuses is converted record by record first (the refusal may be about the raw form)."""
        if not len(batch):
            return
        try:
            self._put(batch)
        except _Refused as refused:
            records = self._convert_each(self._messages) if batch.raw_values is not None else list(batch)
            self._recover(records, refused.error)

    def _recover(self, records: list[SinkRecord], error: DataError) -> None:
        """``put()`` refused ``records`` on a record's data, having written none of them
        (:meth:`SinkTask.put`). Apply ``errors.*`` to each bad record (:meth:`_refuse`) and put the
        good ones again, in order: the record an :class:`UnwritableRecordError` names is taken out;
        otherwise the batch is offered in halves until the refused part is a single record. Only
        this failure path costs a ``put()`` per part; ``errors.tolerance=none`` ends it at the
        first bad record, with nothing after it written."""
        refused: set[tuple[str, int, int]] = set()
        todo: list[tuple[list[SinkRecord], DataError | None]] = [(records, error)]  # None: not put yet
        while todo:
            part, failure = todo.pop()
            if failure is None:
                try:
                    self._put(SinkRecordBatch.of(part))
                    continue
                except _Refused as again:
                    failure = again.error
            named = failure.record if isinstance(failure, UnwritableRecordError) else None
            if named is not None:
                where = _coordinates(named)
                if where in refused:
                    raise self.retry.unrecoverable(Stage.TASK_PUT, _class_name(self.task), failure) from failure
                refused.add(where)
                self._refuse(named, failure)
                parts = [[r for r in part if _coordinates(r) != where]]
            elif len(part) == 1:
                self._refuse(part[0], failure)
                parts = []
            else:
                middle = len(part) // 2
                parts = [part[:middle], part[middle:]]
            todo.extend((piece, None) for piece in reversed(parts) if piece)

    def _refuse(self, record: SinkRecord, error: BaseException) -> None:
        """A record ``put()`` cannot write: dead-lettered, logged and skipped, or the task fails."""
        reporter = self.errant_record_reporter
        if not isinstance(reporter, SinkErrantRecordReporter):
            reporter = SinkErrantRecordReporter(self)
        reporter.report(record, error)

    def consumed_message(self, record: SinkRecord) -> Any:
        """The consumed message ``record`` came from, if it is of the batch being delivered."""
        topic, partition, offset = _coordinates(record)
        for m in self._messages:
            if m.offset() == offset and m.partition() == partition and m.topic() == topic:
                return m
        return None

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
        )
        return [(batch, messages)]

    def _decoding(self, messages: list[Any]) -> bool:
        """Whether ``messages`` reach into a range given back by UnusableRawValues (delivered
        decoded); ranges the consumer has passed are forgotten."""
        until = self._decode_until
        inside = False
        for m in messages:
            tp = TopicPartition(m.topic(), m.partition())
            end = until.get(tp)
            if end is None:
                continue
            if m.offset() < end:
                inside = True
            elif m.offset() + 1 >= end:
                del until[tp]
        return inside

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

    def _convert_headers(self, topic: str, headers: list[tuple[str, bytes | None]]) -> tuple[tuple[str, Any], ...]:
        convert = self._header_converter.to_connect_header
        return tuple((k, convert(topic, k, v).value) for k, v in headers)

    # -- offsets ----------------------------------------------------------------------------------

    def _commit(self, partitions: Sequence[TopicPartition]) -> None:
        """Steps 5 and 6: ask the task what is durable and commit exactly that."""
        self.commit_requested = False
        self._next_commit = time.monotonic() + self._flush_interval_s
        consumer = self._consumer
        if consumer is None or not partitions:
            return
        current = {tp: self._consumed[tp] for tp in partitions if tp in self._consumed}
        if not current:
            return
        try:
            safe = self.task.pre_commit(current)
        except UnusableRawValues as unusable:
            self._redeliver_decoded(unusable)  # nothing is committed past what is consumed again
            return
        to_commit = [
            KafkaTopicPartition(tp.topic, tp.partition, offset)
            for tp, offset in safe.items()
            if tp in current and self._committed.get(tp) != offset
        ]
        if not to_commit:
            self.metrics.committed(True, 0.0, skipped=True)
            return
        started = time.monotonic()
        # Skipped and reported records covered by these offsets must be in the DLQ first.
        if self.dlq is not None and not self.dlq.flush(30.0):
            log.warning("Dead letter queue records still pending; offsets not committed this time")
            self.metrics.committed(False, time.monotonic() - started)
            return
        try:
            consumer.commit(offsets=to_commit, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError._NO_OFFSET:
                return
            # A failed commit only means more duplicates after a crash; the next interval retries.
            log.warning("Offset commit failed: %s", err.str())
            self.metrics.committed(False, time.monotonic() - started)
            return
        for tp in to_commit:
            self._committed[TopicPartition(tp.topic, tp.partition)] = tp.offset
        self.metrics.committed(True, time.monotonic() - started)


#: ``auto.offset.reset`` → where a partition without a committed offset starts (others: librdkafka decides).
_RESET_TO = {
    "earliest": OFFSET_BEGINNING,
    "smallest": OFFSET_BEGINNING,
    "beginning": OFFSET_BEGINNING,
    "latest": OFFSET_END,
    "largest": OFFSET_END,
    "end": OFFSET_END,
}
_COMMITTED_TIMEOUT_S = 10.0


def _one_topic(messages: list[Any], topic: str) -> bool:
    """Whether every message is of ``topic``: a list and a count, a third of a generator's cost."""
    topics = [m.topic() for m in messages]
    return topics.count(topic) == len(topics)


def _batches(records: Sequence[SinkRecord], consumed: list[Any]) -> list[tuple[SinkRecordBatch, list[Any]]]:
    """``records`` as batches of one topic each, with the ``consumed`` messages they came from."""
    return [(batch, consumed) for batch in SinkRecordBatch.group(records)]


def _rewound(batch: SinkRecordBatch, rewinds: Mapping[TopicPartition, int]) -> bool:
    """Whether ``batch`` holds records of a partition about to be consumed again."""
    topic = batch.original_topic
    return any(TopicPartition(topic, p) in rewinds for p in set(batch.partitions))


def _class_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _coordinates(record: SinkRecord) -> tuple[str, int, int]:
    """Where ``record`` was consumed (before any renaming transform)."""
    tp = record.topic_partition
    return tp.topic, tp.partition, record.original_offset if record.original_offset is not None else record.kafka_offset


class _Refused(Exception):
    """``put()`` raised a :class:`DataError`: the batch was not written, :meth:`SinkTaskRunner._recover` it."""

    def __init__(self, error: DataError) -> None:
        super().__init__(str(error))
        self.error = error


