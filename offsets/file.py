"""An offset store persisted to one local file: what a standalone worker uses.

File format (``sluice.offsets`` version 1), JSON lines, UTF-8::

    {"format":"sluice.offsets","version":1}
    {"key":"[\\"file-source\\",{\\"filename\\":\\"/tmp/in.txt\\"}]","value":{"position":1234}}

The first line identifies the file. Every other line is one stored offset: ``key`` is the exact
offsets-topic key (Kafka Connect's ``["<connector>",{<partition>}]`` JSON) kept as a string so
its bytes survive unchanged, and ``value`` is the offset object. Deleted partitions (tombstones)
are simply absent. An empty or missing file is an empty store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from pathlib import Path

import orjson

from sluice.offsets.base import OffsetStoreError, parse_offset_key, partition_identity
from sluice.offsets.memory import MemoryOffsetStore

log = logging.getLogger(__name__)

FORMAT_NAME = "sluice.offsets"
FORMAT_VERSION = 1
_HEADER = orjson.dumps({"format": FORMAT_NAME, "version": FORMAT_VERSION}) + b"\n"
_TMP_SUFFIX = ".tmp"


class FileOffsetStore(MemoryOffsetStore):
    """An :class:`~offsets.base.OffsetStore` kept in memory and rewritten to ``path`` on every change.

    Each put or delete writes the whole map to a temporary file in the same directory, fsyncs it,
    renames it over ``path`` with :func:`os.replace` and fsyncs the directory. A crash at any point
    therefore leaves either the old or the new file, never a torn one. Rewriting everything is
    fine for the sizes a standalone worker sees (one entry per source partition) and is what keeps
    the put atomic.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self._path = Path(path)
        self._started = False

    @property
    def path(self) -> Path:
        """The file the offsets live in."""
        return self._path

    def start(self) -> None:
        """Load ``path`` (missing = empty); raise :class:`OffsetStoreError` if it is corrupt."""
        with self._lock:
            if self._started:
                return
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._remove_stale_temp_files()
            self._data = self._load()
            self._started = True
            log.info(
                "Loaded %d source offsets of %d connectors from %s",
                sum(len(e) for e in self._data.values()),
                len(self._data),
                self._path,
            )

    def stop(self) -> None:
        """Stop serving; every put was already durable, so there is nothing to flush."""
        with self._lock:
            self._started = False

    # -- persistence ------------------------------------------------------------------------------

    def _check_ready(self) -> None:
        if not self._started:
            raise OffsetStoreError(f"The offset store {self._path} is not started")

    def _persist(self) -> None:
        lines = [_HEADER]
        for entries in self._data.values():
            for key, value in entries.values():
                # The key is JSON text already; dumping it as a str escapes it into a JSON string.
                lines.append(b'{"key":' + orjson.dumps(key.decode("utf-8")) + b',"value":' + value + b"}\n")
        directory = self._path.parent
        fd, tmp_name = tempfile.mkstemp(prefix=f".{self._path.name}.", suffix=_TMP_SUFFIX, dir=directory)
        try:
            with os.fdopen(fd, "wb") as tmp:
                tmp.write(b"".join(lines))
                tmp.flush()
                os.fsync(tmp.fileno())
            os.replace(tmp_name, self._path)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)
            if isinstance(exc, OSError):
                raise OffsetStoreError(f"Cannot write offsets to {self._path}: {exc}") from exc
            raise
        # The rename is only durable once the directory entry is on disk.
        _fsync_directory(directory)

    def _load(self) -> dict[str, dict[bytes, tuple[bytes, bytes]]]:
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise OffsetStoreError(f"Cannot read offset file {self._path}: {exc}") from exc
        if not raw.strip():
            return {}
        data: dict[str, dict[bytes, tuple[bytes, bytes]]] = {}
        lines = raw.split(b"\n")
        self._check_header(lines[0])
        for number, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                item = orjson.loads(line)
                if not isinstance(item, dict) or not isinstance(item.get("key"), str) or "value" not in item:
                    raise ValueError('expected {"key": "<offset key JSON>", "value": {...}}')
                key = item["key"].encode("utf-8")
                connector, partition = parse_offset_key(key)
                if not isinstance(item["value"], dict):
                    raise ValueError(f"offset value must be a JSON object, got {item['value']!r}")
                value = orjson.dumps(item["value"])
            except (ValueError, TypeError) as exc:  # orjson.JSONDecodeError is a ValueError
                raise OffsetStoreError(f"Corrupt offset file {self._path}, line {number}: {exc}") from None
            data.setdefault(connector, {})[partition_identity(partition)] = (key, value)
        return data

    def _check_header(self, line: bytes) -> None:
        try:
            header = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise OffsetStoreError(f"Corrupt offset file {self._path}, line 1: {exc}") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT_NAME:
            raise OffsetStoreError(
                f"{self._path} is not a Sluice offset file (line 1 should be {_HEADER.decode().strip()})"
            )
        if header.get("version") != FORMAT_VERSION:
            raise OffsetStoreError(
                f"Offset file {self._path} has format version {header.get('version')!r}; "
                f"this Sluice reads version {FORMAT_VERSION}"
            )

    def _remove_stale_temp_files(self) -> None:
        # Left behind only by a crash between mkstemp and os.replace; they never hold the only copy.
        for stale in self._path.parent.glob(f".{self._path.name}.*{_TMP_SUFFIX}"):
            log.debug("Removing stale temporary offset file %s", stale)
            with contextlib.suppress(OSError):
                stale.unlink()


def _fsync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories; the rename is still atomic there
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)
