"""Consumed records → :class:`~connectors.api.SinkRecordBatch`: the one place the runtime builds the
batch a sink task's ``put`` receives, for the sink runner (messages from its consumer) and the
backfill's in-process sink (columns a Spark job read).

Keys and values are converted at once, as whole columns (or handed over raw); the
batch's other columns come from :class:`ConsumedColumns` only when the task or a transform reads
them, which most fast sinks never do.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, NamedTuple, Protocol

from sluice.connectors.api import Converter, DataError, HeaderConverter, SinkRecordBatch, WireFormat

#: Consumed headers as the consumer gives them: ``(name, bytes)`` pairs, or ``None``.
RawHeaders = Sequence[tuple[str, bytes | None]] | None


class ConsumedColumns(Protocol):
    """What a batch's records were consumed with, besides keys and values, one column at a time.

    Each method is called at most once per batch, the first time the task reads that column.
    """

    def partitions(self) -> list[int]: ...

    def offsets(self) -> list[int]: ...

    def timestamps(self) -> list[int | None]:
        """Milliseconds, or ``None`` where a record has no timestamp."""

    def timestamp_types(self) -> list[int]:
        """Kafka's timestamp types (0: none, 1: create time, 2: log append time)."""

    def headers(self) -> list[RawHeaders]: ...


class ConsumedMessages:
    """The columns of messages from a ``confluent_kafka.Consumer`` (all of one topic)."""

    __slots__ = ("_messages",)

    def __init__(self, messages: list[Any]) -> None:
        self._messages = messages

    def partitions(self) -> list[int]:
        return [m.partition() for m in self._messages]

    def offsets(self) -> list[int]:
        return [m.offset() for m in self._messages]

    def timestamps(self) -> list[int | None]:
        return [ts if kind else None for kind, ts in (m.timestamp() for m in self._messages)]

    def timestamp_types(self) -> list[int]:
        return [m.timestamp()[0] for m in self._messages]

    def headers(self) -> list[RawHeaders]:
        return [m.headers() for m in self._messages]


class ReadColumns(NamedTuple):
    """Columns read elsewhere (a Spark job's rows of one topic); a timestamp that is ``None`` has
    no type, any other is the record's create time."""

    partition_column: Sequence[int]
    offset_column: Sequence[int]
    timestamp_column: Sequence[int | None]
    header_column: Sequence[RawHeaders]

    def partitions(self) -> list[int]:
        return list(self.partition_column)

    def offsets(self) -> list[int]:
        return list(self.offset_column)

    def timestamps(self) -> list[int | None]:
        return list(self.timestamp_column)

    def timestamp_types(self) -> list[int]:
        return [0 if t is None else 1 for t in self.timestamp_column]

    def headers(self) -> list[RawHeaders]:
        return list(self.header_column)


class SinkBatchBuilder:
    """Builds the batches of one task with its converters (see the module docstring)."""

    def __init__(self, key_converter: Converter, value_converter: Converter, header_converter: HeaderConverter) -> None:
        self.key_converter = key_converter
        self.value_converter = value_converter
        self.header_converter = header_converter

    def build(
        self,
        topic: str,
        keys: list[bytes | None],
        values: list[bytes | None],
        consumed: ConsumedColumns,
        raw: WireFormat | None = None,
        raw_keys: WireFormat | None = None,
    ) -> SinkRecordBatch:
        """The batch of ``topic``'s consumed ``keys`` and ``values`` (one per record, in order).

        With ``raw`` (the value converter's wire format, for a task that takes raw values) the
        values are handed over as consumed and decoded only if the task reads them; with
        ``raw_keys`` too (the key converter's, for a task that takes raw typed values) so are the
        keys. A value or key the converter refuses raises :class:`DataError` naming the topic
        (one handed over raw: :class:`~connectors.api.UnusableRawValues` when it is read).
        """
        key_converter, value_converter = self.key_converter, self.value_converter
        lazy_keys = raw is not None and raw_keys is not None
        key_schemas: list[Any] | None = None
        converted_keys: list[Any] | None = None
        value_schemas: list[Any] | None = None
        decoded: list[Any] | None = None
        try:
            if not lazy_keys:
                key_schemas, converted_keys = key_converter.to_connect_batch(topic, keys)
            if raw is None:
                value_schemas, decoded = value_converter.to_connect_batch(topic, values)
        except DataError as exc:
            raise DataError(f"Converter failed on a record of topic {topic!r}: {exc}") from exc
        loader = partial(self._column, topic, consumed)
        if raw is None:
            return SinkRecordBatch(topic, decoded, value_schemas, converted_keys, key_schemas, loader)
        return SinkRecordBatch(
            topic,
            None,
            None,
            converted_keys,
            key_schemas,
            loader,
            raw_values=values,
            decode=partial(value_converter.to_connect_batch, topic, values),
            raw_format=raw,
            writer_schema=value_converter.writer_schema,
            raw_keys=keys if lazy_keys else None,
            decode_keys=partial(key_converter.to_connect_batch, topic, keys) if lazy_keys else None,
            raw_key_format=raw_keys if lazy_keys else None,
            key_writer_schema=key_converter.writer_schema if lazy_keys else None,
        )

    def convert_headers(self, topic: str, headers: Sequence[tuple[str, bytes | None]]) -> tuple[tuple[str, Any], ...]:
        """Consumed headers as a record carries them: ``(name, Connect value)`` pairs."""
        convert = self.header_converter.to_connect_header
        return tuple((k, convert(topic, k, v).value) for k, v in headers)

    def _column(self, topic: str, consumed: ConsumedColumns, column: str) -> list[Any]:
        """The batch's loader: one of :class:`SinkRecordBatch`'s lazy columns, by its name."""
        if column == "partition":
            return consumed.partitions()
        if column == "kafka_offset":
            return consumed.offsets()
        if column == "timestamp":
            return consumed.timestamps()
        if column == "timestamp_type":
            return consumed.timestamp_types()
        if column == "headers":
            convert = self.convert_headers
            return [convert(topic, h) if h else None for h in consumed.headers()]
        raise KeyError(column)


def one_topic(messages: list[Any], topic: str) -> bool:
    """Whether every message is of ``topic``: a list and a count, a third of a generator's cost."""
    topics = [m.topic() for m in messages]
    return topics.count(topic) == len(topics)
