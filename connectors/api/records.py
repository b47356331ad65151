"""Records that flow between connectors and Kafka.

Records are immutable and slotted. They are :class:`typing.NamedTuple` subclasses rather than frozen
dataclasses because a frozen dataclass spends ~0.9 µs per construction on ``object.__setattr__``
calls, against ~0.35 µs for a named tuple, and records are built once per message on every hot
path. Derive a changed copy with :meth:`SourceRecord.replace` / :meth:`SinkRecord.replace`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, NamedTuple, overload

from connectors.api.schema import Schema

#: Headers travel as a tuple of ``(key, value)`` pairs; keys repeat as Kafka allows. Values are the
#: header converter's business: ``bytes`` on the wire, plain data after conversion.
Headers = tuple[tuple[str, Any], ...]


class TopicPartition(NamedTuple):
    """A Kafka topic partition."""

    topic: str
    partition: int


class SourceRecord(NamedTuple):
    """A record produced by a :class:`~connectors.api.task.SourceTask`.

    ``source_partition`` and ``source_offset`` are JSON-able mappings that the runtime stores after
    the record is delivered; on restart the task reads them back through its offset reader.
    ``partition=None`` lets the producer's partitioner choose; ``timestamp`` is milliseconds since
    the epoch, ``None`` for the producer's clock.
    """

    topic: str
    value: Any = None
    value_schema: Schema | None = None
    key: Any = None
    key_schema: Schema | None = None
    partition: int | None = None
    timestamp: int | None = None
    headers: Headers | None = None
    source_partition: Mapping[str, Any] | None = None
    source_offset: Mapping[str, Any] | None = None

    def replace(self, **changes: Any) -> SourceRecord:
        """A copy with the given fields changed (what an SMT returns)."""
        return self._replace(**changes)


class SinkRecord(NamedTuple):
    """A record consumed from Kafka and handed to a :class:`~connectors.api.task.SinkTask`.

    ``kafka_offset`` is the record's offset in ``topic``/``partition``; ``original_topic`` and
    friends keep the consumed coordinates when transforms rename the topic.
    """

    topic: str
    partition: int
    kafka_offset: int
    value: Any = None
    value_schema: Schema | None = None
    key: Any = None
    key_schema: Schema | None = None
    timestamp: int | None = None
    timestamp_type: int = 0
    headers: Headers | None = None
    original_topic: str | None = None
    original_partition: int | None = None
    original_offset: int | None = None

    def replace(self, **changes: Any) -> SinkRecord:
        """A copy with the given fields changed (what an SMT returns)."""
        return self._replace(**changes)

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition the record was consumed from (before any topic-renaming transform)."""
        return TopicPartition(
            self.original_topic if self.original_topic is not None else self.topic,
            self.original_partition if self.original_partition is not None else self.partition,
        )


class RecordMetadata(NamedTuple):
    """Where Kafka stored a produced record (passed to ``SourceTask.commit_record``)."""

    topic: str
    partition: int
    offset: int


class SinkRecordBatch(Sequence[SinkRecord]):
    """The records of one consumer poll for one topic, stored by column.

    It is a ``Sequence[SinkRecord]``, so a task may simply iterate it; records are built on first
    access. A task that only needs some columns (most sinks want ``values``, perhaps ``keys``)
    reads them directly and skips building a record object per message, which costs more than
    everything else the runtime does per record. Columns other than ``values``/``keys`` and their
    schemas are loaded lazily from the consumed messages the first time they are read.

    ``topic`` is the topic the records are for (a routing transform may have renamed it);
    ``original_topic`` the topic they were consumed from, which offsets are committed for (KIP-793).

    Values may be converted lazily too: for a task class with :attr:`SinkTask.lazy_values`, the
    runtime checks a poll's raw value bytes as a whole and converts them only when ``values`` is
    first read (which then cannot fail). Such a task may use :attr:`raw_values` instead, e.g. to
    archive JSON as it was consumed without decoding and encoding it again. A task that also sets
    :attr:`SinkTask.parses_raw_json` gets schemaless JSON unchecked; reading ``values`` may then
    fail, and the runtime converts that batch record by record.
    """

    __slots__ = (
        "topic",
        "original_topic",
        "raw_format",
        "keys",
        "key_schemas",
        "_values",
        "_value_schemas",
        "_loader",
        "_columns",
        "_records",
    )

    def __init__(
        self,
        topic: str,
        values: list[Any] | None,
        value_schemas: list[Schema | None] | None,
        keys: list[Any],
        key_schemas: list[Schema | None],
        loader: Callable[[str], Any],
        *,
        original_topic: str | None = None,
        raw_format: str | None = None,
    ) -> None:
        self.topic = topic
        self.original_topic = topic if original_topic is None else original_topic
        #: What the bytes of :attr:`raw_values` are known to be: ``"json"`` (checked to be JSON,
        #: values are their schemaless parse), ``"bytes"`` (the values are the bytes), else ``None``.
        self.raw_format = raw_format
        self._values = values
        self._value_schemas = value_schemas
        self.keys = keys
        self.key_schemas = key_schemas
        self._loader = loader
        self._columns: dict[str, list[Any]] = {}
        self._records: list[SinkRecord] | None = None

    @property
    def values(self) -> list[Any]:
        """The converted values (converted now if the runtime deferred it)."""
        values = self._values
        if values is None:
            self._convert_values()
            values = self._values
            assert values is not None
        return values

    @property
    def value_schemas(self) -> list[Schema | None]:
        schemas = self._value_schemas
        if schemas is None:
            self._convert_values()
            schemas = self._value_schemas
            assert schemas is not None
        return schemas

    @property
    def values_converted(self) -> bool:
        """Whether :attr:`values` exists yet (``False`` only while a deferred conversion waits)."""
        return self._values is not None

    def _convert_values(self) -> None:
        self._value_schemas, self._values = self._loader("value")

    @property
    def raw_values(self) -> list[bytes | None] | None:
        """The value bytes exactly as consumed, or ``None`` when the values are not their plain
        conversion any more (a transform changed them) or the batch was not consumed from Kafka."""
        try:
            return self._column("raw_value")
        except KeyError:
            return None

    def _column(self, name: str) -> Any:
        column = self._columns.get(name)
        if column is None:
            column = self._columns[name] = self._loader(name)
        return column

    @property
    def partitions(self) -> list[int]:
        return self._column("partition")

    @property
    def offsets(self) -> list[int]:
        return self._column("kafka_offset")

    @property
    def timestamps(self) -> list[int | None]:
        return self._column("timestamp")

    @property
    def timestamp_types(self) -> list[int]:
        return self._column("timestamp_type")

    @property
    def headers(self) -> list[Headers | None]:
        return self._column("headers")

    def records(self) -> list[SinkRecord]:
        """Every record as a :class:`SinkRecord` (built once); records of a routed batch keep
        their consumed coordinates in ``original_topic``/``original_partition``/``original_offset``."""
        if self._records is None:
            n = len(self.keys)
            columns: list[Any] = [
                repeat(self.topic, n),
                self.partitions,
                self.offsets,
                self.values,
                self.value_schemas,
                self.keys,
                self.key_schemas,
                self.timestamps,
                self.timestamp_types,
                self.headers,
            ]
            if self.original_topic != self.topic:
                columns += [repeat(self.original_topic, n), self.partitions, self.offsets]
            self._records = list(map(SinkRecord, *columns))
        return self._records

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, index: int) -> SinkRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[SinkRecord]: ...

    def __getitem__(self, index: int | slice) -> SinkRecord | list[SinkRecord]:
        return self.records()[index]

    def __iter__(self) -> Iterator[SinkRecord]:
        return iter(self.records())

    def __repr__(self) -> str:
        return f"SinkRecordBatch(topic={self.topic!r}, records={len(self)})"

    @property
    def routed(self) -> bool:
        """Whether a transform renamed the topic (records then carry the consumed one)."""
        return self.original_topic != self.topic


class SourceRecordBatch(Sequence[SourceRecord]):
    """Records of one poll that share a topic, schemas and a source partition, stored by column.

    A task that reads many similar records (lines of a file, rows of a table) returns one of these
    instead of a list: the runtime converts the ``values`` column in one call and produces it in a
    tight loop, and stores only the last offset, so no record object is built per message. It is a
    ``Sequence[SourceRecord]`` too: transforms and ``commit_record`` see ordinary records.

    ``source_offsets`` holds each record's offset; tasks that can compute them only on demand pass
    ``offsets_loader`` and ``last_offset`` instead.
    """

    __slots__ = (
        "topic",
        "values",
        "value_schema",
        "keys",
        "key_schema",
        "source_partition",
        "_offsets",
        "_offsets_loader",
        "_last_offset",
        "_records",
    )

    def __init__(
        self,
        topic: str,
        values: list[Any],
        *,
        value_schema: Schema | None = None,
        keys: list[Any] | None = None,
        key_schema: Schema | None = None,
        source_partition: Mapping[str, Any] | None = None,
        source_offsets: list[Mapping[str, Any] | None] | None = None,
        offsets_loader: Callable[[], list[Mapping[str, Any] | None]] | None = None,
        last_offset: Mapping[str, Any] | None = None,
    ) -> None:
        if keys is not None and len(keys) != len(values):
            raise ValueError("keys and values must have the same length")
        if source_offsets is not None and len(source_offsets) != len(values):
            raise ValueError("source_offsets and values must have the same length")
        self.topic = topic
        self.values = values
        self.value_schema = value_schema
        self.keys = keys
        self.key_schema = key_schema
        self.source_partition = source_partition
        self._offsets = source_offsets
        self._offsets_loader = offsets_loader
        self._last_offset = last_offset
        self._records: list[SourceRecord] | None = None

    @property
    def source_offsets(self) -> list[Mapping[str, Any] | None]:
        if self._offsets is None:
            self._offsets = self._offsets_loader() if self._offsets_loader is not None else [None] * len(self.values)
        return self._offsets

    @property
    def last_offset(self) -> Mapping[str, Any] | None:
        """The offset of the last record: what the runtime stores once the batch is delivered."""
        if self._last_offset is None and self.values:
            self._last_offset = self.source_offsets[-1]
        return self._last_offset

    def records(self) -> list[SourceRecord]:
        """Every record as a :class:`SourceRecord` (built once)."""
        if self._records is None:
            n = len(self.values)
            self._records = list(
                map(
                    SourceRecord,
                    [self.topic] * n,
                    self.values,
                    [self.value_schema] * n,
                    self.keys if self.keys is not None else [None] * n,
                    [self.key_schema] * n,
                    [None] * n,
                    [None] * n,
                    [None] * n,
                    [self.source_partition] * n,
                    self.source_offsets,
                )
            )
        return self._records

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, index: int) -> SourceRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[SourceRecord]: ...

    def __getitem__(self, index: int | slice) -> SourceRecord | list[SourceRecord]:
        return self.records()[index]

    def __iter__(self) -> Iterator[SourceRecord]:
        return iter(self.records())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (SourceRecordBatch, list, tuple)):
            return self.records() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SourceRecordBatch(topic={self.topic!r}, records={len(self)})"


class EncodedRecordBatch(SourceRecordBatch):
    """Records of one poll already serialized: ``keys`` and ``values`` are the bytes the runtime's
    converters would write (a ``None`` value is a tombstone), ``topics`` each record's topic.

    A task returns these only after :meth:`SourceTask.accept_encoded` said yes for the runtime's
    converters; the runtime then produces the bytes as they are, with no transform and no
    converter in between, and stores ``last_offset`` once all of them are delivered. As a
    ``Sequence[SourceRecord]`` its records carry the bytes as schemaless values.
    """

    __slots__ = ("topics",)

    def __init__(
        self,
        topics: list[str],
        keys: list[bytes | None],
        values: list[bytes | None],
        *,
        source_partition: Mapping[str, Any] | None,
        last_offset: Mapping[str, Any] | None,
    ) -> None:
        if len(topics) != len(values):
            raise ValueError("topics and values must have the same length")
        n = len(values)
        super().__init__(
            topics[0] if topics else "",
            values,
            keys=keys,
            source_partition=source_partition,
            offsets_loader=lambda: [last_offset] * n,
            last_offset=last_offset,
        )
        self.topics = topics

    def records(self) -> list[SourceRecord]:
        if self._records is None:
            n = len(self.values)
            keys = self.keys if self.keys is not None else [None] * n
            self._records = [
                SourceRecord(t, v, None, k, None, None, None, None, self.source_partition, o)
                for t, k, v, o in zip(self.topics, keys, self.values, self.source_offsets)
            ]
        return self._records

    def __repr__(self) -> str:
        return f"EncodedRecordBatch(topics={sorted(set(self.topics))!r}, records={len(self)})"
