"""Fixtures for integration tests that need a real MariaDB server.

Import them from ``tests/integration/conftest.py``::

    from tests.integration.mariadb_fixtures import mariadb_db_fixture, mariadb_server_fixture  # noqa: F401

``mariadb`` starts one private server per session (about 1–3 s) with
:class:`sluice.deploy.mariadb.MariaDbServer`; ``mariadb_db`` gives each test a fresh database and returns
its SQLAlchemy URL. Like the ``kafka`` and ``postgres`` fixtures they never skip: a server that
cannot start fails the tests that need it, with the reason (and the install command).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from sluice.deploy.mariadb import MariaDbError, MariaDbServer


@pytest.fixture(scope="session", name="mariadb")
def mariadb_server_fixture() -> Iterator[MariaDbServer]:
    """A MariaDB server (Debian's ``mariadb-server``) on a free loopback port, for the whole session."""
    server = MariaDbServer(kill_with_parent=True)
    reason: str | None = None
    try:
        server.start()
    except MariaDbError as exc:
        reason = str(exc)
    if reason is not None:
        pytest.fail(f"could not start MariaDB for integration tests:\n{reason}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(name="mariadb_db")
def mariadb_db_fixture(mariadb: MariaDbServer) -> str:
    """A fresh, empty database of the session server; returns its SQLAlchemy URL."""
    return mariadb.create_database(f"test_{uuid.uuid4().hex[:10]}")
