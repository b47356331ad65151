"""The FileStream source task: tails one file (or standard input) and emits each line as a record.

Behaviour follows Kafka Connect's ``FileStreamSourceTask``: lines end at ``\\n``, ``\\r\\n`` or
``\\r``; a line without its terminator yet is held back until the terminator arrives; each record's
source offset is ``{"position": <byte offset just after the line>}`` in the partition
``{"filename": <file>}``; a restart resumes at the stored position. Unlike Connect, positions are
always byte offsets (Connect counts characters but skips bytes on restart, which goes wrong on
multi-byte text).

Speed: the file is read in binary chunks and split with ``bytes`` methods that run in C; an
all-ASCII chunk is decoded once and split as text; positions are computed with running sums; and
records are built in one tight loop sharing a single source-partition dict. A poll gathers
several chunks until it has ``batch.size`` lines. See ``perf-notes.md`` §5.5 for the produce rate
this has to stay well ahead of.
"""

from __future__ import annotations

import logging
import operator
import os
import re
import select
import sys
import threading
import time
from collections.abc import Mapping
from itertools import accumulate, count
from typing import IO, Any

from sluice.connectors.api import (
    STRING_SCHEMA,
    ConnectError,
    SourceRecord,
    SourceRecordBatch,
    SourceTask,
    SourceTaskContext,
)
from sluice.connectors.source.file.config import FileStreamSourceConfig

log = logging.getLogger(__name__)

FILENAME_FIELD = "filename"
POSITION_FIELD = "position"

# How long an idle poll waits before returning None. Short at end of file right after data, so new
# lines show up quickly while a writer is active; doubling up to a second while the file stays idle
# (as Connect waits), so idle tasks do not wake ten times a second each; a second for a missing
# file, as Connect does. Every wait ends at once on stop().
_EOF_WAIT_S = 0.1
_EOF_WAIT_MAX_S = 1.0
_MISSING_FILE_WAIT_S = 1.0
_STDIN_WAIT_S = 0.1
# A poll with a huge batch.size still returns in bounded time.
_MAX_POLL_S = 0.5

_ANY_TERMINATOR = re.compile(rb"(\r\n|\r|\n)")
_CR = 13

# _build fills SourceRecord positionally; if the SPI ever reorders its fields, fail at import
# rather than emit records with values in the wrong slots.
_RECORD_FIELDS = (
    "topic",
    "value",
    "value_schema",
    "key",
    "key_schema",
    "partition",
    "timestamp",
    "headers",
    "source_partition",
    "source_offset",
)
if SourceRecord._fields != _RECORD_FIELDS:  # pragma: no cover - guards a future SPI change
    raise ImportError(f"FileStreamSourceTask expects SourceRecord fields {_RECORD_FIELDS}, got {SourceRecord._fields}")


class FileStreamSourceTask(SourceTask):
    """Reads lines from ``file`` (standard input when empty) and returns them as string records.

    One instance per task thread. :meth:`start` and :meth:`poll` run on the task thread;
    :meth:`stop` comes from a control thread and makes a waiting :meth:`poll` return at once.
    """

    version = "0.1.0"

    #: Bytes requested per read. Measured faster than 1 MiB (about 1.4x): a 64 KiB chunk and the
    #: text decoded from it stay in the CPU cache, and fewer records are alive between garbage
    #: collections. Tests shrink it to exercise lines that straddle reads.
    read_chunk_size: int = 64 << 10

    def __init__(self) -> None:
        self._stopping = threading.Event()
        # Guards the stream between the task thread (reads) and stop() (close).
        self._lock = threading.Lock()
        self._filename = ""
        self._topic = ""
        self._batch_size = 2000
        self._stream: IO[bytes] | None = None
        self._stdin_fd: int | None = None
        # One dict shared by every record: the runtime only reads it, and building one per line
        # would cost as much as the rest of the record.
        self._partition: dict[str, Any] | None = None
        # Byte offset just after the last complete line taken from the file.
        self._position = 0
        # Bytes after the last complete line, kept until their terminator arrives.
        self._tail: list[bytes] = []
        # Lines (and their end positions) of the last chunk beyond batch.size, returned first by
        # the next poll.
        self._pending: tuple[list[str], list[int]] = ([], [])
        self._warned_missing = False
        self._eof_wait = _EOF_WAIT_S

    # -- SPI ----------------------------------------------------------------------------------

    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        """Parse the task configuration and look up the stored position. Thread: the task thread."""
        self.context = context
        parsed = FileStreamSourceConfig.from_task_config(config)
        self._filename = parsed.file
        self._topic = parsed.topic
        self._batch_size = parsed.batch_size
        self._stopping.clear()
        self._stream = None
        self._stdin_fd = None
        self._tail = []
        self._pending = ([], [])
        if not self._filename:
            # Standard input cannot be rewound, so its records carry no source partition or offset
            # (Connect stores {"position": null} for them, which nothing can use).
            self._partition = None
            self._position = 0
            self._stdin_fd = _stdin_fileno()
            log.info("Reading lines from standard input into topic %s", self._topic)
            return
        self._partition = {FILENAME_FIELD: self._filename}
        self._position = self._stored_position(context)
        log.info(
            "Reading lines from %s into topic %s, starting at byte %d", self._filename, self._topic, self._position
        )

    def poll(self) -> SourceRecordBatch | None:
        """Return up to ``batch.size`` new lines, or ``None`` after a short wait when there are none.

        Thread: the task thread. Returns within about a second whatever happens, and at once after
        :meth:`stop`.
        """
        lines, ends = self._pending
        self._pending = ([], [])
        deadline = time.monotonic() + _MAX_POLL_S
        while len(lines) < self._batch_size and not self._stopping.is_set():
            if self._partition is not None and self._stream is None and not self._open():
                if lines:
                    break
                self._stopping.wait(_MISSING_FILE_WAIT_S)
                return None
            chunk = self._read()
            if not chunk:  # None: standard input had nothing in time; b"": end of file for now
                if lines:
                    break
                if chunk is not None:
                    self._stopping.wait(self._eof_wait)  # the writer may append more
                    self._eof_wait = min(2 * self._eof_wait, _EOF_WAIT_MAX_S)
                return None
            self._eof_wait = _EOF_WAIT_S
            # A chunk without a complete line adds nothing; the loop reads on at once.
            self._append_lines(chunk, lines, ends)
            if time.monotonic() > deadline:
                break
        if len(lines) > self._batch_size:
            # The rest of the last chunk's lines open the next poll.
            self._pending = (lines[self._batch_size :], ends[self._batch_size :])
            del lines[self._batch_size :], ends[self._batch_size :]
        if not lines:
            return None
        return self._batch(lines, ends)

    def _batch(self, lines: list[str], ends: list[int]) -> SourceRecordBatch:
        """The lines as one columnar batch; offsets as dicts only if someone asks for each."""
        if self._partition is None:  # standard input: nothing to resume from
            return SourceRecordBatch(self._topic, lines, value_schema=STRING_SCHEMA)
        field = POSITION_FIELD
        return SourceRecordBatch(
            self._topic,
            lines,
            value_schema=STRING_SCHEMA,
            source_partition=self._partition,
            offsets_loader=lambda: [{field: end} for end in ends],
            last_offset={field: ends[-1]},
        )

    def stop(self) -> None:
        """Make a waiting poll return and close the file. Thread: a control thread; never raises."""
        self._stopping.set()
        with self._lock:
            stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.close()
            except OSError:
                log.debug("Closing %s failed", self._filename, exc_info=True)

    # -- reading --------------------------------------------------------------------------------

    def _stored_position(self, context: SourceTaskContext) -> int:
        assert self._partition is not None
        offset = context.offset_reader.offset(self._partition)
        if offset is None:
            return 0
        position = offset.get(POSITION_FIELD)
        if position is None:
            return 0
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ConnectError(
                f"Stored offset {dict(offset)!r} for {self._filename} is invalid: "
                f"'{POSITION_FIELD}' must be a non-negative integer"
            )
        return position

    def _open(self) -> bool:
        """Open the file at the stored position; ``False`` if it does not exist (yet)."""
        try:
            # Through the grant, not open(): the path is checked again now, so a symlink planted in
            # an allowed directory since the config was validated does not lead out of it.
            stream = self.context.local_files.open(self._filename, "rb", key="file", buffering=0)
        except FileNotFoundError:
            if not self._warned_missing:
                log.warning("Couldn't find file %s; waiting for it to be created", self._filename)
                self._warned_missing = True
            return False
        except OSError as exc:
            raise ConnectError(f"Cannot open {self._filename}: {exc}") from exc
        try:
            if self._position:
                size = os.fstat(stream.fileno()).st_size
                if size < self._position:
                    # Connect does not notice truncation either; say so instead of waiting silently.
                    log.warning(
                        "%s is %d bytes long but the stored position is %d: it was truncated or replaced. "
                        "Lines are read again only once it grows past the stored position; reset the "
                        "connector's offsets to read it from the start.",
                        self._filename,
                        size,
                        self._position,
                    )
                stream.seek(self._position)
        except OSError as exc:
            stream.close()
            raise ConnectError(f"Cannot seek to byte {self._position} of {self._filename}: {exc}") from exc
        with self._lock:
            if self._stopping.is_set():
                stream.close()
                return False
            self._stream = stream
        self._warned_missing = False
        log.debug("Opened %s at byte %d", self._filename, self._position)
        return True

    def _read(self) -> bytes | None:
        """The next chunk: ``b""`` at end of file, ``None`` if standard input had nothing in time."""
        if self._stdin_fd is not None:
            # A blocking read of a pipe or terminal would make stop() wait; select bounds it.
            ready, _, _ = select.select([self._stdin_fd], [], [], _STDIN_WAIT_S)
            if not ready:
                return None
            return os.read(self._stdin_fd, self.read_chunk_size)
        with self._lock:
            if self._stream is None:  # stop() closed it
                return None
            try:
                return self._stream.read(self.read_chunk_size) or b""
            except OSError as exc:
                raise ConnectError(f"Cannot read {self._filename}: {exc}") from exc

    # -- splitting ------------------------------------------------------------------------------

    def _append_lines(self, chunk: bytes, out: list[str], out_ends: list[int]) -> None:
        """Append every line that the held-back bytes plus ``chunk`` complete, with its end position."""
        tail = self._tail
        if tail:
            if b"\n" not in chunk and b"\r" not in chunk and tail[-1][-1] != _CR:
                # Still inside one long line: collect the pieces and join them once it ends.
                tail.append(chunk)
                return
            tail.append(chunk)
            data = b"".join(tail)
        else:
            data = chunk
        cut = _complete_lines_end(data)
        self._tail = [data[cut:]] if cut < len(data) else []
        if cut == 0:
            return
        body = data[:cut] if cut < len(data) else data
        start = self._position
        lines, width, ends = _split_lines(body, start)
        self._position += len(body)
        out.extend(lines)
        if ends is not None:
            out_ends.extend(ends)
        else:
            # ASCII with one kind of separator, the common case: positions are a running sum.
            positions = accumulate([len(line) + width for line in lines], initial=start)
            next(positions)
            out_ends.extend(positions)


def _complete_lines_end(data: bytes) -> int:
    """The index just past the last line terminator in ``data`` that is certainly complete (0: none).

    A ``\\r`` as the very last byte is not certain: it may be the first half of ``\\r\\n``, so the
    line stays held back until the next byte arrives (Connect waits the same way).
    """
    last = len(data) - 1
    if last < 0:
        return 0
    limit = last if data[last] == _CR else last + 1
    return max(data.rfind(b"\n", 0, limit), data.rfind(b"\r", 0, limit)) + 1


def _split_lines(body: bytes, start: int) -> tuple[list[str], int, list[int] | None]:
    """Split ``body`` (which ends with a terminator) into decoded lines.

    Returns ``(lines, separator width, end positions)``; the end positions are ``None`` when every
    line is ASCII and ends with the same separator, so that each line's end follows from its length.
    """
    if b"\r" not in body:
        separator = b"\n"
    elif body.count(b"\r") == body.count(b"\n") == body.count(b"\r\n"):
        separator = b"\r\n"
    else:
        return _split_mixed(body, start)
    width = len(separator)
    text_separator = separator.decode("ascii")
    if body.isascii():
        # One decode for the whole chunk, and characters and bytes have the same length.
        lines = body.decode("ascii").split(text_separator)
        lines.pop()  # body ends with a separator: the last piece is empty
        return lines, width, None
    raw = body.split(separator)
    raw.pop()
    # Terminators are ASCII and never part of a multi-byte sequence (nor swallowed by a replaced
    # invalid one), so splitting the decoded text gives the same lines; byte lengths come from raw.
    lines = body.decode("utf-8", "replace").split(text_separator)
    lines.pop()
    if len(lines) != len(raw):  # cannot happen with UTF-8, but never pair lines with wrong offsets
        lines = [line.decode("utf-8", "replace") for line in raw]
    # end of line i = start + (bytes of lines 0..i) + (i + 1) * separator width
    ends = list(map(operator.add, accumulate(map(len, raw)), count(start + width, width)))
    return lines, width, ends


def _split_mixed(body: bytes, start: int) -> tuple[list[str], int, list[int]]:
    """The slow path for chunks mixing ``\\n``, ``\\r\\n`` and lone ``\\r``."""
    parts = _ANY_TERMINATOR.split(body)  # [line, sep, line, sep, ..., b""]
    lines = [line.decode("utf-8", "replace") for line in parts[0:-1:2]]
    # Running byte sum over every line and separator; a line ends after its separator.
    ends = list(accumulate(map(len, parts), initial=start))[2::2]
    return lines, 0, ends


def _stdin_fileno() -> int:
    stream = sys.stdin
    try:
        if stream is None:
            raise ValueError("no standard input")
        return stream.fileno()
    except (ValueError, OSError) as exc:
        raise ConnectError(
            f"The 'file' configuration is empty, which means standard input, but this worker has none ({exc})"
        ) from None
