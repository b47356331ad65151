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

from sluice.connectors.api.errors import UnusableRawValues
from sluice.connectors.api.schema import Schema, SchemaAndValue
from sluice.connectors.api.wire import WireFormat

#: Headers travel as a tuple of ``(key, value)`` pairs; keys repeat as Kafka allows. Values are the
#: header converter's business: ``bytes`` on the wire, plain data after conversion. A transform that
#: knows a header's schema (as Connect's headers carry one) may give the value as a
#: :class:`~connectors.api.schema.SchemaAndValue`: header converters then write it with that schema
#: (``JsonConverter`` puts it in the envelope), and :func:`header_data` strips it for a reader.
Headers = tuple[tuple[str, Any], ...]


def header_data(value: Any) -> Any:
    """A header value without the schema a transform may have attached (see :data:`Headers`)."""
    return value.value if type(value) is SchemaAndValue else value


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
    """The records handed to one :meth:`~connectors.api.SinkTask.put`: records of one topic, consumed
    from one topic, stored by column.

    Every ``put`` receives one. It is a ``Sequence[SinkRecord]``, so a task written the simple way
    iterates it and needs nothing else; records are built on first access. A task that only needs
    some columns reads them as attributes instead and skips building a record object per message,
    which costs more than everything else the runtime does per record:

    * ``topic``: the records' topic (a routing transform may have renamed it); ``original_topic``:
      the topic they were consumed from, which offsets are committed for (KIP-793).
    * ``keys``, ``key_schemas``, ``values``, ``value_schemas``: converted Connect data.
    * ``partitions``, ``offsets``, ``timestamps``, ``timestamp_types``, ``headers``: computed from
      the consumed messages the first time they are read.
    * ``raw_values``: the value bytes exactly as consumed, for a task that asked for them
      (:attr:`~connectors.api.SinkTask.value_format`) when the runtime could give them (no
      transform ran, or each keeps them, :meth:`~connectors.api.Transformation.keeps_raw_values`;
      and the value converter writes schemaless JSON, also JSON with schemas or Avro
      for ``raw_typed``, or any bytes for ``raw_bytes``); ``None`` otherwise, and then ``values`` is
      what to write. ``raw_format`` is then the converter's
      :class:`~connectors.api.converter.WireFormat` (what the bytes are), and ``writer_schema``
      for Avro gives the writer schema of a registry id (:meth:`Converter.writer_schema`). ``values`` of a batch with raw
      values are decoded on first read; if that fails, reading them raises
      :class:`~connectors.api.UnusableRawValues` from the batch's first record, which the runtime
      answers by delivering the records again decoded, under ``errors.*``.
    * ``raw_keys``: likewise the key bytes as consumed, for a task that asked for raw typed values
      (``raw_typed``), in a batch with raw values whose key converter writes JSON (schemaless, or
      with schemas and decimals as base64) or Avro; ``None`` otherwise. ``raw_key_format`` and
      ``key_writer_schema`` are then the key converter's, and ``keys``/``key_schemas`` are decoded
      on first read, raising :class:`~connectors.api.UnusableRawValues` as values do.
    """

    __slots__ = (
        "topic",
        "original_topic",
        "raw_values",
        "raw_format",
        "writer_schema",
        "raw_keys",
        "raw_key_format",
        "key_writer_schema",
        "_keys",
        "_key_schemas",
        "_decode_keys",
        "_values",
        "_value_schemas",
        "_decode",
        "_loader",
        "_columns",
        "_records",
    )

    def __init__(
        self,
        topic: str,
        values: list[Any] | None,
        value_schemas: list[Schema | None] | None,
        keys: list[Any] | None,
        key_schemas: list[Schema | None] | None,
        loader: Callable[[str], list[Any]],
        *,
        original_topic: str | None = None,
        raw_values: list[bytes | None] | None = None,
        decode: Callable[[], tuple[list[Schema | None], list[Any]]] | None = None,
        raw_format: WireFormat | None = None,
        writer_schema: Callable[[int], Mapping[str, Any]] | None = None,
        raw_keys: list[bytes | None] | None = None,
        decode_keys: Callable[[], tuple[list[Schema | None], list[Any]]] | None = None,
        raw_key_format: WireFormat | None = None,
        key_writer_schema: Callable[[int], Mapping[str, Any]] | None = None,
    ) -> None:
        """``loader(name)`` gives the ``partition``, ``kafka_offset``, ``timestamp``,
        ``timestamp_type`` and ``headers`` columns on first read; ``values`` may be ``None`` only
        with ``raw_values`` and ``decode``, which gives ``(value_schemas, values)`` from them, and
        ``keys`` only with ``raw_keys`` and ``decode_keys`` (``(key_schemas, keys)``)."""
        if values is None and decode is None:
            raise ValueError("a batch without values needs decode")
        if keys is None and (decode_keys is None or raw_keys is None):
            raise ValueError("a batch without keys needs raw_keys and decode_keys")
        self.topic = topic
        self.original_topic = topic if original_topic is None else original_topic
        self.raw_values = raw_values
        self.raw_format = raw_format
        self.writer_schema = writer_schema
        self._values = values
        self._value_schemas = value_schemas
        self._decode = decode
        self.raw_keys = raw_keys
        self.raw_key_format = raw_key_format
        self.key_writer_schema = key_writer_schema
        self._keys = keys
        self._key_schemas = key_schemas
        self._decode_keys = decode_keys
        self._loader = loader
        self._columns: dict[str, list[Any]] = {}
        self._records: list[SinkRecord] | None = None

    @classmethod
    def of(cls, records: Sequence[SinkRecord]) -> SinkRecordBatch:
        """A batch of ``records``, which must share a topic and a consumed topic (what the runtime
        would hand to ``put`` for them; for tests and harnesses)."""
        records = list(records)
        destinations = {r.topic for r in records}
        consumed = {r.topic_partition.topic for r in records}
        if len(destinations) > 1 or len(consumed) > 1:
            raise ValueError(f"a batch holds records of one topic, not {sorted(destinations | consumed)}")
        consumed_at = [(r.topic_partition.partition, _consumed_offset(r)) for r in records]
        columns: dict[str, list[Any]] = {
            "partition": [p for p, _ in consumed_at],
            "kafka_offset": [o for _, o in consumed_at],
            "timestamp": [r.timestamp for r in records],
            "timestamp_type": [r.timestamp_type for r in records],
            "headers": [r.headers for r in records],
        }
        topic = destinations.pop() if destinations else ""
        batch = cls(
            topic,
            [r.value for r in records],
            [r.value_schema for r in records],
            [r.key for r in records],
            [r.key_schema for r in records],
            columns.__getitem__,
            original_topic=consumed.pop() if consumed else None,
        )
        batch._records = records
        return batch

    @classmethod
    def concat(cls, parts: Sequence[SinkRecordBatch]) -> SinkRecordBatch:
        """The records of ``parts``, in order, as one batch, for a task that holds consecutive
        batches back to write them together. The parts must share ``topic``, ``original_topic``
        and, if any has raw values, the raw formats (see :meth:`joinable`); raw values and keys
        stay raw, and decoding the joined batch decodes each part (an
        :class:`~connectors.api.UnusableRawValues` then names the part that does not convert)."""
        if len(parts) == 1:
            return parts[0]
        first = parts[0]
        if not all(first.joinable(p) for p in parts[1:]):
            raise ValueError(f"batches of different topics or formats cannot be joined: {list(parts)}")

        def joined(column: Callable[[SinkRecordBatch], list[Any]]) -> list[Any]:
            out: list[Any] = []
            for part in parts:
                out += column(part)
            return out

        raw = first.raw_values is not None
        raw_keys = first.raw_keys is not None
        return cls(
            first.topic,
            None if raw else joined(lambda p: p.values),
            None if raw else joined(lambda p: p.value_schemas),
            None if raw_keys else joined(lambda p: p.keys),
            None if raw_keys else joined(lambda p: p.key_schemas),
            lambda name: joined(lambda p: p._column(name)),
            original_topic=first.original_topic,
            raw_values=joined(lambda p: p.raw_values) if raw else None,  # type: ignore[arg-type,return-value]
            decode=(lambda: (joined(lambda p: p.value_schemas), joined(lambda p: p.values))) if raw else None,
            raw_format=first.raw_format,
            writer_schema=first.writer_schema,
            raw_keys=joined(lambda p: p.raw_keys) if raw_keys else None,  # type: ignore[arg-type,return-value]
            decode_keys=(lambda: (joined(lambda p: p.key_schemas), joined(lambda p: p.keys))) if raw_keys else None,
            raw_key_format=first.raw_key_format,
            key_writer_schema=first.key_writer_schema,
        )

    def joinable(self, other: SinkRecordBatch) -> bool:
        """Whether :meth:`concat` can join ``other`` after this batch: the same topics, and values
        and keys raw in both, in the same formats, or decoded in both."""
        return (
            self.topic == other.topic
            and self.original_topic == other.original_topic
            and (self.raw_values is None) == (other.raw_values is None)
            and (self.raw_keys is None) == (other.raw_keys is None)
            and self.raw_format == other.raw_format
            and self.raw_key_format == other.raw_key_format
            and self.writer_schema == other.writer_schema  # bound methods: equal when of one converter
            and self.key_writer_schema == other.key_writer_schema
        )

    @classmethod
    def group(cls, records: Sequence[SinkRecord]) -> list[SinkRecordBatch]:
        """``records`` as batches of one topic and one consumed topic each (record order kept
        within each), e.g. after a transform routed records to several topics."""
        groups: dict[tuple[str, str], list[SinkRecord]] = {}
        for record in records:
            groups.setdefault((record.topic, record.topic_partition.topic), []).append(record)
        return [cls.of(group) for group in groups.values()]

    @property
    def values(self) -> list[Any]:
        """The converted values (decoded now if the batch came with raw values only)."""
        if self._values is None:
            self._value_schemas, self._values = self._decoded("values", self._decode)
        return self._values

    @property
    def value_schemas(self) -> list[Schema | None]:
        if self._value_schemas is None:
            self._value_schemas, self._values = self._decoded("values", self._decode)
        return self._value_schemas

    @property
    def keys(self) -> list[Any]:
        """The converted keys (decoded now if the batch came with raw keys only)."""
        if self._keys is None:
            self._key_schemas, self._keys = self._decoded("keys", self._decode_keys)
        return self._keys

    @property
    def key_schemas(self) -> list[Schema | None]:
        if self._key_schemas is None:
            self._key_schemas, self._keys = self._decoded("keys", self._decode_keys)
        return self._key_schemas

    def _decoded(
        self, what: str, decode: Callable[[], tuple[list[Schema | None], list[Any]]] | None
    ) -> tuple[list[Schema | None], list[Any]]:
        """``(schemas, data)`` of the raw ``what`` (values or keys), or :class:`UnusableRawValues`."""
        assert decode is not None
        try:
            return decode()
        except UnusableRawValues:
            raise  # from the batch a transform rewrote this one from (it names the consumed offsets)
        except Exception as exc:
            raise UnusableRawValues(
                f"{what} of topic {self.original_topic!r} do not convert ({exc})", self.first_offsets()
            ) from exc

    def first_offsets(self) -> dict[TopicPartition, int]:
        """The first offset of each consumed partition in the batch (what to name in an
        :class:`~connectors.api.UnusableRawValues` that gives the whole batch back)."""
        first: dict[TopicPartition, int] = {}
        topic = self.original_topic
        for partition, offset in zip(self.partitions, self.offsets):
            tp = TopicPartition(topic, partition)
            if offset < first.get(tp, offset + 1):
                first[tp] = offset
        return first

    def _column(self, name: str) -> list[Any]:
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
            n = len(self)
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
        keys = self._keys if self._keys is not None else self.raw_keys
        assert keys is not None  # a batch has keys, or raw keys (__init__)
        return len(keys)

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


def _consumed_offset(record: SinkRecord) -> int:
    return record.kafka_offset if record.original_offset is None else record.original_offset


class SourceRecordBatch(Sequence[SourceRecord]):
    """Records of one poll from one source partition, stored by column.

    A task that reads many similar records (lines of a file, rows of a table, changes of a slot)
    returns one of these instead of a list: the runtime converts a column in one call, produces in
    a tight loop and stores one offset per batch, so no record object is built per message. It is a
    ``Sequence[SourceRecord]`` too: transforms and ``commit_record`` see ordinary records, built on
    first access. Columns, each as long as ``values``:

    * ``values`` and ``keys`` (``None``: no keys), described by one ``value_schema`` / ``key_schema``.
    * ``topic``, when every record goes to one topic; otherwise ``topic`` is ``None`` and
      ``topics`` names each record's topic.
    * ``partitions``: each record's Kafka partition (``None``, for the column or in it: the
      producer's partitioner chooses).
    * ``source_offsets``: each record's offset; a task that computes them only on demand passes
      ``offsets_loader`` and ``last_offset`` instead. ``source_partition`` is every record's.

    Once every record is delivered, the runtime stores ``last_offset`` for ``source_partition``.

    ``serialized=True`` says that ``keys`` and ``values`` already are the bytes the runtime's
    converters would write (a ``None`` value is a tombstone), and there are no schemas. A task
    returns such a batch only when the runtime offered it, written in the wire formats offered
    (:attr:`~connectors.api.SourceTaskContext.serialization`); the runtime then produces the bytes as
    they are. Its records carry the bytes as schemaless values.
    """

    __slots__ = (
        "topic",
        "topics",
        "partitions",
        "values",
        "value_schema",
        "keys",
        "key_schema",
        "source_partition",
        "serialized",
        "_offsets",
        "_offsets_loader",
        "_last_offset",
        "_records",
    )

    def __init__(
        self,
        topic: str | None,
        values: list[Any],
        *,
        value_schema: Schema | None = None,
        keys: list[Any] | None = None,
        key_schema: Schema | None = None,
        source_partition: Mapping[str, Any] | None = None,
        source_offsets: list[Mapping[str, Any] | None] | None = None,
        offsets_loader: Callable[[], list[Mapping[str, Any] | None]] | None = None,
        last_offset: Mapping[str, Any] | None = None,
        topics: list[str] | None = None,
        partitions: list[int | None] | None = None,
        serialized: bool = False,
    ) -> None:
        n = len(values)
        if (topic is None) == (topics is None):
            raise ValueError("a batch has a topic, or a topics column (then its topic is None)")
        columns = (("keys", keys), ("source_offsets", source_offsets), ("topics", topics), ("partitions", partitions))
        for name, column in columns:
            if column is not None and len(column) != n:
                raise ValueError(f"{name} and values must have the same length")
        if serialized and (value_schema is not None or key_schema is not None):
            raise ValueError("serialized records have no schemas")
        self.topic = topic
        self.topics = topics
        self.partitions = partitions
        self.values = values
        self.value_schema = value_schema
        self.keys = keys
        self.key_schema = key_schema
        self.source_partition = source_partition
        self.serialized = serialized
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
                    self.topics if self.topics is not None else repeat(self.topic, n),
                    self.values,
                    repeat(self.value_schema, n),
                    self.keys if self.keys is not None else repeat(None, n),
                    repeat(self.key_schema, n),
                    self.partitions if self.partitions is not None else repeat(None, n),
                    repeat(None, n),
                    repeat(None, n),
                    repeat(self.source_partition, n),
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
        topics = self.topic if self.topics is None else sorted(set(self.topics))
        kind = ", serialized" if self.serialized else ""
        return f"SourceRecordBatch(topic={topics!r}, records={len(self)}{kind})"
