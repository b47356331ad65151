"""Connection URLs and engines.

Accepts SQLAlchemy URLs (``postgresql+psycopg://…``, ``sqlite:///path``) and the JDBC URLs that
Confluent's connector is configured with (``jdbc:postgresql://host:5432/db``,
``jdbc:mysql://host/db``, ``jdbc:mariadb://…``, ``jdbc:sqlite:/path``), translated to the
SQLAlchemy driver Sluice uses for that database. A URL is parsed, never passed through: only the
parameters :mod:`~sluice.connectors.jdbc_common.urls` allow-lists reach a driver, and every engine
is created with the driver arguments that keep it from reading the worker's own files.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sluice.connectors.api import ConfigError
from sluice.connectors.api.connectivity import ConnectivityError, connectivity_message, host_port
from sluice.connectors.jdbc_common.connect_failures import Blame, classify_database_error
from sluice.connectors.jdbc_common.urls import DRIVERNAMES, check_params, forced_connect_args, parse_connection_url

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, Engine

log = logging.getLogger(__name__)


def import_sqlalchemy() -> Any:
    """``sqlalchemy``, or a :class:`ConfigError` saying which extra to install."""
    try:
        import sqlalchemy
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(
            "The JDBC connectors need SQLAlchemy and a database driver: pip install 'sluice[jdbc]'",
            key="connection.url",
        ) from exc
    return sqlalchemy


def to_sqlalchemy_url(
    url: str, user: str | None = None, password: str | None = None, *, key: str = "connection.url"
) -> URL:
    """Parse ``connection.url`` (SQLAlchemy or JDBC spelling) into a SQLAlchemy :class:`URL`.

    The URL is taken apart by :func:`~sluice.connectors.jdbc_common.urls.parse_connection_url`:
    only allow-listed parameters reach the driver, anything else is a :class:`ConfigError` naming
    ``key``. ``user``/``password`` (``connection.user``/``connection.password``) override
    credentials in the URL.
    """
    sa = import_sqlalchemy()
    parsed = parse_connection_url(url, user, password, key=key)
    return sa.engine.URL.create(  # type: ignore[no-any-return]
        DRIVERNAMES[parsed.backend],
        username=parsed.username,
        password=parsed.password,
        host=parsed.host,
        port=parsed.port,
        database=parsed.database,
        query=dict(parsed.params),
    )


def engine_connect_args(url: URL, key: str = "connection.url") -> dict[str, Any]:
    """The driver arguments every engine of ``url`` is created with, after checking that its
    parameters are allow-listed (a URL built without :func:`to_sqlalchemy_url` is checked too):
    libpq's default credential files switched off, PyMySQL's LOCAL INFILE off."""
    backend = url.get_backend_name()
    if url.drivername not in DRIVERNAMES.values():
        raise ConfigError(f"{key}: unsupported driver {url.drivername!r}", key=key)
    check_params(backend, url.query, key)
    return forced_connect_args(backend, url.query)


def create_engine(url: URL, *, db_timezone: str = "UTC", pool_size: int = 2) -> Engine:
    """An engine whose sessions use ``db_timezone`` (PostgreSQL, MySQL), so naive timestamps in
    queries and results mean the same instant on both sides."""
    sa = import_sqlalchemy()
    backend = url.get_backend_name()
    kwargs: dict[str, Any] = {"pool_pre_ping": True, "connect_args": engine_connect_args(url)}
    if backend != "sqlite":
        kwargs.update(pool_size=pool_size, max_overflow=2)
    try:
        engine = sa.create_engine(url, **kwargs)
    except ImportError as exc:
        raise ConfigError(
            f"connection.url: the driver for {url.drivername} is not installed ({exc}); "
            "pip install 'sluice[jdbc]' (PostgreSQL) or the driver SQLAlchemy names",
            key="connection.url",
        ) from None
    except Exception as exc:  # noqa: BLE001 - the driver's own parse errors vary
        raise ConfigError(f"connection.url: {exc}", key="connection.url") from None

    if backend == "sqlite":
        # pysqlite defers BEGIN to the first DML and commits before DDL; SQLAlchemy's recipe makes
        # transactions (and savepoints) cover everything, as on the other databases.
        @sa.event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_connection: Any, connection_record: Any) -> None:
            dbapi_connection.isolation_level = None
            # SQL could otherwise open or create any file the worker's user can (ATTACH DATABASE,
            # VACUUM INTO): the database file is the one connector.allowed.paths confined.
            dbapi_connection.set_authorizer(_sqlite_authorizer)

        @sa.event.listens_for(engine, "begin")
        def _sqlite_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN")

    if backend in ("postgresql", "mysql"):
        set_tz = _session_timezone_sql(backend, db_timezone)

        @sa.event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, connection_record: Any) -> None:
            cursor = dbapi_connection.cursor()
            try:
                cursor.execute(set_tz)
            finally:
                cursor.close()
            if backend == "postgresql":
                dbapi_connection.commit()

    return engine  # type: ignore[no-any-return]


def _sqlite_authorizer(
    action: int, arg1: str | None, arg2: str | None, db_name: str | None, trigger: str | None
) -> int:
    """Deny statements that open another database file; allow everything else."""
    import sqlite3  # the standard library's; only SQLite engines get here

    return sqlite3.SQLITE_DENY if action == sqlite3.SQLITE_ATTACH else sqlite3.SQLITE_OK


def _session_timezone_sql(backend: str, tz: str) -> str:
    quoted = tz.replace("'", "''")
    if backend == "postgresql":
        return f"SET TIME ZONE '{quoted}'"
    # MySQL needs the time zone tables for names; UTC offsets always work.
    return "SET time_zone = '+00:00'" if tz.upper() in ("UTC", "Z", "GMT") else f"SET time_zone = '{quoted}'"


def safe_url(url: URL) -> str:
    """The URL as text with the password masked, for logs and error messages."""
    return url.render_as_string(hide_password=True)


def connect_with_retries(
    open_connection: Callable[[], Any],
    *,
    attempts: int,
    backoff_ms: int,
    what: str,
    wait: Callable[[float], Any] = time.sleep,
    url: URL | None = None,
    url_key: str = "connection.url",
) -> Any:
    """Call ``open_connection`` up to ``attempts`` times, ``backoff_ms`` apart (``connection.attempts``).

    Gives up with a :class:`ConnectivityError` naming ``url_key``, the host and port of ``url``
    and the category of the last failure: the driver's text (which may quote what a non-database
    port sent) stays in the worker's log, out of the status trace."""
    last: BaseException | None = None
    for attempt in range(1, max(1, attempts) + 1):
        try:
            return open_connection()
        except Exception as exc:  # noqa: BLE001 - the driver's own exception types vary
            last = exc
            log.warning("Connecting to %s failed (attempt %d of %d): %s", what, attempt, attempts, _first_line(exc))
            if attempt < attempts:
                wait(backoff_ms / 1000)
    assert last is not None
    backend = url.get_backend_name() if url is not None else ""
    found = classify_database_error(last, backend)
    target = host_port(url.host, url.port) if url is not None else what
    raise ConnectivityError(url_key, target, found.failure, context=f"Gave up after {attempts} attempts")


def _first_line(exc: BaseException | None) -> str:
    text = str(exc) if exc is not None else ""
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__


def connectivity_problems(
    url: URL,
    timeout_s: float,
    *,
    url_key: str = "connection.url",
    user_key: str = "connection.user",
    password_key: str = "connection.password",
) -> dict[str, str]:
    """Open one connection to ``url`` and run ``SELECT 1``: ``{}``, or the problem on the key to fix.

    An unreachable server or unknown database is ``url_key``'s problem, an unknown user
    ``user_key``'s, refused credentials ``password_key``'s. The message names the key, the host
    and port, and the category of the failure (:mod:`~sluice.connectors.jdbc_common.connect_failures`),
    never the driver's text: a caller could otherwise read what any port on the worker's network
    answers. SQLite is not checked (connecting creates the file). Gives up after about
    ``timeout_s`` seconds (the driver's connect timeout).
    """
    backend = url.get_backend_name()
    if backend == "sqlite":
        return {}
    sa = import_sqlalchemy()
    seconds = max(1, int(timeout_s))
    connect_args = {**engine_connect_args(url, url_key), "connect_timeout": seconds}
    if backend == "mysql":
        connect_args.update(read_timeout=seconds, write_timeout=seconds)
    target = host_port(url.host, url.port)
    try:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args=connect_args)
    except Exception as exc:  # noqa: BLE001 - a missing driver, a bad option: the user's own input, no remote text
        return {url_key: f"Cannot use {safe_url(url)}: {_hide(_first_line(exc), url.password)}"}
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - the driver's own exception types vary
        found = classify_database_error(exc, backend)
        key = {Blame.PASSWORD: password_key, Blame.USER: user_key}.get(found.blame, url_key)
        return {key: connectivity_message(key, target, found.failure)}
    finally:
        engine.dispose()
    return {}


def _hide(text: str, password: Any) -> str:
    """``text`` without ``password`` in it (a driver may echo the connection string).

    Only where the password stands as a token, so a password ``p`` leaves ``port 5432`` alone and
    ``postgres`` leaves ``postgresql+psycopg`` alone; the worker masks its own way again on top."""
    if not password:
        return text
    secret = str(password)
    head = r"(?<!\w)" if re.match(r"\w", secret[0]) else ""
    tail = r"(?!\w)" if re.match(r"\w", secret[-1]) else ""
    return re.sub(f"{head}{re.escape(secret)}{tail}", "****", text)
