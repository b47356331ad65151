"""In-memory contexts: what the runtime hands a connector or a task, without Kafka or a worker.

Each one records what the code under test asked of it (reconfiguration requests, paused partitions,
rewinds, reported records), so a check can look at it afterwards. They are also handy in a
connector's own unit tests.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import IO, Any

from sluice.connectors.api import LocalFiles, Serialization, SinkRecord, TopicPartition, TransactionContext


def partition_key(partition: Mapping[str, Any]) -> str:
    """A hashable key for a source partition (they are JSON mappings, which cannot key a dict)."""
    return json.dumps(dict(partition), sort_keys=True, default=str)


class MemoryOffsetReader:
    """An offset reader over a dict filled by the test: source partition → last stored offset."""

    def __init__(self, offsets: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        #: Keyed by :func:`partition_key` of the source partition.
        self.stored: dict[str, Mapping[str, Any]] = dict(offsets or {})

    def store(self, partition: Mapping[str, Any] | None, offset: Mapping[str, Any] | None) -> None:
        """Remember ``offset`` as the last delivered offset of ``partition`` (what the runtime does
        once Kafka acknowledged a record); records without a partition or offset store nothing."""
        if partition is not None and offset is not None:
            self.stored[partition_key(partition)] = offset

    def offset(self, partition: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return self.stored.get(partition_key(partition))

    def offsets(self, partitions: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any] | None]:
        return [self.offset(p) for p in partitions]


class MemoryConnectorContext:
    """A connector context that counts reconfiguration requests and keeps raised errors.

    It is a source connector's context too: ``offset_reader`` reads the same offsets as its tasks.
    """

    def __init__(self, offset_reader: MemoryOffsetReader | None = None) -> None:
        self.reconfiguration_requests = 0
        self.errors: list[BaseException] = []
        self._offset_reader = offset_reader or MemoryOffsetReader()

    @property
    def offset_reader(self) -> MemoryOffsetReader:
        return self._offset_reader

    def request_task_reconfiguration(self) -> None:
        self.reconfiguration_requests += 1

    def raise_error(self, error: BaseException) -> None:
        self.errors.append(error)


class OpenLocalFiles:
    """:class:`~connectors.api.LocalFiles` that opens any path with :func:`open`: a test grants all.

    The worker's own grant (``sluice.worker.config.local_paths.PathGrant``) is what confines a connector;
    a connector's unit tests only need its files opened.
    """

    def open(
        self,
        path: str,
        mode: str = "rb",
        *,
        key: str,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
        buffering: int = -1,
    ) -> IO[Any]:
        return open(path, mode, buffering=buffering, encoding=encoding, errors=errors, newline=newline)


class _TaskContext:
    """What every task's context answers: the connector's name, the task's id and its local files."""

    def __init__(self, connector_name: str, task_id: int, local_files: LocalFiles | None = None) -> None:
        self._connector_name = connector_name
        self._task_id = task_id
        self._local_files = local_files if local_files is not None else OpenLocalFiles()

    @property
    def connector_name(self) -> str:
        return self._connector_name

    @property
    def task_id(self) -> int:
        return self._task_id

    @property
    def local_files(self) -> LocalFiles:
        """What the task opens its files with (:class:`OpenLocalFiles` unless the test gave one)."""
        return self._local_files


class MemorySourceTaskContext(_TaskContext):
    """A source task's context: its name, its id and an offset reader over a dict.

    ``serialization`` is ``None`` by default, as from a runtime that runs a transform: the task
    returns records for the runtime to convert, which is what the checks look at.
    ``transaction_context`` is ``None`` by default too, as on a worker without exactly-once
    delivery; a test of connector-defined transaction boundaries passes its own.
    """

    def __init__(
        self,
        offset_reader: MemoryOffsetReader | None = None,
        *,
        connector_name: str = "kit",
        task_id: int = 0,
        serialization: Serialization | None = None,
        local_files: LocalFiles | None = None,
        transaction_context: TransactionContext | None = None,
    ) -> None:
        super().__init__(connector_name, task_id, local_files)
        self._offset_reader = offset_reader or MemoryOffsetReader()
        self._serialization = serialization
        self._transaction_context = transaction_context

    @property
    def serialization(self) -> Serialization | None:
        return self._serialization

    @property
    def transaction_context(self) -> TransactionContext | None:
        return self._transaction_context

    @property
    def offset_reader(self) -> MemoryOffsetReader:
        return self._offset_reader


class CollectingErrantRecordReporter:
    """An errant record reporter that keeps every ``(record, error)`` it is given."""

    def __init__(self) -> None:
        self.reported: list[tuple[SinkRecord, BaseException]] = []
        self._lock = threading.Lock()  # a sink may report from a thread of its own

    def report(self, record: SinkRecord, error: BaseException) -> None:
        with self._lock:
            self.reported.append((record, error))


class MemorySinkTaskContext(_TaskContext):
    """A sink task's context: an assignment the test sets, and a log of what the task asked for.

    ``paused`` holds the partitions paused and not resumed; ``rewinds`` every rewind in order;
    ``commit_requests`` counts :meth:`request_commit` calls. ``errant_record_reporter`` is a
    :class:`CollectingErrantRecordReporter`, or ``None`` when built with ``reporter=False``: the
    SPI allows a runtime without one, and a task must then cope.
    """

    def __init__(
        self,
        assignment: Sequence[TopicPartition] = (),
        *,
        connector_name: str = "kit",
        task_id: int = 0,
        reporter: bool = True,
        local_files: LocalFiles | None = None,
    ) -> None:
        super().__init__(connector_name, task_id, local_files)
        self._assignment = set(assignment)
        self.paused: set[TopicPartition] = set()
        self.rewinds: list[dict[TopicPartition, int]] = []
        self.commit_requests = 0
        self.reporter = CollectingErrantRecordReporter() if reporter else None

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        """Set the assignment (the test plays the consumer's rebalance)."""
        self._assignment = set(partitions)

    def assignment(self) -> set[TopicPartition]:
        return set(self._assignment)

    def pause(self, *partitions: TopicPartition) -> None:
        self.paused.update(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self.paused.difference_update(partitions)

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.rewinds.append(dict(offsets))

    def request_commit(self) -> None:
        self.commit_requests += 1

    @property
    def errant_record_reporter(self) -> CollectingErrantRecordReporter | None:
        return self.reporter
