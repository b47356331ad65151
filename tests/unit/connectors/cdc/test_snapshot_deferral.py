"""A chunk the database cannot read consistently yet (:class:`ChunkDeferred`) is dropped unread and
opened again later with a new low watermark, while the stream goes on."""

from __future__ import annotations

from typing import Any

from sluice.connectors.cdc.chunks import ChunkWindow
from sluice.connectors.cdc.snapshot import INCREMENTAL, INITIAL, ChunkDeferred, ChunkedSnapshot
from tests.unit.connectors.cdc.test_snapshot import ToyReader, ToyStream, toy, watermark


class DeferringReader(ToyReader):
    """Defers the reads of the chunks whose number (1, 2, …) is in ``defer``."""

    def __init__(self, reader: ToyReader, defer: set[int]) -> None:
        super().__init__(reader.rows, reader.log)
        self.defer = defer
        self.reads = 0

    def read_chunk(self, conn: Any, window: ChunkWindow, size: int) -> None:
        self.reads += 1
        if self.reads in self.defer:
            self.sent.pop(window.id)
            raise ChunkDeferred("a transaction is still committing")
        super().read_chunk(conn, window, size)


def deferring(rows: int, chunk: int, defer: set[int]) -> tuple[ChunkedSnapshot, ToyStream, list[tuple[str, str]]]:
    snapshot, stream, log, _ = toy(rows, chunk)
    snapshot.reader = DeferringReader(snapshot.reader, defer)  # type: ignore[arg-type]
    return snapshot, stream, log


def emitted(stream: ToyStream) -> list[tuple[str, int, str]]:
    """``(op, id, name)`` of every event the stream and the snapshot handed out."""
    events: list[tuple[str, int, str]] = []
    for batch in stream.outbox:
        values = batch.values if hasattr(batch, "values") else [r.value for r in batch]
        events += [(v["op"], v["after"]["id"], v["after"]["name"]) for v in values]
    return events


def test_a_deferred_chunk_waits_then_is_read_after_a_new_low_watermark() -> None:
    snapshot, stream, log = deferring(rows=3, chunk=10, defer={1})
    snapshot.add(["db.items"], INITIAL)
    snapshot.start_chunk(conn=None)
    assert log == [("L", log[0][1])]  # no high watermark: nothing was read
    assert snapshot.window is None and snapshot.active
    assert not snapshot.can_start  # not again at once: the stream goes on meanwhile
    # The deferred chunk's low watermark arrives: it opens no window, so no change is tracked.
    watermark(snapshot, 10, log[0])
    stream.changed(11, {"id": 2, "name": "new"})
    assert stream.hook is None

    snapshot._retry_at = 0.0  # the retry delay is over
    assert snapshot.can_start
    snapshot.start_chunk(conn=None)
    assert [kind for kind, _ in log] == ["L", "L", "H"] and log[1][1] != log[0][1]
    watermark(snapshot, 12, log[1])
    watermark(snapshot, 13, log[2])
    assert emitted(stream) == [("u", 2, "new"), ("r", 1, "n1"), ("r", 2, "n2"), ("r", 3, "n3")]
    assert not snapshot.active


def test_a_deferred_chunk_sent_ahead_is_read_again_from_its_key() -> None:
    snapshot, stream, log = deferring(rows=5, chunk=2, defer={2})
    snapshot.add(["db.items"], INCREMENTAL)
    snapshot.start_chunk(conn=None)  # chunk 1 read, chunk 2 sent ahead
    watermark(snapshot, 10, log[0])
    watermark(snapshot, 11, log[1])
    watermark(snapshot, 12, log[2])  # chunk 2's low watermark: its window is being tracked
    assert stream.hook is not None
    snapshot.start_chunk(conn=None)  # chunk 2 is deferred
    assert stream.hook is None and snapshot.window is None
    snapshot._retry_at = 0.0
    while snapshot.active:
        snapshot.start_chunk(conn=None)
        low, high = log[-3:-1] if log[-1][0] == "L" else log[-2:]
        watermark(snapshot, 20 + len(log), low)
        watermark(snapshot, 21 + len(log), high)
    assert [i for op, i, _ in emitted(stream) if op == "r"] == [1, 2, 3, 4, 5]
