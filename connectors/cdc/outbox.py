"""The batches one poll decoded beyond the first, handed out one per poll.

A poll returns one batch, but decoding can finish several at once: a snapshot chunk and the stream
events before its high watermark, a switch between the native and the Python lane, notifications,
a heartbeat that cannot join a serialized batch. The rest wait here and go out first on the next
polls, before anything is read from the database again. The position the task may confirm (a
PostgreSQL slot's flush LSN, say) moves to what was safe after them only once the last one was
handed out: a commit between two of those polls must not confirm what is still waiting here.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from sluice.connectors.cdc.emitter import Batch

#: A position in the database's change log (an LSN for PostgreSQL).
Position = TypeVar("Position")


class Outbox(Generic[Position]):
    """Finished batches waiting to be handed out, and the safe position of what was handed out
    (``start`` until something was). Thread: the task thread."""

    def __init__(self, start: Position) -> None:
        self._batches: list[Batch] = []
        self._safe_after = start
        #: Everything before it was handed out (or filtered): what a commit may confirm.
        self.polled_safe = start

    def __bool__(self) -> bool:
        return bool(self._batches)

    def fill(self, batches: list[Batch], safe: Position) -> None:
        """Hand out ``batches`` over the next polls; ``safe`` becomes :attr:`polled_safe` after the last."""
        self._batches = batches
        self._safe_after = safe

    def take(self) -> Batch:
        """The next batch (there must be one)."""
        item = self._batches.pop(0)
        if not self._batches:
            self.polled_safe = self._safe_after  # everything decoded has been handed out
        return item
