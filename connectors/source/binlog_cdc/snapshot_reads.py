"""The MySQL/MariaDB side of the chunked snapshot (:mod:`sluice.connectors.cdc.snapshot`): its queries.

Watermarks are binlog positions, read, never written: the connector stays read-only (as
Debezium's ``read.only`` incremental snapshots). A position is one int, the binlog file's
sequence number ``<< 32`` or'd with the offset in it (:func:`encode`), so positions of different
files compare in binlog order.

Each chunk is read in a transaction of its own, ``START TRANSACTION WITH CONSISTENT SNAPSHOT``:

* MariaDB reports the binlog position that snapshot corresponds to exactly
  (``binlog_snapshot_file`` / ``binlog_snapshot_position``: every transaction before it is
  visible to the chunk's ``SELECT``, none after it). Both watermarks are that position: the window
  is empty and the chunk is emitted exactly where it belongs in the stream;
* MySQL has no such status: the low watermark is ``SHOW MASTER STATUS`` before the transaction,
  the high one after the ``SELECT``; rows the stream changes in between are dropped from the chunk.
  A transaction written to the binlog before the low watermark but not yet committed in the
  storage engine when the ``SELECT`` ran (MySQL's commit stage, microseconds) is the one case this
  cannot see (a stale row could follow that change).

A watermark behind what the stream already handed out would place the chunk too late: the reader
then reads the chunk again (its transaction is only microseconds behind the stream's).

A chunk is ``SELECT <columns> FROM `db`.`t` WHERE <key> > <last key> ORDER BY <key> LIMIT n``
(a table without a primary key in one read, and so is a ``snapshot.select.statement.overrides``
statement of an initial or blocking snapshot). The snapshot connection converts values as the
binlog reader hands them over (zero dates as null, ``BIT`` as a bit string), so a snapshot row
goes through the same :meth:`~.tables.Table.row` as a streamed one and its ``r`` event has the
values a ``c`` event of the row has.
"""

from __future__ import annotations

import datetime as _dt
import decimal
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pymysql
from pymysql.constants import FIELD_TYPE

from sluice.connectors.api import RetriableError
from sluice.connectors.cdc.chunks import ChunkWindow, shown_key
from sluice.connectors.cdc.filters import CollectionFilter
from sluice.connectors.cdc.keys import key_builder
from sluice.connectors.cdc.snapshot import INCREMENTAL
from sluice.connectors.source.binlog_cdc.tables import Table, captured_tables

log = logging.getLogger(__name__)

#: How long a chunk may be read again while its watermark is behind the stream.
_BEHIND_STREAM_LIMIT_S = 30.0

_INTEGER_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "integer", "bigint", "year"})
_BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"})


# -- positions -----------------------------------------------------------------------------------


def encode(file: str, pos: int) -> int:
    """``mariadb-bin.000003``, 5144 → one int that orders positions across files."""
    return int(file.rsplit(".", 1)[-1]) << 32 | pos


def position_of(point: int, file_like: str) -> tuple[str, int]:
    """The file name and offset of an encoded position (``file_like``: a file of the same binlog)."""
    base, _, digits = file_like.rpartition(".")
    return f"{base}.{point >> 32:0{len(digits)}d}", point & 0xFFFFFFFF


# -- values as the binlog reader hands them over ---------------------------------------------------


def _no_zero_date(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def converted(text: Any) -> Any:
        value = convert(text)
        return None if isinstance(value, str) else value  # PyMySQL leaves 0000-00-00 as text

    return converted


def _bit_string(raw: bytes) -> str:
    return format(int.from_bytes(raw, "big"), "b")


def binlog_like_conversions() -> dict[Any, Any]:
    """PyMySQL's converters, changed where the binlog reader's values differ."""
    conv = dict(pymysql.converters.conversions)
    for field in (FIELD_TYPE.DATE, FIELD_TYPE.NEWDATE, FIELD_TYPE.DATETIME, FIELD_TYPE.TIMESTAMP):
        if field in conv:
            conv[field] = _no_zero_date(conv[field])
    conv[FIELD_TYPE.BIT] = _bit_string
    return conv


def key_text(value: Any) -> str:
    """A primary key value as the offsets keep it (``snapshot_key``): JSON-safe text."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).hex()
    if isinstance(value, _dt.timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        sign, micros = ("-" if micros < 0 else ""), abs(micros)
        seconds, fraction = divmod(micros, 1_000_000)
        return f"{sign}{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{fraction:06d}"
    if isinstance(value, _dt.datetime):
        return value.isoformat(sep=" ")
    return str(value)


def key_param(text: str, data_type: str) -> Any:
    """A ``snapshot_key`` text as the query parameter that compares like the column's values."""
    if data_type in _INTEGER_TYPES:
        return int(text)
    if data_type == "bit":
        return int(text, 2)
    if data_type in ("decimal", "numeric"):
        return decimal.Decimal(text)
    if data_type in ("float", "double", "real"):
        return float(text)
    if data_type in _BINARY_TYPES:
        return bytes.fromhex(text)
    return text


def quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# -- tables ------------------------------------------------------------------------------------------


class SnapshotTable:
    """A captured table as the shared snapshot sees it (:class:`~sluice.connectors.cdc.chunks.CapturedTable`)."""

    def __init__(self, table: Table, oid: int) -> None:
        self.table = table
        self.oid = oid
        self.primary_key = table.primary_key
        self.key_schema = table.key_schema
        self.key_of = table.key_of
        self.pk_of = table.key_of if table.key == table.primary_key else key_builder(table.primary_key)
        #: ``DATA_TYPE`` of the primary key's columns (how a stored key is bound), read once.
        self.key_types: dict[str, str] | None = None

    @property
    def qualified(self) -> str:
        return self.table.qualified


def list_tables(cursor: Any, table_filter: CollectionFilter, include: Sequence[str] = ()) -> list[str]:
    """The captured base tables as ``database.table``, in database and table order; ``include``
    (``snapshot.include.collection.list`` regexes) narrows them."""
    patterns = [re.compile(p) for p in include]
    names = [f"{database}.{name}" for database, name in captured_tables(cursor, table_filter)]
    return [n for n in names if not patterns or any(p.fullmatch(n) for p in patterns)]


# -- the queries ------------------------------------------------------------------------------------


class BinlogSnapshotReader:
    """The snapshot's queries on its own connection (:class:`~sluice.connectors.cdc.snapshot.SnapshotReader`).

    ``watermark(position, text)`` hands each watermark to the stream side, in the order they are
    taken; ``stream_floor()`` says the least position a watermark may have (where the stream stands).
    With ``locked`` set (``snapshot.locking.mode=extended``) the tables are held read-locked by the
    connection, nothing can change them, and the current position is exact without a transaction.
    ``overrides``: the ``SELECT`` statements that read tables (``database.table``) in place of the
    chunks, for initial and blocking snapshots. Thread: the task thread."""

    def __init__(
        self,
        watermark: Callable[[int, str], None],
        stream_floor: Callable[[], int],
        overrides: Mapping[str, str] | None = None,
    ) -> None:
        self.watermark = watermark
        self.stream_floor = stream_floor
        self.overrides = dict(overrides or {})
        #: Where the initial snapshot started (the stream's start): the point its rows carry.
        self.start_point: int | None = None
        self.locked = False
        self._exact: bool | None = None  # MariaDB's binlog_snapshot_position is there
        self._read: dict[str, tuple[list[tuple[Any, ...]], list[str], int]] = {}  # window id → rows, names, high

    def take_point(self, conn: Any) -> tuple[int, int]:
        if self.start_point is None:
            self.start_point = self._master_position(conn)
        return self.start_point, 0

    @staticmethod
    def _master_position(conn: Any) -> int:
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            row = cur.fetchone()
        if row is None:
            raise RetriableError("the server writes no binary log any more")
        return encode(str(row[0]), int(row[1]))

    def maximum_key(self, conn: Any, table: SnapshotTable) -> str | None:
        pk = table.primary_key
        if not pk:
            return None
        order = ", ".join(f"{quoted(k)} DESC" for k in pk)
        with conn.cursor() as cur:
            cur.execute(f"SELECT {', '.join(map(quoted, pk))} FROM {_target(table)} ORDER BY {order} LIMIT 1")
            row = cur.fetchone()
        return shown_key([key_text(v) for v in row]) if row else None

    def send_chunk(self, conn: Any, window: ChunkWindow, size: int, after_key: list[str] | None) -> None:
        """Read the chunk in its own consistent snapshot, the watermarks around it (see the module
        docstring). PyMySQL cannot leave a result unread, so the rows are read here, kept for
        :meth:`read_chunk`."""
        table = window.table
        assert isinstance(table, SnapshotTable)
        override = self._override(window)
        sql, params = (override, []) if override is not None else self._chunk_query(conn, table, size, after_key)
        deadline = time.monotonic() + _BEHIND_STREAM_LIMIT_S
        while True:
            low, high, rows, names = self._read_consistent(conn, sql, params)
            if low >= self.stream_floor():
                break
            # The stream already handed out a transaction the snapshot did not see yet (it was in
            # the binlog before its commit finished): read again, a moment later.
            if time.monotonic() > deadline:
                raise RetriableError("the snapshot's binlog position stays behind the stream's")
            time.sleep(0.005)
        self.watermark(low, "L:" + window.id)
        self._read[window.id] = (rows, names, high)

    def _override(self, window: ChunkWindow) -> str | None:
        return None if window.kind == INCREMENTAL else self.overrides.get(window.table.qualified)

    def _read_consistent(
        self, conn: Any, sql: str, params: list[Any]
    ) -> tuple[int, int, list[tuple[Any, ...]], list[str]]:
        """The rows of ``sql``, their column names and the watermarks around them."""
        with conn.cursor() as cur:
            if self.locked:  # nothing can change the tables: any position is theirs
                now = self._master_position(conn)
                cur.execute(sql, params)
                return now, now, list(cur.fetchall()), [str(d[0]) for d in cur.description or ()]
            low = None if self._exact else self._master_position(conn)
            cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
            try:
                if self._exact is not False:
                    cur.execute("SHOW STATUS LIKE 'binlog_snapshot_%'")
                    status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
                    self._exact = "binlog_snapshot_position" in status and bool(status.get("binlog_snapshot_file"))
                    if self._exact:
                        low = encode(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))
                    elif low is None:
                        low = self._master_position(conn)
                cur.execute(sql, params)
                rows = list(cur.fetchall())
                names = [str(d[0]) for d in cur.description or ()]
            finally:
                cur.execute("COMMIT")
        assert low is not None
        return low, (low if self._exact else self._master_position(conn)), rows, names

    def _chunk_query(
        self, conn: Any, table: SnapshotTable, size: int, after_key: list[str] | None
    ) -> tuple[str, list[Any]]:
        names = [c.name for c in table.table.columns]
        pk = table.primary_key
        names += [k for k in pk if k not in names]  # a key column of a type not captured still orders
        sql = f"SELECT {', '.join(map(quoted, names))} FROM {_target(table)}"
        if not pk:
            return sql, []
        params: list[Any] = []
        if after_key is not None:
            types = self._key_types(conn, table)
            values = [key_param(text, types.get(k, "")) for k, text in zip(pk, after_key)]
            # (a, b) > (x, y) spelt out, which the optimizer turns into an index range
            terms = []
            for i, k in enumerate(pk):
                equal = [f"{quoted(p)} = %s" for p in pk[:i]]
                terms.append("(" + " AND ".join([*equal, f"{quoted(k)} > %s"]) + ")")
                params += [*values[:i], values[i]]
            sql += " WHERE " + " OR ".join(terms)
        # One row more than the chunk: whether the table goes on is known with the chunk, so its
        # last row is marked last (a table of a multiple of n rows would otherwise end on an empty chunk).
        sql += f" ORDER BY {', '.join(map(quoted, pk))} LIMIT {int(size) + 1}"
        return sql, params

    @staticmethod
    def _key_types(conn: Any, table: SnapshotTable) -> dict[str, str]:
        if table.key_types is None:
            with conn.cursor() as cur:
                cur.execute(
                    "SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND "
                    "TABLE_NAME = %s",
                    (table.table.database, table.table.name),
                )
                table.key_types = {str(n): str(t).lower() for n, t in cur.fetchall()}
        return table.key_types

    def read_chunk(self, conn: Any, window: ChunkWindow, size: int) -> None:
        """The rows read for ``window`` as event values (:meth:`~.tables.Table.row`, as the stream's)."""
        rows, names, _ = self._read[window.id]
        table = window.table
        assert isinstance(table, SnapshotTable)
        chunked = bool(table.primary_key) and self._override(window) is None
        pk = table.primary_key if chunked else []
        window.exhausted = not chunked or len(rows) <= size
        rows = rows[:size] if chunked else rows
        convert, key_of = table.table.row, table.key_of
        for raw in rows:
            after = convert(dict(zip(names, raw)))
            window.add(key_of(after), after)
        if chunked and rows:
            last = dict(zip(names, rows[-1]))
            window.last_key = [key_text(last[k]) for k in pk]

    def high_watermark(self, conn: Any, window: ChunkWindow) -> None:
        _, _, high = self._read.pop(window.id)
        self.watermark(high, "H:" + window.id)

    def discard(self, conn: Any) -> None:
        self._read.clear()


def _target(table: SnapshotTable) -> str:
    return f"{quoted(table.table.database)}.{quoted(table.table.name)}"
