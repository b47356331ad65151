"""Two writers create the same missing table at once, as the tasks of one JDBC sink (or the
partitions of a Spark backfill) do when they start on an empty database.

On PostgreSQL the second ``CREATE TABLE`` waits for the first transaction and then fails; the
loser must carry on with the winner's table instead of failing the task. MariaDB commits around
DDL, so there the loser's statement fails at once. Both writers' rows end up in the table.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sluice.connectors.api import Schema, Type
from sluice.connectors.jdbc_common.connection import create_engine, to_sqlalchemy_url
from sluice.connectors.jdbc_common.dialects import Column, dialect_for
from sluice.connectors.sink.jdbc.tables import TableManager
from tests.integration.jdbc_helpers import Database, connector_url, database_fixture

pytestmark = pytest.mark.integration

COLUMNS = [
    Column("id", Schema(Type.INT64), primary_key=True),
    Column("name", Schema(Type.STRING, optional=True)),
]
WIDER = [*COLUMNS, Column("email", Schema(Type.STRING, optional=True))]


db = database_fixture(("postgresql", "mariadb"))  # SQLite locks the whole file: writers cannot race


def _writer(db: Database, request: Any) -> tuple[Any, TableManager]:
    engine = create_engine(to_sqlalchemy_url(connector_url(db, request)))
    return engine, TableManager(dialect_for(engine.dialect.name), auto_create=True, auto_evolve=True)


def _insert(conn: Any, db: Database, row: tuple[Any, ...], names: list[str]) -> None:
    cols = ", ".join(db.quote(n) for n in names)
    marks = ", ".join("%s" for _ in names)
    conn.exec_driver_sql(f"INSERT INTO {db.quote('race')} ({cols}) VALUES ({marks})", row)


@pytest.mark.parametrize("columns", [COLUMNS, WIDER], ids=["create", "create-then-evolve"])
def test_concurrent_auto_create_keeps_both_writers(db: Database, request: Any, columns: list[Column]) -> None:
    (engine_a, tables_a), (engine_b, tables_b) = _writer(db, request), _writer(db, request)
    conn_a, conn_b = engine_a.connect(), engine_b.connect()
    try:
        trans_a = conn_a.begin()
        names_a = tables_a.ensure(conn_a, "race", COLUMNS)  # created, not yet committed
        _insert(conn_a, db, (1, "first"), names_a)

        outcome: dict[str, Any] = {}

        def second() -> None:
            try:
                with conn_b.begin():
                    names_b = tables_b.ensure(conn_b, "race", columns)
                    _insert(conn_b, db, (2, "second", "b@example.com")[: len(names_b)], names_b)
                outcome["names"] = names_b
            except Exception as exc:  # noqa: BLE001 - reported below, with the database's message
                outcome["error"] = exc

        thread = threading.Thread(target=second)
        thread.start()
        thread.join(1.0)  # on PostgreSQL the second CREATE TABLE is now waiting for the first transaction
        trans_a.commit()
        thread.join(30)
        assert not thread.is_alive()
        assert "error" not in outcome, f"the second writer failed: {outcome['error']}"
        assert outcome["names"] == [c.name for c in columns]
        assert db.sql(f"SELECT {db.quote('id')}, {db.quote('name')} FROM {db.quote('race')} ORDER BY 1") == [
            (1, "first"),
            (2, "second"),
        ]
    finally:
        conn_a.close()
        conn_b.close()
        engine_a.dispose()
        engine_b.dispose()
