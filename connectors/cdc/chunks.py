"""One snapshot chunk between its watermarks, and how Debezium marks and names its rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from sluice.connectors.api import Schema, SourceRecordBatch


class CapturedTable(Protocol):
    """What the snapshot needs of a database source's table description."""

    oid: int
    primary_key: list[str]
    #: The schema of the event key (``None``: the table's events have no key).
    key_schema: Schema | None
    #: The event key of a row (``None`` for a table without a key).
    key_of: Callable[[dict[str, Any]], dict[str, Any] | None]
    #: The primary key of a row: ``key_of`` unless the event key is made of other columns.
    pk_of: Callable[[dict[str, Any]], dict[str, Any] | None]

    @property
    def qualified(self) -> str:
        """``schema.table`` (or ``database.table``): how signals and notifications name the table."""
        ...


class ChunkWindow:
    """One chunk between its watermarks.

    The chunk's rows stay in read order as two parallel lists (keys, values); a row the stream
    changes while the window is open is only noted by its key (``changed``), and dropped when the
    chunk is emitted. So reading a chunk costs no per-row lookup structure, and emitting one with
    no concurrent changes no per-row test."""

    def __init__(self, window_id: str, table: CapturedTable, kind: str) -> None:
        self.id = window_id
        self.table = table
        self.kind = kind
        self.keys: list[dict[str, Any] | None] = []
        self.values: list[dict[str, Any]] = []
        self.changed: set[tuple[Any, ...]] = set()
        #: The chunk's rows as the database returned them while they are not decoded yet (a
        #: native encoder may serialize them as they are), and how to decode them.
        self.raw: Any = None
        self._rows_of: Callable[[Any], list[dict[str, Any]]] | None = None
        self.last_key: list[str] | None = None
        self.exhausted = False
        self.open = False
        #: The first chunk of its table (read from the start, not after a key).
        self.first = False

    def add(self, key: dict[str, Any] | None, value: dict[str, Any]) -> None:
        self.keys.append(key)
        self.values.append(value)

    def keep_raw(self, raw: Any, rows_of: Callable[[Any], list[dict[str, Any]]]) -> None:
        """Keep the rows as read; :meth:`decode` turns them into values with ``rows_of`` when needed."""
        self.raw = raw
        self._rows_of = rows_of

    def decode(self) -> None:
        """Decode the rows kept raw (see :meth:`keep_raw`)."""
        if self.raw is None or self._rows_of is None:
            return
        table = self.table
        self.values = self._rows_of(self.raw)
        self.keys = list(map(table.key_of, self.values)) if table.key_schema is not None else [None] * len(self.values)
        self.raw = None

    def rows(self) -> tuple[list[dict[str, Any] | None], list[dict[str, Any]]]:
        """The (keys, values) left after dropping the rows the stream changed."""
        self.decode()
        if not self.changed:
            return self.keys, self.values
        changed = self.changed
        pk_of = self.table.pk_of
        if pk_of is self.table.key_of:
            kept = [(k, v) for k, v in zip(self.keys, self.values) if k is None or tuple(k.values()) not in changed]
        else:  # message.key.columns: rows are told apart by their primary key, not the event key
            kept = [(k, v) for k, v in zip(self.keys, self.values) if tuple((pk_of(v) or {}).values()) not in changed]
        return [k for k, _ in kept], [v for _, v in kept]


#: Which marker a row that is both its chunk's first and last keeps, as Debezium decides.
_PRECEDENCE = ("last", "first", "last_in_data_collection", "first_in_data_collection")


def marked_rows(rows: int, first: str | None, last: str | None) -> list[tuple[int, str]]:
    """``(row index, marker)`` of the rows whose ``source.snapshot`` is not the chunk's own."""
    if rows == 0:
        return []
    if rows == 1 and first is not None and last is not None:
        return [(0, min(first, last, key=_PRECEDENCE.index))]
    marked = [(0, first)] if first is not None else []
    return marked + ([(rows - 1, last)] if last is not None else [])


def shown_key(key: Any) -> str | None:
    """A primary key as Debezium 3.6's notifications show it: the value of a one-column key
    (``2``), ``[9, b]`` for several columns."""
    if key is None:
        return None
    return str(key[0]) if len(key) == 1 else f"[{', '.join(key)}]"


def snapshot_batch(
    window: ChunkWindow,
    topic: str,
    envelope_schema: Schema,
    source: dict[str, Any],
    now: int,
    markers: tuple[str | None, str | None],
    partition: dict[str, Any],
    offset: dict[str, Any],
) -> SourceRecordBatch:
    """A chunk's rows (those the stream did not change) as one batch of Debezium ``r`` events that
    share ``source`` (``now`` in nanoseconds), the ``markers`` on its first and last rows, and
    ``offset``."""
    table = window.table
    ts_ms, ts_us = now // 1_000_000, now // 1000
    keys, rows = window.rows()
    values = [
        {"before": None, "after": after, "source": source, "transaction": None, "op": "r",
         "ts_ms": ts_ms, "ts_us": ts_us, "ts_ns": now}
        for after in rows
    ]  # fmt: skip
    for index, marker in marked_rows(len(values), *markers):
        values[index] = {**values[index], "source": {**source, "snapshot": marker}}
    n = len(values)
    return SourceRecordBatch(
        topic,
        values,
        value_schema=envelope_schema,
        keys=keys if table.key_schema is not None else None,
        key_schema=table.key_schema,
        source_partition=partition,
        offsets_loader=lambda: [offset] * n,
        last_offset=offset,
    )
