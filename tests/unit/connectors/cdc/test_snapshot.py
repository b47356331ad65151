"""The shared chunked snapshot driven by a database that is not PostgreSQL: a toy source whose
table is a dict and whose change log is a list, as a second database source plugs in."""

from __future__ import annotations

from typing import Any

from sluice.connectors.api import Schema, SourceRecord, SourceRecordBatch, Type
from sluice.connectors.cdc.chunks import ChunkWindow
from sluice.connectors.cdc.emitter import ChangeBuffer
from sluice.connectors.cdc.snapshot import INCREMENTAL, INITIAL, WATERMARK_PREFIX, ChangeHook, ChunkedSnapshot


class Items:
    """The one table (a CapturedTable): key ``id``."""

    oid = 1
    primary_key = ["id"]
    key_schema: Schema | None = Schema.struct([("id", Schema(Type.INT64))], name="toy.items.Key")
    qualified = "db.items"

    @staticmethod
    def key_of(row: dict[str, Any]) -> dict[str, Any] | None:
        return {"id": row["id"]}

    pk_of = key_of


ITEMS = Items()


class ToyStream(ChangeBuffer):
    """The toy source's stream decoder (a ChangeStream and its own ChunkEmitter)."""

    def __init__(self) -> None:
        super().__init__({"server": "toy"})
        self.snapshot_progress: dict[str, Any] | None = None
        self.position = 0
        self.hook: ChangeHook | None = None

    @property
    def emitter(self) -> ToyStream:
        return self

    def current_offset(self) -> dict[str, Any]:
        return self.offset_at(self.position)

    def offset_at(self, position: int) -> dict[str, Any]:
        return {"pos": position, **(self.snapshot_progress or {})}

    def current_position(self) -> int:
        return self.position

    def keepalive(self, position: int) -> None:
        self.position = max(self.position, position)

    def track_changes(self, hook: ChangeHook | None) -> None:
        self.hook = hook

    def changed(self, position: int, row: dict[str, Any]) -> None:
        """A change the stream delivered."""
        self.position = position
        if self.hook is not None:
            self.hook(ITEMS, None, row)
        self.records.append(SourceRecord("toy.items", {"op": "u", "after": row}, None, {"id": row["id"]},
                                         source_partition=self.partition, source_offset=self.batch_offset))  # fmt: skip

    def chunk_events(self, window: ChunkWindow, position: int, now: int, offset: dict[str, Any],
                     markers: tuple[str | None, str | None], point: tuple[int, int] | None) -> SourceRecordBatch:  # fmt: skip
        keys, rows = window.rows()
        values = [{"op": "r", "after": row, "snapshot": "true"} for row in rows]
        for index, marker in ((0, markers[0]), (len(values) - 1, markers[1])):
            if values and marker is not None:
                values[index] = {**values[index], "snapshot": marker}
        n = len(values)
        return SourceRecordBatch("toy.items", values, keys=keys, source_partition=self.partition,
                                 offsets_loader=lambda: [offset] * n, last_offset=offset)  # fmt: skip


class ToyReader:
    """The toy source's snapshot queries: the watermarks go to the change log, rows come from a dict."""

    def __init__(self, rows: dict[int, dict[str, Any]], log: list[tuple[str, str]]) -> None:
        self.rows = rows
        self.log = log
        self.sent: dict[str, list[str] | None] = {}

    def take_point(self, conn: Any) -> tuple[int, int]:
        return (0, 1)

    def maximum_key(self, conn: Any, table: Any) -> str | None:
        return str(max(self.rows))

    def send_chunk(self, conn: Any, window: ChunkWindow, size: int, after_key: list[str] | None) -> None:
        self.log.append(("L", window.id))
        self.sent[window.id] = after_key

    def read_chunk(self, conn: Any, window: ChunkWindow, size: int) -> None:
        after = int(self.sent.pop(window.id)[0]) if self.sent.get(window.id) else 0  # type: ignore[index]
        ids = sorted(i for i in self.rows if i > after)[:size]
        for i in ids:
            window.add({"id": i}, dict(self.rows[i]))
        window.last_key = [str(ids[-1])] if ids else None
        window.exhausted = len(ids) < size

    def high_watermark(self, conn: Any, window: ChunkWindow) -> None:
        self.log.append(("H", window.id))

    def discard(self, conn: Any) -> None:
        pass


def toy(rows: int, chunk: int) -> tuple[ChunkedSnapshot, ToyStream, list[tuple[str, str]], list[Any]]:
    table = {i: {"id": i, "name": f"n{i}"} for i in range(1, rows + 1)}
    log: list[tuple[str, str]] = []
    stream = ToyStream()
    snapshot = ChunkedSnapshot(stream, ToyReader(table, log), {"db.items": ITEMS}.get, chunk_size=chunk,
                               incremental_chunk_size=chunk)  # fmt: skip
    notes: list[Any] = []
    snapshot.notify = lambda aggregate, kind, data=None: notes.append((aggregate, kind))
    return snapshot, stream, log, notes


def watermark(snapshot: ChunkedSnapshot, position: int, entry: tuple[str, str]) -> None:
    snapshot.on_message(WATERMARK_PREFIX, f"{entry[0]}:{entry[1]}".encode(), position)


def test_a_row_changed_between_the_watermarks_is_left_to_the_stream() -> None:
    snapshot, stream, log, notes = toy(rows=3, chunk=10)
    snapshot.add(["db.items"], INITIAL)
    snapshot.start_chunk(conn=None)
    assert [kind for kind, _ in log] == ["L", "H"]  # one chunk: the whole table
    watermark(snapshot, 10, log[0])
    stream.changed(11, {"id": 2, "name": "new"})
    watermark(snapshot, 12, log[1])
    changes, chunk = stream.outbox
    assert [r.value["after"] for r in changes] == [{"id": 2, "name": "new"}]
    assert isinstance(chunk, SourceRecordBatch) and [v["after"]["id"] for v in chunk.values] == [1, 3]
    assert [v["snapshot"] for v in chunk.values] == ["first", "last"]
    assert chunk.last_offset == {"pos": 12} and not snapshot.active
    assert notes == [("Initial Snapshot", k) for k in ("STARTED", "IN_PROGRESS", "TABLE_SCAN_COMPLETED", "COMPLETED")]


def test_chunks_carry_the_progress_a_restart_continues_from() -> None:
    snapshot, stream, log, _ = toy(rows=5, chunk=2)
    snapshot.add(["db.items"], INCREMENTAL)
    snapshot.start_chunk(conn=None)  # chunk 1 read, chunk 2 sent ahead
    assert [kind for kind, _ in log] == ["L", "H", "L"]
    watermark(snapshot, 10, log[0])
    watermark(snapshot, 11, log[1])
    (first,) = stream.outbox
    assert first.last_offset == {"pos": 11, "snapshot_tables": [["db.items", INCREMENTAL]], "snapshot_key": ["2"]}

    restarted, stream2, log2, _ = toy(rows=5, chunk=2)
    restarted.restore(dict(first.last_offset))
    restarted.start_chunk(conn=None)
    watermark(restarted, 20, log2[0])
    watermark(restarted, 21, log2[1])
    assert [v["after"]["id"] for v in stream2.outbox[0].values] == [3, 4]  # after the stored key, no repeat


def test_a_stopped_incremental_snapshot_drops_its_table_and_says_so() -> None:
    snapshot, stream, log, notes = toy(rows=5, chunk=2)
    snapshot.add(["db.items"], INCREMENTAL)
    snapshot.start_chunk(conn=None)
    snapshot.stop(["db.items"])
    assert not snapshot.active and snapshot.aborted and stream.snapshot_progress is None
    watermark(snapshot, 10, log[0])
    watermark(snapshot, 11, log[1])
    assert stream.outbox == []  # the open window was dropped with its table
    assert notes[-1] == ("Incremental Snapshot", "ABORTED")
