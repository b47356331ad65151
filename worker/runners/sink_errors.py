"""Sink runner: what happens when records cannot be used — a batch ``put()`` refused split until
the bad records are found, conversion and transformation record by record under ``errors.*``, and
the dead letter queue (KIP-610 included). The runner's collaborator :class:`SinkFailures`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

from confluent_kafka import KafkaError

from sluice.connectors.api import (
    DataError,
    ErrantRecordReporter,
    SinkRecord,
    SinkRecordBatch,
    SinkTask,
    UnwritableRecordError,
    WireFormat,
)
from sluice.worker.errors import (
    SKIPPED,
    DeadLetterQueue,
    ErrorContext,
    ErrorHandlingConfig,
    RetryWithTolerance,
    Stage,
    context_headers,
    transform_each,
)
from sluice.worker.runners.sink_batches import SinkBatchBuilder
from sluice.worker.status import ConnectorTaskId

log = logging.getLogger(__name__)


class Transform(Protocol):
    """The connector's transform chain as the sink runner uses it
    (:class:`~sluice.worker.execution.transform_chain.TransformChain`)."""

    def __call__(self, records: Sequence[SinkRecord]) -> Sequence[SinkRecord]:
        """The transformed records; a consumed batch may come back as a batch."""
        ...

    def keeps_raw_values(self, wire: WireFormat) -> bool:
        """Whether a batch with raw values in ``wire``'s format keeps them through the chain
        (:meth:`~connectors.api.Transformation.keeps_raw_values` of every step)."""
        ...


class SinkErrantRecordReporter:
    """KIP-610: a record ``put()`` could not write goes to the DLQ (re-serialised with the task's
    converters, with context headers); ``errors.tolerance=none`` then fails the task."""

    def __init__(self, failures: SinkFailures) -> None:
        self._failures = failures

    def report(self, record: SinkRecord, error: BaseException) -> None:
        failures = self._failures
        tp = record.topic_partition
        offset = record.original_offset if record.original_offset is not None else record.kafka_offset
        where = f"topic {tp.topic!r} partition {tp.partition} offset {offset}"
        ctx = ErrorContext(Stage.TASK_PUT, failures.task_class, error, where, record)
        dlq = failures.dlq
        if dlq is not None:
            message = failures.consumed_message(record)
            if message is not None:  # as Connect does: the bytes as they were consumed
                key, value, headers = message.key(), message.value(), list(message.headers() or [])
            else:
                key, value, headers = failures.serialise(record)
            if failures.errors.dlq_context_headers:
                task_id = failures.task_id
                headers = headers + context_headers(
                    ctx, task_id.connector, task_id.task, tp.topic, tp.partition, offset
                )
            dlq.send(key, value, headers)
        failures.retry.fail(ctx, report=False)


class SinkFailures:
    """The failure paths of :class:`~worker.runners.sink.SinkTaskRunner`, one of its collaborators:
    conversion and transformation record by record under ``errors.*``, a batch ``put()`` refused
    split until the bad records are found, and the dead letter queue (KIP-610 included).

    It owns the task's retry and tolerance operator (:attr:`retry`, whose tolerated failures it
    sends to the DLQ). Nothing here runs while batches go through. Runner thread only.
    """

    def __init__(
        self,
        task_id: ConnectorTaskId,
        task: SinkTask,
        batches: SinkBatchBuilder,
        transform: Transform | None,
        *,
        errors: ErrorHandlingConfig,
        dlq: DeadLetterQueue | None,
        reporter: ErrantRecordReporter | None,
        stop_event: threading.Event,
    ) -> None:
        self.task_id = task_id
        self.task_class = class_name(task)
        self.errors = errors
        self.dlq = dlq
        self._batches = batches
        self._transform = transform
        #: The retry and tolerance operator (Connect's ``RetryWithToleranceOperator``).
        self.retry = RetryWithTolerance(
            errors, reporter=self._report_failed_message, stop_event=stop_event, task_id=task_id, dlq=dlq
        )
        if reporter is None and (dlq is not None or errors.wants_reporter):
            reporter = SinkErrantRecordReporter(self)
        #: What the task's context offers (``None`` without error handling, as in Connect).
        self.errant_record_reporter = reporter
        #: The consumed messages of the batch being delivered (where a refused record's bytes are found).
        self.messages: list[Any] = []
        self._failed_message: Any = None
        self._missing_topics: set[str] = set()  # subscribed topics reported missing (warned once each)

    def recover(self, records: list[SinkRecord], error: DataError, put: Callable[[SinkRecordBatch], None]) -> None:
        """``put()`` refused ``records`` on a record's data, having written none of them
        (:meth:`SinkTask.put`). Apply ``errors.*`` to each bad record (:meth:`refuse`) and
        ``put`` the good ones again, in order (``put`` raises :class:`RefusedBatch` when the task
        refuses again): the record an :class:`UnwritableRecordError` names is taken out; otherwise
        the batch is offered in halves until the refused part is a single record. Only this
        failure path costs a ``put()`` per part; ``errors.tolerance=none`` ends it at the first bad
        record, with nothing after it written."""
        refused: set[tuple[str, int, int]] = set()
        todo: list[tuple[list[SinkRecord], DataError | None]] = [(records, error)]  # None: not put yet
        while todo:
            part, failure = todo.pop()
            if failure is None:
                try:
                    put(SinkRecordBatch.of(part))
                    continue
                except RefusedBatch as again:
                    failure = again.error
            named = failure.record if isinstance(failure, UnwritableRecordError) else None
            if named is not None:
                where = _coordinates(named)
                if where in refused:
                    raise self.retry.unrecoverable(Stage.TASK_PUT, self.task_class, failure) from failure
                refused.add(where)
                self.refuse(named, failure)
                parts = [[r for r in part if _coordinates(r) != where]]
            elif len(part) == 1:
                self.refuse(part[0], failure)
                parts = []
            else:
                middle = len(part) // 2
                parts = [part[:middle], part[middle:]]
            todo.extend((piece, None) for piece in reversed(parts) if piece)

    def refuse(self, record: SinkRecord, error: BaseException) -> None:
        """A record ``put()`` cannot write: dead-lettered, logged and skipped, or the task fails."""
        reporter = self.errant_record_reporter
        if not isinstance(reporter, SinkErrantRecordReporter):
            reporter = SinkErrantRecordReporter(self)
        reporter.report(record, error)

    def consumed_message(self, record: SinkRecord) -> Any:
        """The consumed message ``record`` came from, if it is of the batch being delivered."""
        topic, partition, offset = _coordinates(record)
        for m in self.messages:
            if m.offset() == offset and m.partition() == partition and m.topic() == topic:
                return m
        return None

    def serialise(self, record: SinkRecord) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """``record`` as bytes again, with the task's converters (for the errant record reporter)."""
        topic = record.topic_partition.topic
        batches = self._batches
        try:
            key = batches.key_converter.from_connect_data(topic, record.key_schema, record.key)
            value = batches.value_converter.from_connect_data(topic, record.value_schema, record.value)
            convert = batches.header_converter.from_connect_header
            headers = [(k, convert(topic, k, None, v)) for k, v in record.headers or ()]
        except Exception as exc:  # noqa: BLE001 - the reporter must not fail on a record it cannot serialise
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
            task_id = self.task_id
            headers += context_headers(ctx, task_id.connector, task_id.task, m.topic(), m.partition(), m.offset())
        dlq.send(m.key(), m.value(), headers)

    def convert_each(self, messages: list[Any]) -> list[SinkRecord]:
        """Steps 2 and 3 one record at a time, under ``errors.*``: a record that fails is skipped
        (and sent to the DLQ) with ``errors.tolerance=all``, or fails the task."""
        execute = self.retry.execute
        batches = self._batches
        kc, vc, transform = batches.key_converter, batches.value_converter, self._transform
        kname, vname, hname = class_name(kc), class_name(vc), class_name(batches.header_converter)
        convert_headers = batches.convert_headers
        out: list[SinkRecord] = []
        for m in messages:
            topic = m.topic()
            where = f"topic {topic!r} partition {m.partition()} offset {m.offset()}"
            attempt = partial(execute, coordinates=where, record=m)
            key = attempt(Stage.KEY_CONVERTER, partial(kc.to_connect_batch, topic, [m.key()]), class_name=kname)
            if key is SKIPPED:
                continue
            value = attempt(Stage.VALUE_CONVERTER, partial(vc.to_connect_batch, topic, [m.value()]), class_name=vname)
            if value is SKIPPED:
                continue
            raw_headers = m.headers()
            headers = None
            if raw_headers:
                headers = attempt(
                    Stage.HEADER_CONVERTER, partial(convert_headers, topic, raw_headers), class_name=hname
                )
                if headers is SKIPPED:
                    continue
            ts_type, ts = m.timestamp()
            record = SinkRecord(
                topic, m.partition(), m.offset(), value[1][0], value[0][0], key[1][0], key[0][0],
                ts if ts_type else None, ts_type, headers,
            )  # fmt: skip
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

    def topic_missing(self, topic: str | None, err: KafkaError) -> None:
        """A subscribed topic that does not exist (yet): wait for it, as Connect's consumer does.

        A sink is often started before the source that creates its topic; the consumer picks the
        topic up once it appears (librdkafka re-reads the metadata of missing subscribed topics
        every few seconds). A misspelled name stays RUNNING with nothing consumed, and this warning.
        """
        name = topic or "?"
        if name not in self._missing_topics:
            self._missing_topics.add(name)
            log.warning("Topic %r does not exist (yet); waiting for it to be created: %s", name, err.str())


def batches_of(records: Sequence[SinkRecord], consumed: list[Any]) -> list[tuple[SinkRecordBatch, list[Any]]]:
    """``records`` as batches of one topic each, with the ``consumed`` messages they came from."""
    return [(batch, consumed) for batch in SinkRecordBatch.group(records)]


def class_name(obj: Any) -> str:
    """``obj``'s class as errors name it (module and qualified name)."""
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _coordinates(record: SinkRecord) -> tuple[str, int, int]:
    """Where ``record`` was consumed (before any renaming transform)."""
    tp = record.topic_partition
    return tp.topic, tp.partition, record.original_offset if record.original_offset is not None else record.kafka_offset


class RefusedBatch(Exception):
    """``put()`` raised a :class:`DataError`: the batch was not written, :meth:`SinkFailures.recover` it."""

    def __init__(self, error: DataError) -> None:
        super().__init__(str(error))
        self.error = error
