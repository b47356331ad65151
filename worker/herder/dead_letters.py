"""A connector's dead letter queue, read page by page and sent back to the topics its records
came from (``/connectors/{name}/dlq``; the console's inspector).

Records in a DLQ are the failed records as the connector had them (a sink's: the consumed key,
value and headers) plus, with ``errors.deadletterqueue.context.headers.enable=true``, Connect's
``__connect.errors.*`` headers naming the original topic, partition and offset, the stage, the
class and the exception. :meth:`DeadLetters.page` returns them decoded: text where the bytes are
UTF-8, base64 otherwise, and the error headers as fields, their messages masked like a task's trace.

Redriving sends a range of a **sink**'s DLQ records back to the topic each came from, which the
sink reads again: key, value and the record's own headers, without the error headers, and with
:data:`REDRIVE_HEADER` counting how often the record went round. The guards against loops: a record
whose count reached ``max_redrives`` stays where it is, the target must be a topic the sink reads
(its ``topics``, or a match of ``topics.regex``) and within the topics its creator was granted,
and never the DLQ itself. A source's DLQ records hold what could not be converted or sent; there is
no topic they came from, so they are only read.

The clients go where the task's go: the DLQ is read on the cluster the task's DLQ producer writes
to (``producer.override.*``), redriven records are written to the cluster its consumer reads
(``consumer.override.*``), each with only the connection and security settings of those configs.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from sluice.connectors.api import ConnectError, NotFoundError
from sluice.plugins import PluginKind
from sluice.worker.config.connector_scope import ConnectorScope, ReservedTopics
from sluice.worker.config.masking import mask_text
from sluice.worker.errors import HEADER_PREFIX, ErrorHandlingConfig
from sluice.worker.herder.api import BadRequest
from sluice.worker.herder.stores.config_store import ConfigStore
from sluice.worker.worker import Worker

#: The header counting how often a record was sent back from a dead letter queue.
REDRIVE_HEADER = "sluice.redrive.count"
#: The most records one page or one redrive may hold.
MAX_PAGE = 500
MAX_REDRIVE = 10_000
#: How long a page or a redrive may wait for Kafka.
KAFKA_TIMEOUT_S = 15.0

_CONNECTION_KEY = re.compile(r"^(bootstrap\.servers|security\.protocol|ssl\..*|sasl\..*|client\.dns\.lookup)$")
#: The ``__connect.errors.*`` headers as the fields of a record's ``error``.
_ERROR_FIELDS = {
    "topic": "topic",
    "partition": "partition",
    "offset": "offset",
    "connector.name": "connector",
    "task.id": "task",
    "stage": "stage",
    "class.name": "class",
    "exception.class.name": "exception",
    "exception.message": "message",
    "exception.stacktrace": "stacktrace",
}


def _connection(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if _CONNECTION_KEY.match(k)}


def _bytes(data: bytes | None) -> dict[str, str] | None:
    """``{"text": …}`` for UTF-8 bytes, ``{"base64": …}`` for any other, ``None`` for none."""
    if data is None:
        return None
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


class DeadLetters:
    """The DLQ requests of one worker; any worker can serve them (they are Kafka reads and writes)."""

    def __init__(self, worker: Worker, store: ConfigStore) -> None:
        self.worker = worker
        self.store = store

    def _connector(self, name: str) -> tuple[Any, dict[str, Any], str]:
        """The validated connector, its resolved config and its DLQ topic; 400 without one."""
        raw = self.store.snapshot().connectors.get(name)
        if raw is None:
            raise NotFoundError(f"Connector {name} not found")
        validated = self.worker.validate(raw)
        resolved = self.worker.resolve(raw)
        topic = ErrorHandlingConfig.parse(resolved).dlq_topic
        if not topic:
            raise BadRequest(
                f"Connector {name} has no dead letter queue (errors.deadletterqueue.topic.name, with errors.tolerance=all)"
            )
        return validated, resolved, topic

    def _reader(self, name: str, resolved: Mapping[str, Any]) -> Consumer:
        config = self.worker.builder.client_for(name, resolved, "producer")
        return Consumer(
            {
                **_connection(config),
                "group.id": f"sluice-dlq-reader-{name}",
                "client.id": f"sluice-dlq-reader-{name}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "isolation.level": "read_committed",
            }
        )

    def page(self, name: str, partition: int, offset: int | None, limit: int) -> dict[str, Any]:
        """Up to ``limit`` records of partition ``partition`` from ``offset`` (default: the first
        still in the topic), with every partition's range and the offset of the next page."""
        if not 1 <= limit <= MAX_PAGE:
            raise BadRequest(f"limit must be between 1 and {MAX_PAGE}")
        _, resolved, topic = self._connector(name)
        consumer = self._reader(name, resolved)
        try:
            ranges = self._ranges(consumer, topic)
            if partition not in ranges:
                raise BadRequest(f"The dead letter queue {topic} has no partition {partition} (it has {sorted(ranges)})")
            start, end = ranges[partition]
            first = start if offset is None else max(offset, start)
            records = self._read(consumer, topic, partition, first, min(end, first + limit), name) if first < end else []
        finally:
            consumer.close()
        following = records[-1]["offset"] + 1 if records else first
        return {
            "topic": topic,
            "partition": partition,
            "partitions": [{"partition": p, "start": s, "end": e} for p, (s, e) in sorted(ranges.items())],
            "records": records,
            "next_offset": following if following < end else None,
        }

    def _ranges(self, consumer: Consumer, topic: str) -> dict[int, tuple[int, int]]:
        try:
            metadata = consumer.list_topics(topic, timeout=KAFKA_TIMEOUT_S)
            info = metadata.topics.get(topic)
            if info is None or info.error is not None:
                reason = getattr(info, "error", None)
                if reason is not None and "UNKNOWN_TOPIC" in str(reason):
                    return {0: (0, 0)}  # nothing failed yet: the task creates the topic on its first record
                raise ConnectError(f"Cannot read the dead letter queue {topic}: {reason}")
            return {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=KAFKA_TIMEOUT_S)
                for p in sorted(info.partitions)
            }
        except KafkaException as exc:
            raise ConnectError(f"Cannot read the dead letter queue {topic}: {exc.args[0].str()}") from exc

    def _read(self, consumer: Consumer, topic: str, partition: int, first: int, stop: int, name: str) -> list[dict[str, Any]]:
        consumer.assign([TopicPartition(topic, partition, first if first > 0 else OFFSET_BEGINNING)])
        records: list[dict[str, Any]] = []
        idle = 0
        while len(records) < stop - first and idle < int(KAFKA_TIMEOUT_S):
            message = consumer.poll(1.0)
            if message is None:
                idle += 1
                continue
            error = message.error()
            if error is not None:
                raise ConnectError(f"Cannot read the dead letter queue {topic}: {error.str()}")
            if (message.offset() or 0) >= stop:
                break
            records.append(_decoded(message, name))
        return records

    def redrive(self, name: str, partition: int, first: int, last: int, max_redrives: int) -> dict[str, Any]:
        """Send records ``first … last`` of DLQ partition ``partition`` back to their topics."""
        if last < first or last - first + 1 > MAX_REDRIVE:
            raise BadRequest(f"from_offset … to_offset must be a range of 1 to {MAX_REDRIVE} records")
        if not 1 <= max_redrives <= 100:
            raise BadRequest("max_redrives must be between 1 and 100")
        validated, resolved, topic = self._connector(name)
        if validated.plugin.kind is not PluginKind.SINK:
            raise BadRequest(
                f"Connector {name} is a source: its dead letters are records it could not convert or send, "
                "with no topic to send them back to; they can be read, not redriven"
            )
        targets = _Targets(
            validated.common.topic_list,
            validated.common.topics_regex,
            ConnectorScope.of(resolved),
            topic,
            self.worker.builder.reserved_topics,
        )
        consumer = self._reader(name, resolved)
        try:
            start, end = self._ranges(consumer, topic).get(partition, (0, 0))
            first, stop = max(first, start), min(last + 1, end)
            messages = self._raw(consumer, topic, partition, first, stop) if first < stop else []
        finally:
            consumer.close()
        return self._send(name, resolved, messages, targets, max_redrives)

    def _raw(self, consumer: Consumer, topic: str, partition: int, first: int, stop: int) -> list[Any]:
        consumer.assign([TopicPartition(topic, partition, first)])
        messages: list[Any] = []
        idle = 0
        while len(messages) < stop - first and idle < int(KAFKA_TIMEOUT_S):
            message = consumer.poll(1.0)
            if message is None:
                idle += 1
            elif message.error() is None and (message.offset() or 0) < stop:
                messages.append(message)
            elif message.error() is None:
                break
        return messages

    def _send(
        self, name: str, resolved: Mapping[str, Any], messages: list[Any], targets: _Targets, max_redrives: int
    ) -> dict[str, Any]:
        skipped: list[dict[str, Any]] = []
        sent: dict[str, int] = {}
        config = self.worker.builder.client_for(name, resolved, "consumer")
        producer = Producer({**_connection(config), "client.id": f"sluice-dlq-redrive-{name}", "enable.idempotence": True})
        failures: list[str] = []
        for message in messages:
            headers = [(k, v) for k, v in message.headers() or [] if not k.startswith(HEADER_PREFIX)]
            errors = {k: v for k, v in message.headers() or [] if k.startswith(HEADER_PREFIX)}
            rounds = _count(dict(headers).get(REDRIVE_HEADER))
            target, why = targets.of(errors)
            if target is None or rounds >= max_redrives:
                reason = why or f"it was redriven {rounds} time(s) already (max_redrives={max_redrives})"
                skipped.append({"offset": message.offset(), "reason": reason})
                continue
            headers = [(k, v) for k, v in headers if k != REDRIVE_HEADER] + [(REDRIVE_HEADER, str(rounds + 1).encode())]
            producer.produce(
                target, message.value(), message.key(), headers=headers,
                on_delivery=lambda err, _msg: failures.append(err.str()) if err is not None else None,
            )
            sent[target] = sent.get(target, 0) + 1
        left = producer.flush(KAFKA_TIMEOUT_S)
        if failures or left:
            raise ConnectError(
                f"Redriving the dead letters of {name} failed for {len(failures) + left} record(s): "
                f"{failures[0] if failures else 'not delivered in time'}; the others were sent"
            )
        return {"redriven": sum(sent.values()), "topics": sent, "skipped": skipped}


class _Targets:
    """Where a sink's dead letter may go back to: a topic the sink reads, in its scope, not the DLQ."""

    def __init__(
        self, topics: list[str], regex: str | None, scope: ConnectorScope, dlq: str, reserved: ReservedTopics
    ) -> None:
        self.topics = topics
        self.regex = re.compile(regex) if regex else None
        self.scope = scope
        self.dlq = dlq
        self.reserved = reserved

    def of(self, errors: Mapping[str, bytes | None]) -> tuple[str | None, str | None]:
        """The record's original topic, or ``None`` and why it cannot go back."""
        named = errors.get(HEADER_PREFIX + "topic")
        if named is not None:
            topic = named.decode("utf-8", "replace")
        elif len(self.topics) == 1 and self.regex is None:
            topic = self.topics[0]
        else:
            return None, (
                "it has no __connect.errors.topic header (errors.deadletterqueue.context.headers.enable=false) "
                "and the connector reads more than one topic"
            )
        if topic == self.dlq:
            return None, f"its topic {topic} is the dead letter queue itself"
        reserved = self.reserved.why(topic)
        if reserved is not None:  # a forged errors.topic header, or a regex that matches one
            return None, f"its topic {topic} {reserved}"
        if topic not in self.topics and not (self.regex is not None and self.regex.fullmatch(topic)):
            return None, f"the connector does not read its topic {topic}"
        if not self.scope.allows_topic(topic):
            return None, f"its topic {topic} is outside the topics this connector may reach"
        return topic, None


def _count(value: bytes | None) -> int:
    try:
        return max(0, int(value or b"0"))
    except ValueError:
        return 0


def _decoded(message: Any, connector: str) -> dict[str, Any]:
    headers = message.headers() or []
    error: dict[str, Any] = {}
    own: list[dict[str, Any]] = []
    for key, value in headers:
        if key.startswith(HEADER_PREFIX) and key[len(HEADER_PREFIX) :] in _ERROR_FIELDS:
            text = None if value is None else value.decode("utf-8", "replace")
            field = _ERROR_FIELDS[key[len(HEADER_PREFIX) :]]
            error[field] = mask_text(text, connector) if field in ("message", "stacktrace") and text else text
        else:
            own.append({"key": key, "value": _bytes(value)})
    return {
        "offset": message.offset(),
        "timestamp": message.timestamp()[1],
        "key": _bytes(message.key()),
        "value": _bytes(message.value()),
        "headers": own,
        "error": error or None,
        "redriven": _count(dict(headers).get(REDRIVE_HEADER)),
    }
