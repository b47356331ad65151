"""Sink runner: what happens when records cannot be used — ``put()`` retried while it raises a
``RetriableError``, a batch ``put()`` refused split until the bad records are found, conversion and
transformation record by record under ``errors.*``, and the dead letter queue (KIP-610 included)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from confluent_kafka import Consumer, KafkaError
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
from sluice.worker.runners.base import WorkerTask

log = logging.getLogger(__name__)

Transform = Callable[[Sequence[SinkRecord]], Sequence[SinkRecord]]


class SinkErrantRecordReporter:
    """KIP-610: a record ``put()`` could not write goes to the DLQ (re-serialised with the task's
    converters, with context headers); ``errors.tolerance=none`` then fails the task."""

    def __init__(self, runner: SinkErrorHandling) -> None:
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


class SinkErrorHandling(WorkerTask):
    """``put()`` with its retries, and the failure paths of :class:`~worker.runners.sink.SinkTaskRunner`
    (a base class of it; the attributes below are the runner's). Only ``_put`` runs on every batch;
    the rest only once something failed."""

    task: SinkTask
    errors: ErrorHandlingConfig
    dlq: DeadLetterQueue | None
    retry: RetryWithTolerance
    errant_record_reporter: ErrantRecordReporter | None
    assignment: set[TopicPartition]
    records_put: int
    _consumer: Consumer | None
    _key_converter: Converter
    _value_converter: Converter
    _header_converter: HeaderConverter
    _transform: Transform | None
    _paused_by_task: set[TopicPartition]
    _messages: list[Any]
    _failed_message: Any
    _missing_topics: set[str]
    _sink_system: str

    def _init_error_handling(
        self, errors: ErrorHandlingConfig | None, dlq: DeadLetterQueue | None, reporter: ErrantRecordReporter | None
    ) -> None:
        self.errors = errors if errors is not None else ErrorHandlingConfig()
        self.dlq = dlq
        self.retry = RetryWithTolerance(self.errors, reporter=self._report_failed_message, stop_event=self._stopping, task_id=self.id, dlq=dlq)
        if reporter is None and (dlq is not None or self.errors.wants_reporter):
            reporter = SinkErrantRecordReporter(self)
        self.errant_record_reporter = reporter
        self._failed_message = None
        self._messages = []  # the consumed messages of the batch being delivered
        self._missing_topics = set()  # subscribed topics reported missing (warned once each)
        self._sink_system = f"the system {type(self.task).__name__} writes to"

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

    def _convert_headers(self, topic: str, headers: list[tuple[str, bytes | None]]) -> tuple[tuple[str, Any], ...]:
        convert = self._header_converter.to_connect_header
        return tuple((k, convert(topic, k, v).value) for k, v in headers)

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


def _batches(records: Sequence[SinkRecord], consumed: list[Any]) -> list[tuple[SinkRecordBatch, list[Any]]]:
    """``records`` as batches of one topic each, with the ``consumed`` messages they came from."""
    return [(batch, consumed) for batch in SinkRecordBatch.group(records)]


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
