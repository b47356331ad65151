"""Statements that write a batch of rows, with the fastest path each database offers.

* PostgreSQL: ``COPY … FROM STDIN`` straight into the table for ``insert``; for ``upsert`` and
  ``update``, ``COPY`` into a session-local staging table, then one ``INSERT … SELECT … ON CONFLICT``
  or ``UPDATE … FROM``. About 10x faster than ``executemany`` (``perf-notes.md`` §5.6).
* Everyone else: the driver's ``executemany`` (SQLite runs it in C; PyMySQL rewrites an
  ``INSERT … VALUES`` into multi-row statements).

Every method runs inside the caller's transaction, except those of a :class:`PipelinedWriter`,
which sends a whole transaction without waiting for it; a writer says whether it is one through
:meth:`RowWriter.pipelined`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from sluice.connectors.jdbc_common.dialects import PostgresDialect, SqlDialect
from sluice.connectors.sink.jdbc import pgcopy
from sluice.connectors.sink.jdbc.config import InsertMode
from sluice.connectors.sink.jdbc.pgsend import InFlight, send_copy_transaction

if TYPE_CHECKING:
    from sluice.connectors.sink.jdbc.rows import Rows

#: The last column of the COPY data :meth:`PipelinedWriter.prepare_copy_changes` takes: true where
#: the row's key is deleted (a tombstone), false where the row is upserted.
DELETED_COLUMN = "__sluice_deleted"


class CopyTransaction(NamedTuple):
    """``BEGIN; <copy_sql>; <after>; COMMIT`` with ``data`` for the COPY (``copy_sql`` ends with the
    COPY; a statement before it, such as making a staging table, runs first)."""

    copy_sql: str
    data: bytes
    after: str


class PipelinedWriter(Protocol):
    """A writer that renders a chunk as one transaction and sends it without waiting for the
    server (PostgreSQL's COPY), so the task prepares the next chunk while the server commits."""

    def column_types(self, table: str) -> dict[str, str] | None:
        """``table``'s column types, once an ordinary write to it has read them (``None`` before)."""
        ...

    def prepare(
        self, table: str, columns: Sequence[str], keys: Sequence[str], batch: Rows, mode: InsertMode
    ) -> CopyTransaction | None:
        """``batch`` as one transaction for :meth:`send`; ``None``: write it the ordinary way."""
        ...

    def prepare_copy_data(
        self, table: str, columns: Sequence[str], keys: Sequence[str], data: bytes, options: str, mode: InsertMode
    ) -> CopyTransaction | None:
        """Like :meth:`prepare`, for rows already rendered as COPY data with these COPY ``options``."""
        ...

    def prepare_copy_changes(
        self, table: str, columns: Sequence[str], keys: Sequence[str], data: bytes, options: str
    ) -> CopyTransaction:
        """Upserts and deletes as one transaction: COPY data of ``columns`` then
        :data:`DELETED_COLUMN`, one row per key; the rows marked deleted delete their key's row
        (only the key columns count), the others are upserted."""
        ...

    def send(self, conn: Any, prepared: CopyTransaction) -> InFlight | None:
        """Send without waiting; ``None`` if it could not go now (write it the ordinary way)."""
        ...


class RowWriter:
    """Writes with ``executemany``; works on every DB-API driver."""

    def __init__(self, dialect: SqlDialect) -> None:
        self.dialect = dialect

    def pipelined(self) -> PipelinedWriter | None:
        """This writer as a :class:`PipelinedWriter`, if it is one: plain statements are not."""
        return None

    def write(
        self, conn: Any, table: str, columns: Sequence[str], keys: Sequence[str], batch: Rows, mode: InsertMode
    ) -> None:
        if not len(batch):
            return
        self.write_rows(conn, table, columns, keys, batch.rows, mode)

    def write_rows(
        self,
        conn: Any,
        table: str,
        columns: Sequence[str],
        keys: Sequence[str],
        rows: list[tuple[Any, ...]],
        mode: InsertMode,
    ) -> None:
        d = self.dialect
        if mode is InsertMode.INSERT:
            conn.exec_driver_sql(d.insert(table, columns), rows)
        elif mode is InsertMode.UPSERT:
            conn.exec_driver_sql(d.upsert(table, columns, keys), rows)
        else:
            k = len(keys)
            conn.exec_driver_sql(d.update(table, columns, keys), [r[k:] + r[:k] for r in rows])

    def delete(self, conn: Any, table: str, keys: Sequence[str], key_rows: list[tuple[Any, ...]]) -> None:
        if key_rows:
            conn.exec_driver_sql(self.dialect.delete(table, keys), key_rows)

    def write_one(
        self, conn: Any, table: str, columns: Sequence[str], keys: Sequence[str], row: tuple[Any, ...], mode: InsertMode
    ) -> None:
        """One row with a plain statement (to find which row of a failed batch the database rejects)."""
        RowWriter.write_rows(self, conn, table, columns, keys, [row], mode)

    def reset(self) -> None:
        """The connection was replaced: forget per-session state."""

    def end_transaction(self) -> None:
        """The transaction committed or rolled back."""


class PostgresCopyWriter(RowWriter):
    """COPY-based writes for PostgreSQL (psycopg 3); also a :class:`PipelinedWriter`."""

    def __init__(self, dialect: PostgresDialect) -> None:
        super().__init__(dialect)
        self.pg = dialect
        self._stages: dict[tuple[str, tuple[str, ...]], str] = {}  # (table, columns) → temp table
        self._dirty: set[str] = set()  # staging tables holding rows in this transaction
        # table → {column: type name}, for the JSON fast path (:mod:`.pgjson`); per session, like the stages.
        self._types: dict[str, dict[str, str]] = {}

    def pipelined(self) -> PipelinedWriter:
        return self

    def write(
        self, conn: Any, table: str, columns: Sequence[str], keys: Sequence[str], batch: Rows, mode: InsertMode
    ) -> None:
        if not len(batch):
            return
        raw = conn.connection.driver_connection
        d = self.pg
        cols = d.columns(columns)
        with raw.cursor() as cur:
            known = self._types.get(table)
            if known is None or not all(c in known for c in columns):
                self._types[table] = _column_types(cur, d.table(table))
            if mode is InsertMode.INSERT:
                _copy(cur, f"COPY {d.table(table)} ({cols}) FROM STDIN", batch)
                return
            stage = self._stage(cur, table, columns)
            _copy(cur, f"COPY {stage} ({cols}) FROM STDIN", batch)
            cur.execute(self._merge_sql(table, columns, keys, mode, stage))

    def _merge_sql(self, table: str, columns: Sequence[str], keys: Sequence[str], mode: InsertMode, stage: str) -> str:
        """The statement that moves the staged rows into ``table`` (upsert or update)."""
        d = self.pg
        cols = d.columns(columns)
        if mode is InsertMode.UPSERT:
            return f"INSERT INTO {d.table(table)} ({cols}) SELECT {cols} FROM {stage}" + d.on_conflict(columns, keys)
        values = [c for c in columns if c not in keys]
        sets = ", ".join(f"{d.quote(c)} = s.{d.quote(c)}" for c in values)
        where = " AND ".join(f"t.{d.quote(k)} = s.{d.quote(k)}" for k in keys)
        return f"UPDATE {d.table(table)} AS t SET {sets} FROM {stage} AS s WHERE {where}"

    def prepare(
        self, table: str, columns: Sequence[str], keys: Sequence[str], batch: Rows, mode: InsertMode
    ) -> CopyTransaction | None:
        """The statements and COPY data that write ``batch`` as one transaction, for :meth:`send`.

        ``None`` if this batch cannot go that way (a staging table not made yet in this session,
        values that need ``write_row``); the caller then writes it with :meth:`write`.
        """
        data = pgcopy.render(batch.column_values(), batch.kinds) if len(batch) else None
        if data is None:
            return None
        return self._copy_transaction(table, columns, keys, data, mode, "")

    def column_types(self, table: str) -> dict[str, str] | None:
        """``table``'s column types (PostgreSQL type names), once an ordinary write to it has read them."""
        return self._types.get(table)

    def prepare_copy_data(
        self, table: str, columns: Sequence[str], keys: Sequence[str], data: bytes, options: str, mode: InsertMode
    ) -> CopyTransaction | None:
        """Like :meth:`prepare`, for rows already rendered as COPY data (:mod:`.pgjson`); ``options``
        are the COPY options that data needs (`` (FORMAT binary)``, `` (FORMAT csv)``)."""
        return self._copy_transaction(table, columns, keys, data, mode, options)

    def prepare_copy_changes(
        self, table: str, columns: Sequence[str], keys: Sequence[str], data: bytes, options: str
    ) -> CopyTransaction:
        """Upserts and deletes (see :class:`PipelinedWriter`) staged in a table of their own with the
        marker column, made in the same transaction when this session lacks it (the ordinary path
        never makes it): each row upserted or its key deleted, every key once, so the order of the
        two statements does not matter; the upserts go first, as the ordinary path writes them."""
        d = self.pg
        target, cols, marker = d.table(table), d.columns(columns), d.quote(DELETED_COLUMN)
        digest = hashlib.sha1(repr((table, tuple(columns), DELETED_COLUMN)).encode()).hexdigest()[:16]
        stage = d.quote(f"sluice_changes_{digest}")
        create = (
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS AS "
            f"SELECT {cols}, false AS {marker} FROM {target} WITH NO DATA"
        )
        upsert = f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {stage} WHERE NOT {marker}"
        same_key = " AND ".join(f"t.{d.quote(k)} = s.{d.quote(k)}" for k in keys)
        delete = f"DELETE FROM {target} AS t USING {stage} AS s WHERE s.{marker} AND {same_key}"
        return CopyTransaction(
            f"{create}; COPY {stage} ({cols}, {marker}) FROM STDIN{options}",
            data,
            f"{upsert}{d.on_conflict(columns, keys)}; {delete}",
        )

    def _copy_transaction(
        self, table: str, columns: Sequence[str], keys: Sequence[str], data: bytes, mode: InsertMode, options: str
    ) -> CopyTransaction | None:
        """COPY straight into ``table`` (insert), or into this session's staging table and then merged."""
        d = self.pg
        cols = d.columns(columns)
        if mode is InsertMode.INSERT:
            return CopyTransaction(f"COPY {d.table(table)} ({cols}) FROM STDIN{options}", data, "")
        stage = self._stages.get((table, tuple(columns)))
        if stage is None or stage in self._dirty:
            return None
        merge = self._merge_sql(table, columns, keys, mode, stage)
        return CopyTransaction(f"COPY {stage} ({cols}) FROM STDIN{options}", data, merge)

    def send(self, conn: Any, prepared: CopyTransaction) -> InFlight | None:
        """Send a prepared transaction without waiting for it (:mod:`.pgsend`); ``None`` if the
        connection has a transaction open or the server refused the COPY at once."""
        if prepared.after and self._dirty:  # a staging table holds rows of an open transaction
            return None
        return send_copy_transaction(
            conn.connection.driver_connection, prepared.copy_sql, prepared.data, prepared.after
        )

    def _stage(self, cur: Any, table: str, columns: Sequence[str]) -> str:
        """A temporary table with the target's column types, emptied at every commit."""
        key = (table, tuple(columns))
        stage = self._stages.get(key)
        if stage is None:
            digest = hashlib.sha1(repr(key).encode()).hexdigest()[:16]
            stage = self.pg.quote(f"sluice_stage_{digest}")
            cols = self.pg.columns(columns)
            cur.execute(
                f"CREATE TEMPORARY TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS AS "
                f"SELECT {cols} FROM {self.pg.table(table)} WITH NO DATA"
            )
            self._stages[key] = stage
        elif stage in self._dirty:
            cur.execute(f"TRUNCATE {stage}")
        self._dirty.add(stage)
        return stage

    def reset(self) -> None:
        self._stages.clear()
        self._dirty.clear()
        self._types.clear()

    def end_transaction(self) -> None:
        self._dirty.clear()

    def rolled_back(self) -> None:
        # A rollback also undoes the CREATE of a staging table made in that transaction.
        self._stages.clear()
        self._dirty.clear()


def _copy(cur: Any, statement: str, batch: Rows) -> None:
    data = pgcopy.render(batch.column_values(), batch.kinds)
    with cur.copy(statement) as copy:
        if data is not None:
            copy.write(data)  # rendered column-wise: one buffer for the whole batch
            return
        write_row = copy.write_row
        for row in batch.rows:
            write_row(row)


def _column_types(cur: Any, table_sql: str) -> dict[str, str]:
    """Every column of the table named by ``table_sql`` (quoted SQL) with its type's name (``float8``, ``bool``, …)."""
    cur.execute(
        "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
        (table_sql,),
    )
    return {str(name): str(kind) for name, kind in cur.fetchall()}


def writer_for(dialect: SqlDialect) -> RowWriter:
    if isinstance(dialect, PostgresDialect):
        return PostgresCopyWriter(dialect)
    return RowWriter(dialect)
