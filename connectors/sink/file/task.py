"""The FileStream sink task: appends each record's value as one line of a file (or standard output)."""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import IO, Any

import orjson

from sluice.connectors.api import ConnectError, SinkRecordBatch, SinkTask, SinkTaskContext, TopicPartition
from sluice.connectors.sink.file.config import FileStreamSinkConfig

log = logging.getLogger(__name__)

_JSON_OPTIONS = orjson.OPT_NON_STR_KEYS


class FileStreamSinkTask(SinkTask):
    """Appends ``value`` + newline per record; :meth:`flush` makes the lines durable with fsync.

    :meth:`put` writes a whole batch with one write call into the file's buffer; the runtime
    commits consumer offsets only after :meth:`pre_commit` (which flushes and fsyncs) returns,
    so a crash can duplicate lines but never lose them. Values become text as follows: ``str``
    as is, ``bytes`` decoded as UTF-8 (invalid bytes replaced), ``dict``/``list``/``tuple`` as
    compact JSON, ``None`` as ``null`` and booleans as ``true``/``false`` (what Connect's
    ``toString`` writes), anything else with ``str()``.

    :meth:`start`, :meth:`put`, :meth:`flush` run on the task thread; :meth:`stop` may come from a
    control thread.
    """

    version = "0.1.0"

    def __init__(self) -> None:
        # Serializes writes on the task thread against close() from stop() on a control thread.
        self._lock = threading.Lock()
        self._out: IO[str] | None = None
        self._owns_out = False
        self._filename = ""
        self._stopped = False

    def start(self, config: Mapping[str, Any], context: SinkTaskContext) -> None:
        """Open the file for appending (created if missing). Thread: the task thread."""
        self.context = context
        parsed = FileStreamSinkConfig.from_task_config(config)
        self._filename = parsed.file
        self._stopped = False
        if not self._filename:
            self._out = sys.stdout
            self._owns_out = False
            log.info("Writing records to standard output")
            return
        try:
            # newline="" keeps "\n" as is on every platform; errors="replace" because a lone
            # surrogate in one value must not fail the whole batch.
            # Through the grant, not open(): the path is checked again now, and a symlink leading out
            # of connector.allowed.paths is refused before anything outside is created.
            self._out = context.local_files.open(
                self._filename, "a", key="file", encoding="utf-8", errors="replace", newline=""
            )
        except OSError as exc:
            raise ConnectError(f"Cannot open {self._filename} for appending: {exc}") from exc
        self._owns_out = True
        log.info("Appending records to %s", self._filename)

    def put(self, records: SinkRecordBatch) -> None:
        """Write the batch's values, one line each, joined into one block of text. Thread: the task thread."""
        if not records:
            return
        values = records.values  # the column: no record objects needed
        try:
            # All strings is the common case; join finds out at C speed and raises otherwise.
            text = "\n".join(values)
        except TypeError:
            text = "\n".join([value if value.__class__ is str else render_value(value) for value in values])
        with self._lock:
            out = self._live_output()
            try:
                out.write(text + "\n")
            except OSError as exc:
                raise ConnectError(f"Cannot write to {self._filename or 'standard output'}: {exc}") from exc

    def flush(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Flush and fsync so every line handed to :meth:`put` is on disk. Thread: the task thread."""
        with self._lock:
            out = self._live_output()
            try:
                out.flush()
                if self._owns_out:
                    # Standard output may be a pipe or a terminal, which cannot be fsynced.
                    os.fsync(out.fileno())
            except OSError as exc:
                raise ConnectError(f"Cannot flush {self._filename or 'standard output'}: {exc}") from exc

    def stop(self) -> None:
        """Flush and close the file (standard output stays open). Never raises. Thread: any."""
        with self._lock:
            self._stopped = True
            out, self._out = self._out, None
            if out is None:
                return
            try:
                if self._owns_out:
                    out.close()
                else:
                    out.flush()
            except (OSError, ValueError):
                log.warning("Closing %s failed", self._filename or "standard output", exc_info=True)

    def _live_output(self) -> IO[str]:
        if self._out is None:
            state = "stopped" if self._stopped else "not started"
            raise ConnectError(f"The FileStream sink task is {state}")
        return self._out


def render_value(value: Any) -> str:
    """The text of one record value (everything but ``str``, which the hot loop handles itself)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (dict, list, tuple)):
        return orjson.dumps(value, default=_json_default, option=_JSON_OPTIONS).decode("utf-8")
    return str(value)


def _json_default(value: Any) -> Any:
    # What orjson cannot encode by itself; bytes as base64 like Connect's JsonConverter.
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (_dt.timedelta,)):
        return value.total_seconds()
    return str(value)
