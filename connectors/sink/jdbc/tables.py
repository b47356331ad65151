"""Destination tables: looked up once, created (``auto.create``) or widened (``auto.evolve``).

Like Confluent's ``DbStructure``: a missing table is created from the record schema with the
primary key of the ``pk.*`` settings; a missing column is added only if its field is optional or
has a default. Types are never changed, columns never dropped, keys never altered.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from sluice.connectors.api import ConnectError
from sluice.connectors.jdbc_common.dialects import Column, SqlDialect, split_table_name

log = logging.getLogger(__name__)


class TableManager:
    """Knows the columns of every table this task wrote to, and creates or evolves them."""

    def __init__(self, dialect: SqlDialect, *, auto_create: bool, auto_evolve: bool) -> None:
        self.dialect = dialect
        self.auto_create = auto_create
        self.auto_evolve = auto_evolve
        self._columns: dict[str, dict[str, str]] = {}  # table → {lower-case name: actual name}

    def invalidate(self) -> None:
        """Forget what is known (after a rollback, DDL of the failed transaction is gone)."""
        self._columns.clear()

    def known(self, table: str, columns: Sequence[Column]) -> list[str] | None:
        """The column names as ``table`` spells them if every column is already known (no SQL), else ``None``."""
        return self.known_names(table, [c.name for c in columns])

    def known_names(self, table: str, names: Sequence[str]) -> list[str] | None:
        """:meth:`known` for field names."""
        known = self._columns.get(table)
        if known is not None and all(n in known.values() or n.lower() in known for n in names):
            return [_spelling(known, n) for n in names]
        return None

    def ensure(self, conn: Any, table: str, columns: Sequence[Column]) -> list[str]:
        """Make ``table`` exist with every column of ``columns``; return their names as the table spells them."""
        known = self._columns.get(table)
        if known is not None and all(c.name in known.values() or c.name.lower() in known for c in columns):
            return [_spelling(known, c.name) for c in columns]
        known = self._reflect(conn, table)
        if known is None:
            if not self.auto_create:
                raise ConnectError(
                    f"Table {table!r} is missing and auto.create is disabled; create it or set auto.create=true"
                )
            if not columns:
                raise ConnectError(f"Cannot create table {table!r}: the records have no fields")
            ddl = self.dialect.create_table(table, columns)
            log.info("Creating table %s:\n%s", table, ddl)
            failure = _run_ddl(conn, ddl, self.dialect.transactional_ddl)
            if failure is None:
                known = {c.name.lower(): c.name for c in columns}
                self._columns[table] = known
                return [c.name for c in columns]
            # Another task (or Spark partition) may have created it first: carry on with its columns.
            known = self._reflect(conn, table)
            if known is None:
                raise failure
        missing = [c for c in columns if c.name not in known.values() and c.name.lower() not in known]
        if missing:
            names = ", ".join(c.name for c in missing)
            if not self.auto_evolve:
                raise ConnectError(
                    f"Table {table!r} is missing columns for fields {names} and auto.evolve is disabled; "
                    "add the columns or set auto.evolve=true"
                )
            for column in missing:
                if column.primary_key or (not column.schema.optional and column.schema.default is None):
                    raise ConnectError(
                        f"Cannot add column {column.name!r} to table {table!r}: the field is required and has no "
                        "default, so existing rows would violate it (auto.evolve adds only optional or defaulted fields)"
                    )
                ddl = self.dialect.add_column(table, column)
                log.info("Evolving table %s: %s", table, ddl)
                failure = _run_ddl(conn, ddl, self.dialect.transactional_ddl)
                if failure is not None:
                    again = self._reflect(conn, table) or {}
                    if column.name not in again.values() and column.name.lower() not in again:
                        raise failure
                known[column.name.lower()] = column.name
        self._columns[table] = known
        return [_spelling(known, c.name) for c in columns]

    def _reflect(self, conn: Any, table: str) -> dict[str, str] | None:
        from sqlalchemy import inspect

        parts = split_table_name(table)
        name, schema = parts[-1], (parts[-2] if len(parts) > 1 else None)
        inspector = inspect(conn)
        if not inspector.has_table(name, schema=schema):
            return None
        return {c["name"].lower(): c["name"] for c in inspector.get_columns(name, schema=schema)}


def _run_ddl(conn: Any, ddl: str, transactional: bool) -> Exception | None:
    """Run ``ddl``; its error if it failed, for the caller to check whether a peer got there first.

    Tasks writing the same topics race to create a missing table: on PostgreSQL the loser's
    ``CREATE TABLE`` waits for the winner's transaction and then fails with "already exists"
    (``IF NOT EXISTS`` races the same way). Where DDL is transactional a savepoint keeps the
    loser's transaction usable; MySQL commits around DDL, and a failed statement aborts nothing.
    """
    savepoint = conn.begin_nested() if transactional else None
    try:
        conn.exec_driver_sql(ddl)
    except Exception as exc:  # noqa: BLE001 - the driver's error types vary; checked below
        if savepoint is not None:
            try:
                savepoint.rollback()
            except Exception:  # noqa: BLE001 - a failed rollback: the DDL's own error is raised
                raise exc from None  # the connection is gone: the DDL's own error says why
        log.info("DDL failed, checking whether another writer made the change: %s", exc)
        return exc
    if savepoint is not None:
        savepoint.commit()
    return None


def _spelling(known: dict[str, str], name: str) -> str:
    if name in known.values():
        return name
    return known.get(name.lower(), name)
