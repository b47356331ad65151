"""An offset store that lives in memory only: for tests and for runs that need no restart."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from sluice.offsets.base import JsonMap, decode_offset, encode_offset, offset_key, parse_offset_key, partition_identity

# One stored entry: the exact key bytes first written for the partition and the offset's JSON.
_Entry = tuple[bytes, bytes]
# What a put changes, kept so a failed persist can be rolled back: (connector, identity, old entry).
_Undo = list[tuple[str, bytes, _Entry | None]]


class MemoryOffsetStore:
    """An :class:`~offsets.base.OffsetStore` held in a dict; also the base of the file store.

    Entries are kept in their serialized form (the offsets-topic key and value bytes), so a put
    validates that everything is JSON before anything changes, readers always get fresh copies,
    and a subclass can persist the map without serializing it again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # connector → partition identity (sorted-keys JSON) → entry
        self._data: dict[str, dict[bytes, _Entry]] = {}

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Nothing to load."""

    def stop(self) -> None:
        """Nothing to release."""

    # -- the OffsetStore protocol ---------------------------------------------------------------

    def get(self, connector: str, partitions: Sequence[JsonMap]) -> list[JsonMap | None]:
        """The stored offsets of ``partitions`` in order, ``None`` where absent."""
        identities = [partition_identity(p) for p in partitions]
        with self._lock:
            self._check_ready()
            entries = self._data.get(connector) or {}
            found = [entries.get(i) for i in identities]
        return [None if e is None else decode_offset(e[1]) for e in found]

    def put(self, connector: str, offsets: Sequence[tuple[JsonMap, JsonMap | None]]) -> None:
        """Store the pairs atomically; a ``None`` offset deletes that partition's entry."""
        # Serialize everything first: a bad pair must fail the put before anything is applied.
        encoded = [
            (
                partition_identity(partition),
                offset_key(connector, partition),
                None if offset is None else encode_offset(offset),
            )
            for partition, offset in offsets
        ]
        if not encoded:
            return
        with self._lock:
            self._check_ready()
            undo: _Undo = []
            entries = self._data.setdefault(connector, {})
            for identity, key, value in encoded:
                old = entries.get(identity)
                undo.append((connector, identity, old))
                if value is None:
                    entries.pop(identity, None)
                else:
                    # Keep the key bytes the partition was first stored under: a Kafka-topic store
                    # must keep writing the same key for compaction to replace the old record.
                    entries[identity] = (key if old is None else old[0], value)
            if not entries:
                del self._data[connector]
            self._commit(undo)

    def all(self, connector: str) -> list[tuple[JsonMap, JsonMap]]:
        """Every ``(partition, offset)`` of ``connector``, in the order they were first stored."""
        with self._lock:
            self._check_ready()
            entries = list((self._data.get(connector) or {}).values())
        return [(parse_offset_key(key)[1], decode_offset(value)) for key, value in entries]

    def delete(self, connector: str) -> None:
        """Forget every offset of ``connector``."""
        with self._lock:
            self._check_ready()
            entries = self._data.get(connector)
            if not entries:
                return
            undo: _Undo = [(connector, identity, entry) for identity, entry in entries.items()]
            del self._data[connector]
            self._commit(undo)

    def read_to_end(self, timeout: float = 30.0) -> None:
        """Nothing to wait for: this process is the only writer."""

    def connectors(self) -> list[str]:
        """The connectors that have at least one stored offset."""
        with self._lock:
            self._check_ready()
            return list(self._data)

    # -- hooks for persistent subclasses ----------------------------------------------------------

    def _check_ready(self) -> None:
        """Raise if the store cannot serve requests (called with the lock held)."""

    def _persist(self) -> None:
        """Make the current map durable (called with the lock held); raise on failure."""

    def _commit(self, undo: _Undo) -> None:
        """Persist a change already applied in memory, or undo it if persisting fails."""
        try:
            self._persist()
        except BaseException:
            # Undo in reverse so a partition changed twice in one put ends at its original entry.
            for connector, identity, old in reversed(undo):
                entries = self._data.setdefault(connector, {})
                if old is None:
                    entries.pop(identity, None)
                else:
                    entries[identity] = old
                if not entries:
                    del self._data[connector]
            raise
