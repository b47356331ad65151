"""Fixtures for integration tests that need a real MariaDB server.

Import them from ``tests/integration/conftest.py``::

    from tests.integration.mariadb_fixtures import mariadb_db_fixture, mariadb_server_fixture  # noqa: F401

``mariadb`` starts one private server per session (about 1–3 s) with
:class:`tests.services.mariadb.MariaDbServer`; ``mariadb_db`` gives each test a fresh database and returns
its SQLAlchemy URL. Like the ``kafka`` and ``postgres`` fixtures they never skip: a server that
cannot start fails the tests that need it, with the reason (and the install command).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.shared_services import session_service
from tests.services.mariadb import MariaDbServer


def new_mariadb(data_dir: Path) -> MariaDbServer:
    """The session's MariaDB, not started (in a directory of its own, like PostgreSQL's), with the
    binary log the binlog CDC source reads (row format, full images and metadata, GTIDs)."""
    return MariaDbServer(kill_with_parent=True, binlog=True)


@pytest.fixture(scope="session", name="mariadb")
def mariadb_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDbServer]:
    """A MariaDB server (Debian's ``mariadb-server``) on a free loopback port, for the whole session."""
    yield from session_service(tmp_path_factory, "mariadb", new_mariadb, "could not start MariaDB for integration tests")


@pytest.fixture(name="mariadb_db")
def mariadb_db_fixture(mariadb: MariaDbServer) -> str:
    """A fresh, empty database of the session server; returns its SQLAlchemy URL."""
    return mariadb.create_database(f"test_{uuid.uuid4().hex[:10]}")
