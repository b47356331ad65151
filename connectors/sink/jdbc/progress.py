"""What the JDBC sink task has written, holds back, and had refused: what its offsets depend on.

:class:`Unwritten` keeps, per consumed partition, the first offset a failed write left out, so
``pre_commit`` never passes it; :class:`HeldBatches` keeps the small batches ``put`` holds back to
write together (see the task's module docstring); :class:`RowRejected` is a row the database
refused, found by writing a failed chunk row by row; :class:`WriteRetries` counts the failures
in a row for want of the database.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any, NoReturn

from sluice.connectors.api import ConnectError, RetriableError, SinkRecordBatch, TopicPartition
from sluice.connectors.jdbc_common.errors import describe
from sluice.connectors.sink.jdbc.rows import TopicRecords

log = logging.getLogger("sluice.connectors.sink.jdbc.task")  # the task's own messages


class Unwritten:
    """Per consumed partition, the first offset not in the database; ``written`` counts records
    that are."""

    __slots__ = ("_first", "written")

    def __init__(self) -> None:
        self._first: dict[TopicPartition, int] = {}
        self.written = 0

    def mark(self, groups: list[TopicRecords]) -> None:
        """``groups`` failed: their partitions' offsets stop at their first record."""
        first = self._first
        for group in groups:
            for partition, offset in zip(group.partitions, group.offsets):
                tp = TopicPartition(group.consumed_topic, partition)
                if offset < first.get(tp, offset + 1):
                    first[tp] = offset

    def written_now(self, groups: list[TopicRecords]) -> None:
        """``groups`` are committed: a partition whose first unwritten record they cover is clear."""
        first = self._first
        if first:
            for group in groups:
                for partition, offset in dict(zip(group.partitions, group.offsets)).items():
                    tp = TopicPartition(group.consumed_topic, partition)
                    if tp in first and offset >= first[tp]:
                        del first[tp]
        self.written += sum(len(g) for g in groups)

    def safe(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]:
        """``offsets``, each stopped at its partition's first unwritten record."""
        first = self._first
        if not first:
            return offsets
        return {tp: min(offset, first[tp]) if tp in first else offset for tp, offset in offsets.items()}


#: Polls held back at most, whatever ``batch.size`` says: what is held stays within this many
#: ``max.poll.records`` polls (a ``batch.size`` of a billion would otherwise hold a whole offset
#: flush interval's records in memory).
MAX_HELD_BATCHES = 64


class HeldBatches:
    """Consecutive batches that can be joined (:meth:`SinkRecordBatch.joinable`), held back to be
    written as one chunk of at most ``limit`` records and :data:`MAX_HELD_BATCHES` batches."""

    __slots__ = ("_batches", "count")

    def __init__(self) -> None:
        self._batches: list[SinkRecordBatch] = []
        self.count = 0

    def __bool__(self) -> bool:
        return bool(self._batches)

    @property
    def batches(self) -> tuple[SinkRecordBatch, ...]:
        return tuple(self._batches)

    def fits(self, batch: SinkRecordBatch, limit: int) -> bool:
        """Whether ``batch`` may join what is held (nothing held: always)."""
        held = self._batches
        return not held or (held[-1].joinable(batch) and self.count + len(batch) <= limit)

    def add(self, batch: SinkRecordBatch) -> None:
        self._batches.append(batch)
        self.count += len(batch)

    def full(self, limit: int) -> bool:
        """Whether what is held should go now: ``limit`` records, or as many batches as may be held."""
        return self.count >= limit or len(self._batches) >= MAX_HELD_BATCHES

    def take(self) -> SinkRecordBatch:
        """What is held, as one batch, and hold nothing."""
        batch = SinkRecordBatch.concat(self._batches)
        self.clear()
        return batch

    def clear(self) -> None:
        self._batches, self.count = [], 0


class Rejected(Exception):
    """A chunk failed on a row's data (:class:`~sluice.connectors.jdbc_common.errors.Failure` ``ROW``)."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class RowRejected(Exception):
    """A row of the chunk the database rejected (found while writing it row by row)."""

    def __init__(self, group: int, record: int, message: str) -> None:
        super().__init__(message)
        self.group = group
        self.record = record


def drop_rejected(rows: Any, group: int, exclude: set[tuple[int, int]]) -> None:
    """Take the rows of records ``(group, record)`` in ``exclude`` out of ``rows``."""
    keep = [i for i, rec in enumerate(rows.row_records) if (group, rec) not in exclude]
    if len(keep) != len(rows.row_records):
        rows.rows = [rows.rows[i] for i in keep]
        rows.row_records = [rows.row_records[i] for i in keep]


class WriteRetries:
    """Confluent's ``max.retries`` and ``retry.backoff.ms`` for writes that fail for want of the
    database: each failure in a row waits the backoff and asks the runtime to offer the records
    again, until one more than ``max.retries`` fails the task."""

    __slots__ = ("in_a_row", "_limit", "_backoff_s", "_stopping", "_target")

    def __init__(self, limit: int, backoff_ms: int, stopping: threading.Event, target: str) -> None:
        self.in_a_row = 0
        self._limit, self._backoff_s = limit, backoff_ms / 1000
        self._stopping, self._target = stopping, target

    def failed(self, exc: Exception) -> NoReturn:
        """Wait the backoff (a stopping task does not) and raise :class:`RetriableError`, or
        :class:`ConnectError` once the retries are spent."""
        self.in_a_row += 1
        what = describe(exc)
        if self.in_a_row > self._limit:
            raise ConnectError(
                f"Writing to {self._target} failed {self.in_a_row} times in a row (max.retries={self._limit}): {what}"
            ) from exc
        log.warning(
            "Writing to %s failed (attempt %d of %d), retrying in %d ms: %s",
            self._target, self.in_a_row, self._limit + 1, self._backoff_s * 1000, what,
        )  # fmt: skip
        self._stopping.wait(self._backoff_s)
        raise RetriableError(f"Database unavailable: {what}") from exc
