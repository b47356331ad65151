"""Helpers shared by the JDBC integration tests: SQL against the test database, JSON envelopes."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

import orjson
import psycopg
import pytest

T = TypeVar("T")

JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
_INSTALLED = {ep.name for ep in entry_points(group="sluice.connectors")}
# Users name the connectors by Confluent's class names; without the JDBC entry points, by the
# Python path (which then names nothing the worker discovered, and the test fails clearly).
JDBC_SOURCE = (
    "io.confluent.connect.jdbc.JdbcSourceConnector"
    if "JdbcSource" in _INSTALLED
    else "sluice.connectors.source.jdbc.connector.JdbcSourceConnector"
)
JDBC_SINK = (
    "io.confluent.connect.jdbc.JdbcSinkConnector"
    if "JdbcSink" in _INSTALLED
    else "sluice.connectors.sink.jdbc.connector.JdbcSinkConnector"
)
#: Worker settings every JDBC integration test's worker needs.
WORKER_SETTINGS: dict[str, str] = {}


def libpq_url(sqlalchemy_url: str) -> str:
    """``postgresql+psycopg://…`` → ``postgresql://…`` for psycopg."""
    return sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)


def sql(url: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement in its own committed transaction; return its rows (if any)."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def wait_for(probe: Callable[[], T], done: Callable[[T], bool], *, timeout: float = 60, what: str = "") -> T:
    """Poll ``probe`` until ``done(result)``; raise with the last result after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = probe()
    while not done(last):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: last saw {last!r}")
        time.sleep(0.2)
        last = probe()
    return last


def envelope(schema: dict[str, Any] | None, payload: Any) -> bytes:
    """A JsonConverter message with ``schemas.enable=true``."""
    return orjson.dumps({"schema": schema, "payload": payload})


def struct_schema(name: str, *fields: tuple[str, str, bool]) -> dict[str, Any]:
    """A Connect struct schema in JSON form from ``(field, type, optional)`` triples."""
    return {
        "type": "struct",
        "name": name,
        "optional": False,
        "fields": [{"field": f, "type": t, "optional": o} for f, t, o in fields],
    }


class Database:
    """One test database of any dialect, reached through SQLAlchemy the way a user would check it.

    ``kind`` is ``postgresql``, ``mariadb`` or ``sqlite``; ``url`` is what the connector is
    configured with. Statements use ``%s`` placeholders on every dialect.
    """

    def __init__(self, kind: str, url: str) -> None:
        import sqlalchemy

        self.kind = kind
        self.url = url
        self._engine = sqlalchemy.create_engine(
            url.replace("postgresql://", "postgresql+psycopg://", 1) if url.startswith("postgresql://") else url,
            poolclass=sqlalchemy.pool.NullPool,
        )

    def __repr__(self) -> str:
        return f"Database({self.kind})"

    def sql(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        """Run one statement in its own committed transaction; return its rows (if any)."""
        if self.kind == "sqlite":
            statement = statement.replace("%s", "?")
        with self._engine.begin() as conn:
            result = conn.exec_driver_sql(statement, tuple(params) if params is not None else ())
            return [tuple(r) for r in result.fetchall()] if result.returns_rows else []

    def quote(self, name: str) -> str:
        return f"`{name}`" if self.kind == "mariadb" else f'"{name}"'

    def exists(self, table: str) -> bool:
        from sqlalchemy import inspect

        with self._engine.connect() as conn:
            return bool(inspect(conn).has_table(table))

    def rows(self, table: str, columns: str = "*", order: str = "1") -> list[tuple[Any, ...]]:
        """All rows of ``table`` in ``order`` (none while the table does not exist)."""
        if not self.exists(table):
            return []
        return self.sql(f"SELECT {columns} FROM {self.quote(table)} ORDER BY {order}")

    def columns(self, table: str) -> list[tuple[str, str, bool]]:
        """``(name, declared type in lower case, nullable)`` of every column, in order."""
        from sqlalchemy import inspect

        with self._engine.connect() as conn:
            return [(c["name"], str(c["type"]).lower(), bool(c["nullable"])) for c in inspect(conn).get_columns(table)]

    def primary_key(self, table: str) -> list[str]:
        from sqlalchemy import inspect

        with self._engine.connect() as conn:
            return list(inspect(conn).get_pk_constraint(table)["constrained_columns"])

    def serial_pk(self) -> str:
        """An auto-incrementing integer primary key column definition named ``id``."""
        return {
            "postgresql": "id serial PRIMARY KEY",
            "mariadb": "id int NOT NULL AUTO_INCREMENT PRIMARY KEY",
            "sqlite": "id INTEGER PRIMARY KEY AUTOINCREMENT",
        }[self.kind]

    def dispose(self) -> None:
        self._engine.dispose()


DIALECTS = ("postgresql", "mariadb", "sqlite")


def make_database(kind: str, request: Any, tmp_path: Path) -> Database:
    """A fresh database of ``kind`` for one test (servers come from the session fixtures)."""
    if kind == "postgresql":
        return Database(kind, request.getfixturevalue("postgres_db"))
    if kind == "mariadb":
        return Database(kind, request.getfixturevalue("mariadb_db"))
    # The worker runs in another process and opens the same file.
    return Database(kind, f"sqlite:///{tmp_path / 'test.db'}")


def database_fixture(kinds: tuple[str, ...] = DIALECTS) -> Any:
    """A ``db`` fixture for a test module: a fresh :class:`Database` of each of ``kinds``."""

    @pytest.fixture(params=kinds)
    def db(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
        database = make_database(request.param, request, tmp_path)
        try:
            yield database
        finally:
            database.dispose()

    return db


def connector_url(db: Database, request: Any, subprotocol: str = "mariadb") -> str:
    """What a user would configure: the JDBC URL (``jdbc:mariadb://`` or ``jdbc:mysql://``) for
    MariaDB, the SQLAlchemy URL for the others."""
    if db.kind != "mariadb":
        return db.url
    database = db.url.rsplit("/", 1)[1]
    return str(request.getfixturevalue("mariadb").jdbc_url(database, subprotocol=subprotocol))
