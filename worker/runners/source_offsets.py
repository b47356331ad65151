"""The source runner's offset tracker: the last offset polled of each source partition, pending
until a commit stores it, and when the next commit is due (the bookkeeping of steps 5 and 6 of
:class:`~worker.runners.source.SourceTaskRunner`, which performs the commit itself)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from sluice.connectors.api import SourceRecord, SourceRecordBatch
from sluice.offsets import offset_key

#: Pending offsets: the offset store's key → (source partition, source offset).
Pending = dict[bytes, tuple[Mapping[str, Any], Mapping[str, Any] | None]]


class SourceOffsets:
    """One source task's offsets, not yet stored. Runner thread only."""

    def __init__(self, connector: str, flush_interval_s: float) -> None:
        self._connector = connector
        self._flush_interval_s = flush_interval_s
        #: The last offset polled of each source partition since the last commit.
        self.pending: Pending = {}
        # id(partition dict) → its key, so tasks that reuse one partition object pay for the JSON
        # key once, not per record.
        self._key_cache: dict[int, tuple[Mapping[str, Any], bytes]] = {}
        self._next_commit = 0.0

    def polled(self, polled: Sequence[SourceRecord], batch: SourceRecordBatch | None) -> None:
        """Step 5: the last polled offset of each source partition becomes pending (``batch``:
        ``polled`` when it is a batch, whose one partition and last offset are enough). Records a
        transform dropped or ``errors.*`` skipped count as done, as in Connect."""
        pending = self.pending
        if batch is not None:
            sp = batch.source_partition
            if sp is not None and len(batch):
                pending[self._offset_key(sp)] = (sp, batch.last_offset)
            return
        last_sp: Any = None
        key = b""
        for record in polled:
            sp = record.source_partition
            if sp is not None:
                if sp is not last_sp:
                    last_sp, key = sp, self._offset_key(sp)
                pending[key] = (sp, record.source_offset)

    def take(self) -> Pending:
        """The pending offsets, to be stored once everything before them is acknowledged; newer
        ones collect anew meanwhile."""
        snapshot, self.pending = self.pending, {}
        return snapshot

    def put_back(self, snapshot: Pending) -> None:
        """A commit failed: ``snapshot`` is pending again, under anything polled since."""
        snapshot.update(self.pending)
        self.pending = snapshot

    def commit_due(self, now: float) -> bool:
        """Whether ``offset.flush.interval.ms`` has passed since the last commit."""
        return now >= self._next_commit

    def reschedule(self, now: float | None = None) -> None:
        """The next commit is due an interval from ``now``."""
        self._next_commit = (time.monotonic() if now is None else now) + self._flush_interval_s

    def _offset_key(self, sp: Mapping[str, Any]) -> bytes:
        """The offset store's key of source partition ``sp``, cached by identity."""
        cached = self._key_cache.get(id(sp))
        if cached is None or cached[0] is not sp:
            if len(self._key_cache) > 10_000:
                self._key_cache.clear()
            cached = (sp, offset_key(self._connector, sp))
            self._key_cache[id(sp)] = cached
        return cached[1]
