"""Connection URLs and engines.

Accepts SQLAlchemy URLs (``postgresql+psycopg://…``, ``sqlite:///path``) and the JDBC URLs that
Confluent's connector is configured with (``jdbc:postgresql://host:5432/db``,
``jdbc:mysql://host/db``, ``jdbc:mariadb://…``, ``jdbc:sqlite:/path``), translated to the
SQLAlchemy driver Sluice uses for that database.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from sluice.connectors.api import ConfigError, ConnectError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, Engine

logger = logging.getLogger(__name__)

#: JDBC subprotocol → SQLAlchemy drivername.
_JDBC_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
    "sqlite": "sqlite",
}

#: Bare SQLAlchemy backend → the driver Sluice ships with (``postgresql://`` means psycopg 3 here).
_DEFAULT_DRIVERS = {
    "postgresql": "postgresql+psycopg",
    "postgres": "postgresql+psycopg",
    "mysql": "mysql+pymysql",
    "mariadb": "mysql+pymysql",
}

#: JDBC query parameters that mean the credentials, not driver options.
_CREDENTIAL_PARAMS = {"user": "username", "password": "password"}


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


def to_sqlalchemy_url(url: str, user: str | None = None, password: str | None = None) -> URL:
    """Parse ``connection.url`` (SQLAlchemy or JDBC spelling) into a SQLAlchemy :class:`URL`.

    ``user``/``password`` (``connection.user``/``connection.password``) override credentials in
    the URL. Raises :class:`ConfigError` for ``connection.url`` if it cannot be understood.
    """
    sa = import_sqlalchemy()
    from sqlalchemy.engine import make_url

    text = url.strip()
    if not text:
        raise ConfigError("connection.url: must not be empty", key="connection.url")
    if text.startswith("jdbc:"):
        parsed = _from_jdbc(text[len("jdbc:") :], sa)
    else:
        try:
            parsed = make_url(text)
        except Exception as exc:
            raise ConfigError(f"connection.url: cannot parse {text!r}: {exc}", key="connection.url") from None
        driver = _DEFAULT_DRIVERS.get(parsed.drivername)
        if driver is not None:
            parsed = parsed.set(drivername=driver)
    if user:
        parsed = parsed.set(username=user)
    if password:
        parsed = parsed.set(password=password)
    return parsed  # type: ignore[no-any-return]


def _from_jdbc(rest: str, sa: Any) -> URL:
    protocol, _, remainder = rest.partition(":")
    drivername = _JDBC_DRIVERS.get(protocol.lower())
    if drivername is None:
        raise ConfigError(
            f"connection.url: unsupported JDBC subprotocol {protocol!r}; supported: {', '.join(sorted(_JDBC_DRIVERS))}",
            key="connection.url",
        )
    if drivername == "sqlite":
        # jdbc:sqlite:/abs/path, jdbc:sqlite:relative.db, jdbc:sqlite::memory:
        path = remainder
        if path in ("", ":memory:"):
            return sa.engine.URL.create("sqlite", database=":memory:")  # type: ignore[no-any-return]
        return sa.engine.URL.create("sqlite", database=path.removeprefix("//"))  # type: ignore[no-any-return]
    split = urlsplit(remainder)
    if not split.hostname:
        raise ConfigError(f"connection.url: no host in jdbc:{rest!r}", key="connection.url")
    query: dict[str, str] = {}
    username = split.username
    password = split.password
    # JDBC drivers also take ";key=value" suffixes (SQL Server style); PostgreSQL and MySQL use "?".
    for key, value in parse_qsl(split.query, keep_blank_values=True):
        mapped = _CREDENTIAL_PARAMS.get(key)
        if mapped == "username":
            username = value
        elif mapped == "password":
            password = value
        elif drivername.startswith("postgresql") and key in ("sslmode", "application_name", "connect_timeout"):
            query[key] = value
    try:
        port = split.port
    except ValueError:
        raise ConfigError(f"connection.url: invalid port in jdbc:{rest!r}", key="connection.url") from None
    return sa.engine.URL.create(  # type: ignore[no-any-return]
        drivername,
        username=username,
        password=password,
        host=split.hostname,
        port=port,
        database=split.path.lstrip("/") or None,
        query=query,
    )


def create_engine(url: URL, *, db_timezone: str = "UTC", pool_size: int = 2) -> Engine:
    """An engine whose sessions use ``db_timezone`` (PostgreSQL, MySQL), so naive timestamps in
    queries and results mean the same instant on both sides."""
    sa = import_sqlalchemy()
    backend = url.get_backend_name()
    kwargs: dict[str, Any] = {"pool_pre_ping": True}
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
    except Exception as exc:
        raise ConfigError(f"connection.url: {exc}", key="connection.url") from None

    if backend == "sqlite":
        # pysqlite defers BEGIN to the first DML and commits before DDL; SQLAlchemy's recipe makes
        # transactions (and savepoints) cover everything, as on the other databases.
        @sa.event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_connection: Any, connection_record: Any) -> None:
            dbapi_connection.isolation_level = None

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
) -> Any:
    """Call ``open_connection`` up to ``attempts`` times, ``backoff_ms`` apart (``connection.attempts``)."""
    last: BaseException | None = None
    for attempt in range(1, max(1, attempts) + 1):
        try:
            return open_connection()
        except Exception as exc:  # the driver's own exception types vary
            last = exc
            logger.warning("Connecting to %s failed (attempt %d of %d): %s", what, attempt, attempts, _first_line(exc))
            if attempt < attempts:
                wait(backoff_ms / 1000)
    raise ConnectError(f"Cannot connect to {what} after {attempts} attempts: {_first_line(last)}") from last


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
    ``user_key``'s, refused credentials ``password_key``'s. The message names the URL with its
    password hidden and never contains the password. SQLite is not checked (connecting creates the
    file). Gives up after about ``timeout_s`` seconds (the driver's connect timeout).
    """
    backend = url.get_backend_name()
    if backend == "sqlite":
        return {}
    sa = import_sqlalchemy()
    seconds = max(1, int(timeout_s))
    connect_args = {"connect_timeout": seconds}
    if backend == "mysql":
        connect_args.update(read_timeout=seconds, write_timeout=seconds)
    try:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args=connect_args)
    except Exception as exc:  # a missing driver, a bad option
        return {url_key: f"Cannot use {safe_url(url)}: {_hide(_first_line(exc), url.password)}"}
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except Exception as exc:  # the driver's own exception types vary
        text = _hide(_first_line(getattr(exc, "orig", None) or exc), url.password)
        lowered = text.lower()
        if "password" in lowered or "access denied" in lowered or "authentication failed" in lowered:
            key = password_key
        elif "role" in lowered and "does not exist" in lowered:
            key = user_key
        else:
            key = url_key
        return {key: f"Cannot connect to {safe_url(url)}: {text}"}
    finally:
        engine.dispose()
    return {}


def _hide(text: str, password: Any) -> str:
    """``text`` without ``password`` in it (a driver may echo the connection string)."""
    return text.replace(str(password), "****") if password else text
