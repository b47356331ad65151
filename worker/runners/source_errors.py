"""Source runner: what happens when records cannot go out — conversion and transformation record
by record under ``errors.*``, a record the producer refuses, delivery failures, and the dead letter
queue (Sluice's, for source tasks). The runner's collaborator :class:`SourceFailures`."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import orjson
from confluent_kafka import KafkaError, KafkaException, Producer

from sluice.connectors.api import Converter, HeaderConverter, RecordMetadata, SourceRecord, SourceTask
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
from sluice.worker.runners.source_topics import SourceTopics
from sluice.worker.status import ConnectorTaskId

log = logging.getLogger(__name__)

Transform = Callable[[list[SourceRecord]], list[SourceRecord]]

_PRODUCER = "confluent_kafka.Producer"


class Outgoing(NamedTuple):
    """One poll's records ready for the producer (step 4)."""

    topic: str | None  # every record's topic; None: ``topics`` names each
    topics: Sequence[str] | None
    keys: Sequence[bytes | None] | None  # None: no keys
    values: Sequence[bytes | None]
    options: Sequence[dict[str, Any] | None] | None  # produce()'s other keyword arguments, per record
    records: Sequence[SourceRecord]  # what errors.* names when the producer refuses one


class SourceFailures:
    """The source runner's delivery reports and failure paths, one of its collaborators: the
    producer's per-record arguments (with the delivery callback a task's ``commit_record`` needs),
    conversion and transformation record by record under ``errors.*``, a record the producer
    refuses, delivery failures, and the dead letter queue.

    It owns the task's retry and tolerance operator (:attr:`retry`, whose tolerated failures it
    sends to the DLQ). Nothing here runs per record while polls go through, except
    :meth:`options` for records that need more than topic, key and value. Runner thread, except
    :meth:`on_delivery` (wherever the producer serves its callbacks).
    """

    def __init__(
        self,
        task_id: ConnectorTaskId,
        task: SourceTask,
        converters: tuple[Converter, Converter, HeaderConverter],
        transform: Transform | None,
        topics: SourceTopics,
        *,
        errors: ErrorHandlingConfig,
        dlq: DeadLetterQueue | None,
        stop_event: threading.Event,
        commit_record: Callable[[SourceRecord, RecordMetadata | None], None] | None,
    ) -> None:
        self.task_id = task_id
        self.task_class = class_name(task)
        self._key_converter, self._value_converter, self._header_converter = converters
        self._transform = transform
        self._topics = topics
        self.errors = errors
        self.dlq = dlq
        #: The task's ``commit_record`` when it overrides it (a callback per record), else ``None``.
        self.commit_record = commit_record
        #: The retry and tolerance operator (Connect's ``RetryWithToleranceOperator``).
        self.retry = RetryWithTolerance(
            errors, reporter=self._report_failed_record, stop_event=stop_event, task_id=task_id, dlq=dlq
        )
        #: The first delivery (or fatal producer) error; :meth:`check_delivery` fails the task with it.
        self.delivery_error: KafkaError | None = None
        self._refused: tuple[SourceRecord, bytes | None, bytes | None, Any] | None = None

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        """The producer's delivery report (for errors only, unless the task needs every record's)."""
        if err is not None and self.delivery_error is None:
            self.delivery_error = err

    def check_delivery(self) -> None:
        """Fail the task (stage ``KAFKA_PRODUCE``) if a record could not be delivered."""
        err = self.delivery_error
        if err is not None:
            raise self.retry.unrecoverable(Stage.KAFKA_PRODUCE, _PRODUCER, KafkaException(err), "a delivery report")

    def serialize_each(self, polled: Sequence[SourceRecord]) -> Outgoing:
        """Steps 2 and 3 one record at a time, under ``errors.*``: a record that fails is skipped
        (its offset still counts as done, after it reached the DLQ) or fails the task. A task that
        overrides ``commit_record`` hears of every record that will not be produced (filtered out
        or skipped) with ``None`` metadata, as Connect's ``commitRecord(record, null)``."""
        execute = self.retry.execute
        kc, vc, transform = self._key_converter, self._value_converter, self._transform
        kname, vname, hname = class_name(kc), class_name(vc), class_name(self._header_converter)
        commit_record = self.commit_record
        out: list[SourceRecord] = []
        keys: list[bytes | None] = []
        values: list[bytes | None] = []
        options: list[dict[str, Any] | None] = []
        for record in polled:
            where = f"source partition {record.source_partition} offset {record.source_offset}"
            transformed = transform_each(transform, record, self.retry, where) if transform is not None else [record]
            if transformed is SKIPPED or not transformed:
                if commit_record is not None:
                    commit_record(record, None)  # filtered out, or skipped under errors.tolerance
                continue
            for r in transformed:
                key = None
                if r.key is not None or r.key_schema is not None:
                    key = execute(
                        Stage.KEY_CONVERTER,
                        partial(kc.from_connect_data, r.topic, r.key_schema, r.key),
                        class_name=kname,
                        coordinates=where,
                        record=r,
                    )
                value = (
                    SKIPPED
                    if key is SKIPPED
                    else execute(
                        Stage.VALUE_CONVERTER,
                        partial(vc.from_connect_data, r.topic, r.value_schema, r.value),
                        class_name=vname,
                        coordinates=where,
                        record=r,
                    )
                )
                headers = None
                if value is not SKIPPED and r.headers:
                    headers = execute(
                        Stage.HEADER_CONVERTER,
                        partial(self.convert_headers, r),
                        class_name=hname,
                        coordinates=where,
                        record=r,
                    )
                if value is SKIPPED or headers is SKIPPED:
                    if commit_record is not None:
                        commit_record(record, None)  # skipped under errors.tolerance
                    continue
                out.append(r)
                keys.append(key)
                values.append(value)
                options.append(self.options(r, headers, record))
        return Outgoing(None, [r.topic for r in out], keys, values, options, out)

    def options(
        self, record: SourceRecord, headers: list[tuple[str, bytes | None]] | None, polled: SourceRecord | None = None
    ) -> dict[str, Any] | None:
        """``produce()``'s keyword arguments for ``record`` beyond topic, key and value; the
        delivery callback (for a task's ``commit_record``) names ``polled``, the record the task
        returned (before transforms)."""
        kwargs: dict[str, Any] = {}
        if record.partition is not None:
            kwargs["partition"] = record.partition
        if record.timestamp is not None:
            kwargs["timestamp"] = record.timestamp
        if headers:
            kwargs["headers"] = headers
        commit_record = self.commit_record
        if commit_record is not None:
            kwargs["on_delivery"] = self._record_callback(polled if polled is not None else record, commit_record)
        return kwargs or None

    def _record_callback(
        self, record: SourceRecord, commit_record: Callable[[SourceRecord, RecordMetadata | None], None]
    ) -> Callable[[KafkaError | None, Any], None]:
        def callback(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.on_delivery(err, msg)
                return
            commit_record(record, RecordMetadata(msg.topic(), msg.partition(), msg.offset()))

        return callback

    def produce_carefully(self, producer: Producer, out: Outgoing, start: int) -> None:
        """Produce ``out`` from ``start`` on: when the queue is full, serve delivery reports until
        there is room; a record the producer refuses is tolerated (skipped, sent to the DLQ with
        the bytes it was refused with) or fails the task (KIP-779)."""
        for i in range(start, len(out.values)):
            topic = out.topics[i] if out.topics is not None else out.topic or ""
            self._topics.use(topic)
            key = out.keys[i] if out.keys is not None else None
            options = out.options[i] if out.options is not None else None
            while True:
                try:
                    producer.produce(topic, out.values[i], key, **(options or {}))
                    break
                except BufferError:
                    producer.poll(0.05)
                    self.check_delivery()
                except KafkaException as exc:
                    record = out.records[i]
                    self._refused = (record, key, out.values[i], (options or {}).get("headers"))
                    try:
                        self.retry.fail(ErrorContext(Stage.KAFKA_PRODUCE, _PRODUCER, exc, f"topic {topic!r}", record))
                    finally:
                        self._refused = None
                    break

    def _report_failed_record(self, ctx: ErrorContext) -> None:
        """Sluice's source DLQ: the record's bytes where they exist, else JSON."""
        dlq = self.dlq
        if dlq is None:
            return
        r: SourceRecord = ctx.record
        refused = self._refused
        if refused is not None and refused[0] is r:  # the producer refused these very bytes
            key, value, headers = refused[1], refused[2], list(refused[3] or ())
        else:
            key, value, headers = self._dlq_bytes(r)
        if self.errors.dlq_context_headers:
            headers = headers + context_headers(ctx, self.task_id.connector, self.task_id.task, r.topic)
        dlq.send(key, value, headers)

    def _dlq_bytes(self, r: SourceRecord) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        key = value = None
        try:
            if r.key is not None or r.key_schema is not None:
                key = self._key_converter.from_connect_data(r.topic, r.key_schema, r.key)
        except Exception:  # noqa: BLE001 - a reported record falls back to JSON when its converter fails
            key = _json(r.key)
        try:
            value = self._value_converter.from_connect_data(r.topic, r.value_schema, r.value)
        except Exception:  # noqa: BLE001 - a reported record falls back to JSON when its converter fails
            value = _json(r.value)
        try:
            headers = self.convert_headers(r) or []
        except Exception:  # noqa: BLE001 - a reported record falls back to JSON when its converter fails
            headers = [(k, _json(v)) for k, v in r.headers or ()]
        return key, value, headers

    def convert_headers(self, record: SourceRecord) -> list[tuple[str, bytes | None]] | None:
        """``record``'s headers as the producer takes them (``None``: it has none)."""
        if not record.headers:
            return None
        convert = self._header_converter.from_connect_header
        return [(k, convert(record.topic, k, None, v)) for k, v in record.headers]


def class_name(obj: Any) -> str:
    """``obj``'s class as errors name it (module and qualified name)."""
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _json(value: Any) -> bytes:
    return orjson.dumps(value, default=str)
