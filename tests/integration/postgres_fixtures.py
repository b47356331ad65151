"""Fixtures for integration tests that need a real PostgreSQL server.

Import them from ``tests/integration/conftest.py``::

    from tests.integration.postgres_fixtures import postgres_db_fixture, postgres_server_fixture  # noqa: F401

(The functions have other names than the fixtures, so a test's ``postgres`` argument does not
shadow an imported name.) ``postgres`` starts one private cluster per session (about 1.5 s) with
:class:`sluice.deploy.postgres.PostgresServer`. Like the ``kafka`` fixture it never skips: a server that
cannot start fails the tests that need it, with the reason (and the install command).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sluice.deploy.postgres import PostgresError, PostgresServer


@pytest.fixture(scope="session", name="postgres")
def postgres_server_fixture() -> Iterator[PostgresServer]:
    """A PostgreSQL 15 server (``wal_level=logical``) on a free loopback port, for the whole session."""
    server = PostgresServer(kill_with_parent=True)
    reason: str | None = None
    try:
        server.start()
    except PostgresError as exc:
        reason = str(exc)
    if reason is not None:
        pytest.fail(f"could not start PostgreSQL for integration tests:\n{reason}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(name="postgres_db")
def postgres_db_fixture(postgres: PostgresServer) -> Iterator[str]:
    """A fresh, empty database of the session server; yields its SQLAlchemy URL.

    Replication slots a test left in it (a CDC connector keeps its slot when it stops, as
    Debezium's does) are dropped afterwards: the session server has a fixed number of them."""
    name = f"test_{uuid.uuid4().hex[:10]}"
    yield postgres.create_database(name)
    with psycopg.connect(postgres.dsn("postgres"), autocommit=True) as conn:
        conn.execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = %s AND NOT active",
            (name,),
        )


@pytest.fixture(name="private_postgres")
def private_postgres_fixture() -> Iterator[PostgresServer]:
    """A PostgreSQL server of the test's own, for tests that stop and restart it (an outage).

    Its data directory outlives ``stop()``, so ``start()`` brings the same server back on the same
    port with the same data. Import it into the test module that uses it.
    """
    base = Path(tempfile.mkdtemp(prefix="sluice-pg-private-"))
    server = PostgresServer(base_dir=base, kill_with_parent=True)
    try:
        server.start()
    except PostgresError as exc:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"could not start PostgreSQL for integration tests:\n{exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
