"""Source runner: what happens when records cannot go out — conversion and transformation record
by record under ``errors.*``, a record the producer refuses, delivery failures, and the dead letter
queue (Sluice's, for source tasks)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, NamedTuple

import orjson
from confluent_kafka import KafkaError, KafkaException, Producer

from sluice.connectors.api import Converter, HeaderConverter, RecordMetadata, SourceRecord, SourceTask
from sluice.worker.connector_scope import TopicScope
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
from sluice.worker.runners.base import WorkerTask
from sluice.worker.topic_creation import TopicCreator

log = logging.getLogger(__name__)

Transform = Callable[[list[SourceRecord]], list[SourceRecord]]

_PRODUCER = "confluent_kafka.Producer"


class _Outgoing(NamedTuple):
    """One poll's records ready for the producer (step 4)."""

    topic: str | None  # every record's topic; None: ``topics`` names each
    topics: Sequence[str] | None
    keys: Sequence[bytes | None] | None  # None: no keys
    values: Sequence[bytes | None]
    options: Sequence[dict[str, Any] | None] | None  # produce()'s other keyword arguments, per record
    records: Sequence[SourceRecord]  # what errors.* names when the producer refuses one


class SourceErrorHandling(WorkerTask):
    """The failure paths of :class:`~worker.runners.source.SourceTaskRunner` (a base class of it;
    the attributes below are the runner's). Nothing here runs per record while polls go through."""

    task: SourceTask
    errors: ErrorHandlingConfig
    dlq: DeadLetterQueue | None
    retry: RetryWithTolerance
    _producer: Producer | None
    _delivery_error: KafkaError | None
    _key_converter: Converter
    _value_converter: Converter
    _header_converter: HeaderConverter
    _transform: Transform | None
    _wants_commit_record: bool
    _refused: tuple[SourceRecord, bytes | None, bytes | None, Any] | None
    _topic_creator: TopicCreator | None
    _topic_scope: TopicScope | None

    def _use_topic(self, topic: str) -> None:
        """Before the first record to ``topic``: refuse it when it is outside the connector's
        scope (the task fails), create it per ``topic.creation.*`` when it is missing (KIP-158),
        and count it as used (KIP-558)."""
        if topic not in self.active_topics:
            if self._topic_scope is not None:
                self._topic_scope.check(topic)  # before the topic is created or anything sent to it
            if self._topic_creator is not None:
                self._topic_creator.ensure(topic)
            self.active_topics.add(topic)

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None and self._delivery_error is None:
            self._delivery_error = err

    def _check_delivery(self) -> None:
        err = self._delivery_error
        if err is not None:
            raise self.retry.unrecoverable(Stage.KAFKA_PRODUCE, _PRODUCER, KafkaException(err), "a delivery report")

    def _serialize_each(self, polled: Sequence[SourceRecord]) -> _Outgoing:
        """Steps 2 and 3 one record at a time, under ``errors.*``: a record that fails is skipped
        (its offset still counts as done, after it reached the DLQ) or fails the task. A task that
        overrides ``commit_record`` hears of every record that will not be produced (filtered out
        or skipped) with ``None`` metadata, as Connect's ``commitRecord(record, null)``."""
        execute = self.retry.execute
        kc, vc, transform = self._key_converter, self._value_converter, self._transform
        kname, vname, hname = _class_name(kc), _class_name(vc), _class_name(self._header_converter)
        commit_record = self.task.commit_record if self._wants_commit_record else None
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
                        partial(self._convert_headers, r),
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
                options.append(self._options(r, headers, commit_record, record))
        return _Outgoing(None, [r.topic for r in out], keys, values, options, out)

    def _options(
        self,
        record: SourceRecord,
        headers: list[tuple[str, bytes | None]] | None,
        commit_record: Any,
        polled: SourceRecord | None = None,
    ) -> dict[str, Any] | None:
        """``produce()``'s keyword arguments for ``record`` beyond topic, key and value; the
        delivery callback names ``polled``, the record the task returned (before transforms)."""
        kwargs: dict[str, Any] = {}
        if record.partition is not None:
            kwargs["partition"] = record.partition
        if record.timestamp is not None:
            kwargs["timestamp"] = record.timestamp
        if headers:
            kwargs["headers"] = headers
        if commit_record is not None:
            kwargs["on_delivery"] = self._record_callback(polled if polled is not None else record, commit_record)
        return kwargs or None

    def _record_callback(
        self, record: SourceRecord, commit_record: Callable[[SourceRecord, RecordMetadata | None], None]
    ) -> Callable[[KafkaError | None, Any], None]:
        def callback(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self._on_delivery(err, msg)
                return
            commit_record(record, RecordMetadata(msg.topic(), msg.partition(), msg.offset()))

        return callback

    def _produce_carefully(self, out: _Outgoing, start: int) -> None:
        """Produce ``out`` from ``start`` on: when the queue is full, serve delivery reports until
        there is room; a record the producer refuses is tolerated (skipped, sent to the DLQ with
        the bytes it was refused with) or fails the task (KIP-779)."""
        producer = self._producer
        assert producer is not None
        for i in range(start, len(out.values)):
            topic = out.topics[i] if out.topics is not None else out.topic or ""
            self._use_topic(topic)
            key = out.keys[i] if out.keys is not None else None
            options = out.options[i] if out.options is not None else None
            while True:
                try:
                    producer.produce(topic, out.values[i], key, **(options or {}))
                    break
                except BufferError:
                    producer.poll(0.05)
                    self._check_delivery()
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
            headers = headers + context_headers(ctx, self.id.connector, self.id.task, r.topic)
        dlq.send(key, value, headers)

    def _dlq_bytes(self, r: SourceRecord) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
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
            headers = self._convert_headers(r) or []
        except Exception:
            headers = [(k, _json(v)) for k, v in r.headers or ()]
        return key, value, headers

    def _convert_headers(self, record: SourceRecord) -> list[tuple[str, bytes | None]] | None:
        if not record.headers:
            return None
        convert = self._header_converter.from_connect_header
        return [(k, convert(record.topic, k, None, v)) for k, v in record.headers]


def _class_name(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def _json(value: Any) -> bytes:
    return orjson.dumps(value, default=str)
