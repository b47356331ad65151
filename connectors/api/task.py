"""Tasks: the units that move data.

A :class:`SourceTask` is polled for records; a :class:`SinkTask` is handed batches of consumed
records. Both run on a thread of their own; the docstring of every method names the thread that
calls it.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NamedTuple, Protocol

from sluice.connectors.api.converter import WireFormat
from sluice.connectors.api.local_files import LocalFiles
from sluice.connectors.api.records import (
    RecordMetadata,
    SinkRecord,
    SinkRecordBatch,
    SourceRecord,
    SourceRecordBatch,
    TopicPartition,
)


class OffsetReader(Protocol):
    """Reads the source offsets the runtime stored for this connector."""

    def offset(self, partition: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The last stored offset of ``partition``, or ``None`` if there is none."""

    def offsets(self, partitions: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any] | None]:
        """The stored offsets of ``partitions``, in the same order (``None`` where absent)."""


class TaskContext(Protocol):
    """What every task may ask of the runtime."""

    @property
    def connector_name(self) -> str: ...

    @property
    def task_id(self) -> int: ...

    @property
    def local_files(self) -> LocalFiles:
        """Opens the local files the task's config names, within ``connector.allowed.paths``.

        Open every such file through it (never with :func:`open`): it checks the path again at
        that moment, so a symlink planted after the config was validated does not lead outside.
        Thread: any.
        """
        ...


class Serialization(NamedTuple):
    """The bytes the runtime writes for a source task's keys and values, offered to a task that
    can write them itself (see :attr:`SourceTaskContext.serialization`)."""

    key: WireFormat
    value: WireFormat


class TransactionContext(Protocol):
    """A source task's control over where its transactions end (Connect's ``TransactionContext``).

    Offered only to a task whose connector runs with exactly-once delivery and
    ``transaction.boundary=connector`` (see :attr:`SourceTaskContext.transaction_context`). A
    request takes effect as the runtime next dispatches records, never in the middle of a call:
    both methods only note what the task asked. The positions they name count every record
    :meth:`SourceTask.poll` returned, including a record a transform then dropped: its place in
    the batch still marks where the transaction ends.

    Thread: the task thread (from :meth:`SourceTask.poll` or :meth:`SourceTask.commit_record`).
    """

    def commit_transaction(self, record: SourceRecord | None = None) -> None:
        """Commit the current transaction.

        Without ``record``: once the records of the current poll (or, called between polls, of the
        next one) are sent, the transaction holding them commits, with their source offsets.
        With ``record`` (one :meth:`SourceTask.poll` returned or will return): the transaction
        commits right after that record is sent, and the records after it start the next one.
        """

    def abort_transaction(self, record: SourceRecord | None = None) -> None:
        """Abort the current transaction: its records never reach a ``read_committed`` consumer and
        its source offsets are not stored.

        Without ``record``: once the records of the current (or the next) poll are sent, the
        transaction holding them is aborted. With ``record``: the transaction that holds that
        record is aborted with it, and the records returned after it in the same poll go into the
        next transaction.
        """


class SourceTaskContext(TaskContext, Protocol):
    """Context of a source task."""

    @property
    def offset_reader(self) -> OffsetReader: ...

    @property
    def serialization(self) -> Serialization | None:
        """What the key and value converters write, when the runtime will produce a task's own
        bytes as they are; ``None`` when it will not (a transform runs, the task overrides
        :meth:`SourceTask.commit_record`, or a converter declares an ``opaque`` wire format).

        A task that can write exactly these bytes may return
        :class:`~connectors.api.SourceRecordBatch` es with ``serialized=True``; anything else it
        returns is converted as usual, so a task may serialize some records and not others. Fixed
        for the task's life; read it from :meth:`SourceTask.start` on. Thread: the task thread.
        """

    @property
    def transaction_context(self) -> TransactionContext | None:
        """The runtime's transaction control: present only when the connector runs with
        exactly-once delivery (the worker's ``exactly.once.source.support=enabled``) and
        ``transaction.boundary=connector``; ``None`` otherwise, and then the runtime alone decides
        where transactions end, if it uses any. Fixed for the task's life; read it from
        :meth:`SourceTask.start` on. Thread: the task thread.
        """


class ErrantRecordReporter(Protocol):
    """Sends a record that :meth:`SinkTask.put` could not write to the dead-letter queue (KIP-610).

    Whether the task goes on or fails follows ``errors.tolerance``.
    """

    def report(self, record: SinkRecord, error: BaseException) -> None: ...


class SinkTaskContext(TaskContext, Protocol):
    """Context of a sink task: control over its consumer."""

    def assignment(self) -> set[TopicPartition]:
        """The partitions currently assigned to this task."""

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching from ``partitions`` (back-pressure) until :meth:`resume`."""

    def resume(self, *partitions: TopicPartition) -> None:
        """Fetch from ``partitions`` again."""

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Consume from the given offsets next (e.g. after a failed write was rolled back)."""

    def request_commit(self) -> None:
        """Ask for an offset commit soon, without waiting for ``offset.flush.interval.ms``."""

    @property
    def errant_record_reporter(self) -> ErrantRecordReporter | None: ...


class Task(abc.ABC):
    """Base of source and sink tasks."""

    version: ClassVar[str] = "0.0.0"

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop the task.

        Thread: a control thread of the runtime, possibly while the task thread is inside
        :meth:`SourceTask.poll` or :meth:`SinkTask.put`; it must make that call return promptly.
        """


class SourceTask(Task):
    """Reads an external system and returns records for Kafka.

    Delivery contract: the runtime stores ``source_offset`` of a record only after Kafka
    acknowledged it, so after a crash :meth:`start` resumes from the last delivered offsets.
    """

    context: SourceTaskContext

    @abc.abstractmethod
    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        """Start with a task configuration from ``SourceConnector.task_configs``.

        Thread: the task thread, before any :meth:`poll`. Read stored offsets here, through
        ``context.offset_reader``; ``context.serialization`` says whether the task may return its
        records already serialized.
        """

    @abc.abstractmethod
    def poll(self) -> list[SourceRecord] | SourceRecordBatch | None:
        """Return the next batch of records, or ``None``/``[]`` when nothing is ready.

        A :class:`~connectors.api.records.SourceRecordBatch` (records of one source partition, by
        column) is the fast way to return many similar records; a list of
        :class:`~connectors.api.records.SourceRecord` s is the simple one. Both go the same way.

        Thread: the task thread. Must return within about a second even without data, so pause and
        stop are observed; raise ``RetriableError`` for transient failures.
        """

    def commit(self) -> None:
        """Called on the task thread after the runtime stored a batch of offsets."""

    def commit_record(self, record: SourceRecord, metadata: RecordMetadata | None) -> None:
        """Called once for each record :meth:`poll` returned: when Kafka acknowledged it, with
        where it was stored, or with ``metadata`` ``None`` when it will never be produced (a
        transform filtered it out, or ``errors.tolerance=all`` skipped it). ``record`` is the
        record as the task returned it, before transforms. Only called when a task overrides it,
        because the per-record callback has a cost.

        Thread: the task thread.
        """


class ValueFormat(enum.StrEnum):
    """How a sink task wants record values (:attr:`SinkTask.value_format`)."""

    CONNECT = "connect"
    RAW_JSON = "raw_json"
    #: Raw values in any format a columnar fast path reads: schemaless JSON, JSON with schemas
    #: (the envelope) and Avro; the batch's :attr:`~connectors.api.SinkRecordBatch.raw_format` says which.
    #: Raw keys too, in those formats (:attr:`~connectors.api.SinkRecordBatch.raw_key_format`).
    RAW_TYPED = "raw_typed"
    RAW_BYTES = "raw_bytes"


class SinkTask(Task):
    """Writes records consumed from Kafka to an external system.

    Delivery contract: the runtime commits a partition's consumer offset only up to what
    :meth:`pre_commit` returns, so a task that buffers returns the offsets it made durable.
    Offsets here are Kafka's "next offset to consume" (the last written record's offset + 1).
    """

    context: SinkTaskContext

    #: How the task wants record values, said once: :attr:`ValueFormat.CONNECT` (the default)
    #: for converted Connect data; :attr:`ValueFormat.RAW_JSON` for the consumed bytes whenever the
    #: value converter writes schemaless JSON; :attr:`ValueFormat.RAW_TYPED` for them also when it
    #: writes JSON with schemas (decimals as base64) or Avro; :attr:`ValueFormat.RAW_BYTES` for the
    #: consumed bytes whatever the converter. Raw values come in
    #: :attr:`~connectors.api.SinkRecordBatch.raw_values` only when the converter allows and no
    #: transform runs, or each one keeps raw values raw
    #: (:meth:`~connectors.api.Transformation.keeps_raw_values`: ExtractNewRecordState on JSON
    #: with schemas); the batch's ``values`` are then decoded on first read. The runtime does
    #: not check raw bytes: the task parses what it writes (or checks it, e.g. with
    #: :func:`sluice.converters.json_documents.first_malformed`), and raises
    #: :class:`~connectors.api.UnusableRawValues` for what it cannot use, which the runtime
    #: delivers again decoded. The runtime reads it after :meth:`start`, so a task may set it on
    #: itself there when only some configurations write raw values. :attr:`ValueFormat.RAW_TYPED`
    #: asks for the raw keys too: a batch with raw values also has
    #: :attr:`~connectors.api.SinkRecordBatch.raw_keys` when the key converter writes JSON or Avro
    #: as values would qualify, and its ``keys`` are then decoded on first read (raising
    #: :class:`~connectors.api.UnusableRawValues` as values do).
    value_format: ValueFormat = ValueFormat.CONNECT

    @abc.abstractmethod
    def start(self, config: Mapping[str, Any], context: SinkTaskContext) -> None:
        """Start with a task configuration. Thread: the task thread, before anything else."""

    def open(self, partitions: Sequence[TopicPartition]) -> None:
        """Partitions were assigned to this task. Thread: the task thread (inside the consumer poll)."""

    @abc.abstractmethod
    def put(self, records: SinkRecordBatch) -> None:
        """Write or buffer a batch of records (of one topic; iterate it for :class:`SinkRecord` s,
        or read its columns). Thread: the task thread.

        Raise ``RetriableError`` to have the same batch offered again after a backoff.

        An empty batch says the consumer has caught up (its poll returned fewer records than it
        may, none at all included): a task that holds batches back to write them together
        (:meth:`SinkRecordBatch.concat`) writes them now. Whatever it holds it writes by
        :meth:`pre_commit` too, whose offsets must not pass a record not yet durable.

        A record the task cannot write (bad data, not a transient failure) is either reported
        through ``context.errant_record_reporter`` while the rest is written (for records found
        bad only after writing began, e.g. rows a database refused), or raised as a ``DataError``
        before anything of the batch is written, preferably an ``UnwritableRecordError`` naming
        the record. The runtime then applies ``errors.*`` to that record (dead-letter queue,
        log, or fail the task at its offset) and offers the other records again; for a plain
        ``DataError`` it finds the record by offering the batch in halves. Either way no good
        record is lost with a bad one, and nothing is skipped without a word.

        A tombstone (``None`` value) the sink does not apply is not an error: count it and log
        one WARNING per batch with the count.
        """

    def flush(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Make everything handed to :meth:`put` durable. Thread: the task thread."""

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]:
        """Return the offsets that are safe to commit (default: flush, then all of ``offsets``).

        Thread: the task thread, every ``offset.flush.interval.ms`` and before partitions are closed.
        """
        self.flush(offsets)
        return offsets

    def end_of_input(self, offsets: Mapping[TopicPartition, int]) -> None:
        """A bounded run has no more input for these partitions: commit what is held back.

        A backfill that reprocesses a topic range into this sink calls it once, after the last
        :meth:`put` and before the final :meth:`flush` and :meth:`pre_commit`, with the offset
        after each partition's last record. A sink that keeps records back waiting for more (an
        object not yet at its ``flush.size``) writes them now, as the stream would have once more
        records came; the default does nothing, which is right for a sink that writes everything
        on :meth:`flush`. A streaming task never gets this call. Thread: the task thread.
        """

    def close(self, partitions: Sequence[TopicPartition]) -> None:
        """Partitions were revoked: drop their buffers. Thread: the task thread."""
