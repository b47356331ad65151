"""The error hierarchy of the connector SPI.

Each class tells the runtime what to do with a failure and the user whose fault it is:

* :class:`ConfigError`: the user's configuration is wrong; nothing is retried, the message names the key.
* :class:`RetriableError`: a transient failure of an external system; the runtime retries with backoff.
* :class:`DataError`: a record cannot be converted or processed; ``errors.tolerance`` decides whether
  the task fails or the record is skipped (and dead-lettered).
* :class:`UnwritableRecordError`: a :class:`DataError` from ``SinkTask.put`` that names the record.
* :class:`UnusableRawValues`: a sink task that took raw values could not use some; the runtime
  delivers them again, decoded, under ``errors.*``.
* :class:`ConnectError`: anything else that should fail the task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from sluice.connectors.api.records import SinkRecord, TopicPartition


class ConnectError(Exception):
    """Root of every error a connector, converter or the runtime raises on purpose."""


class ConfigError(ConnectError):
    """A configuration value is missing, unknown or invalid.

    ``key`` names the offending configuration key when there is one, so REST validation can attach
    the message to that key.
    """

    def __init__(self, message: str, *, key: str | None = None, problems: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.key = key
        #: Every offending key with its message, when validation found several.
        self.problems = problems or ({key: message} if key else {})


class RetriableError(ConnectError):
    """A transient failure (a dropped connection, a timeout): the runtime retries the operation."""


class DataError(ConnectError):
    """A record's data does not match what was expected (schema mismatch, malformed bytes)."""


class UnwritableRecordError(DataError):
    """``SinkTask.put`` cannot write ``record`` to the destination (a value that is not an object,
    a type the column or mapping refuses, a null the sink must not ignore).

    Raise it, like any :class:`DataError` from ``put``, before anything of the batch is written (a
    rolled-back transaction counts as nothing written): the runtime then applies ``errors.*`` to
    ``record`` (the dead-letter queue with stage ``TASK_PUT``, or the task fails at its offset) and
    offers the rest of the batch again. A plain :class:`DataError` makes the runtime find the
    record itself by offering the batch again in halves. ``record`` may belong to an earlier
    ``put`` (a write the task had deferred); it is then reported and the batch offered again whole.
    """

    def __init__(self, message: str, record: SinkRecord) -> None:
        super().__init__(message)
        self.record = record


class UnusableRawValues(DataError):
    """A sink task that takes raw values (:attr:`~connectors.api.SinkTask.value_format`) cannot use
    the raw bytes of some records (values, or keys handed over raw too): malformed JSON, a number
    its parser does not take, a row group a reader refuses.

    ``offsets`` names, per topic partition (as consumed), the first record the task has not taken.
    The task must have taken nothing of those partitions from there on (what it buffered of them
    it drops); records before are its own. The runtime then consumes those partitions again from
    there and hands the records over decoded by the value converter, record by record where a
    conversion fails, so a malformed value is retried, dead-lettered or fails the task under
    ``errors.*`` like any other; once past what had been consumed, raw values resume. Raise it from
    ``put``, ``flush`` or ``pre_commit``: no connector rewinds its consumer for this. Reading
    ``values`` of a raw batch whose bytes do not convert raises it on its own.
    """

    def __init__(self, message: str, offsets: Mapping[TopicPartition, int]) -> None:
        super().__init__(message)
        self.offsets = dict(offsets)


class NotFoundError(ConnectError):
    """A named resource (connector, task, plugin) does not exist."""


class AlreadyExistsError(ConnectError):
    """A resource with that name already exists."""
