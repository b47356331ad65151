"""Categorising why a database connection could not be opened (psycopg, PyMySQL, via SQLAlchemy).

A driver's message quotes what the far side sent (libpq's "received invalid response: X", the
bytes PyMySQL took for a packet), so it never reaches a REST caller: it is mapped onto the fixed
categories of :mod:`sluice.connectors.api.connectivity`, and which setting is to blame. The
driver's words go to the worker's log at DEBUG for the operator.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from sluice.connectors.api.connectivity import (
    ConnectFailure,
    ConnectivityError,
    FailureKind,
    RetriableConnectivityError,
    causes,
    classify_network_error,
    connectivity_message,
    error_code,
    host_port,
)

T = TypeVar("T")

log = logging.getLogger(__name__)

#: SQLAlchemy backend name → the service a wrong server is "not".
SERVICE_NAMES = {"postgresql": "PostgreSQL", "mysql": "MySQL"}


class Blame(enum.Enum):
    """Which setting a connection failure points at."""

    ADDRESS = "address"  # host, port, TLS: the URL (or hostname key)
    USER = "user"
    PASSWORD = "password"
    DATABASE = "database"


@dataclass(frozen=True)
class DatabaseFailure:
    """A categorised connection failure and the setting to fix."""

    failure: ConnectFailure
    blame: Blame = Blame.ADDRESS


# libpq's client-side messages (no SQLSTATE), lower-cased, checked in order: the first match wins.
# Garbage from a non-PostgreSQL port comes before TLS: libpq retries without TLS and reports both.
_POSTGRES_TEXT: tuple[tuple[tuple[str, ...], FailureKind, Blame], ...] = (
    (("password authentication failed", "no password supplied", "authentication failed", "pg_hba.conf"),
     FailureKind.AUTHENTICATION, Blame.PASSWORD),
    (("connection refused",), FailureKind.REFUSED, Blame.ADDRESS),
    (("timeout expired", "timed out"), FailureKind.TIMED_OUT, Blame.ADDRESS),
    (("could not translate host name", "name or service not known", "nodename nor servname", "name resolution"),
     FailureKind.HOST_NOT_FOUND, Blame.ADDRESS),
    (("no route to host", "network is unreachable", "host is unreachable"), FailureKind.UNREACHABLE, Blame.ADDRESS),
    (("server closed the connection unexpectedly", "invalid response", "expected authentication request",
      "unexpected message", "received invalid", "lost synchronization", "protocol"),
     FailureKind.WRONG_SERVICE, Blame.ADDRESS),
    (("ssl", "certificate", "tls"), FailureKind.TLS, Blame.ADDRESS),
)  # fmt: skip

_MYSQL_AUTH = {1044, 1045, 1698, 2059, 2061}
_MYSQL_UNKNOWN_DATABASE = 1049
_MYSQL_UNKNOWN_HOST = 2005
#: "Lost connection" / "server has gone away": the connection was open, then broke off.
_MYSQL_LOST = {2006, 2013}


def classify_database_error(error: BaseException, backend: str) -> DatabaseFailure:
    """The category of ``error``, raised opening a connection to a ``backend`` database
    (``postgresql`` or ``mysql``, SQLAlchemy's backend names)."""
    service = SERVICE_NAMES.get(backend, backend)
    driver_error = _driver_error(error)
    if backend == "postgresql":
        found = _postgres(driver_error, service)
    elif backend == "mysql":
        found = _mysql(driver_error, service)
    else:
        network = classify_network_error(driver_error)
        found = DatabaseFailure(network or ConnectFailure(FailureKind.UNREACHABLE))
    log.debug("Connecting to a %s database failed (%s): %s", service, found.failure.describe(), _first_line(error))
    return found


def classify_postgres(error: BaseException) -> DatabaseFailure:
    """:func:`classify_database_error` for psycopg's errors (the CDC source, backfills)."""
    return classify_database_error(error, "postgresql")


def postgres_unreachable(
    error: BaseException, host: str, port: int | None, key: str = "database.hostname"
) -> RetriableConnectivityError:
    """The error a PostgreSQL task raises (``from error``) when its connection cannot be opened:
    the category on ``key``, retried by the runtime; libpq's text, which may quote what the port
    sent, goes to the log."""
    target = host_port(host, port)
    log.warning("Cannot connect to PostgreSQL at %s: %s", target, _first_line(error))
    return RetriableConnectivityError(key, target, classify_postgres(error).failure)


def _driver_error(error: BaseException) -> BaseException:
    """The DB-API exception SQLAlchemy wrapped (``orig``), or ``error`` itself."""
    for cause in causes(error):
        orig = getattr(cause, "orig", None)  # SQLAlchemy's DBAPIError: no protocol to declare it
        if isinstance(orig, BaseException):
            return orig
    return error


def _postgres(error: BaseException, service: str) -> DatabaseFailure:
    sqlstate = getattr(error, "sqlstate", None)  # psycopg.Error; None for client-side failures
    text = str(error).lower()
    if sqlstate in ("28P01", "28000") or ("role" in text and "does not exist" in text):
        blame = Blame.USER if "role" in text and "does not exist" in text else Blame.PASSWORD
        return DatabaseFailure(ConnectFailure(FailureKind.AUTHENTICATION), blame)
    if sqlstate == "3D000" or ("database" in text and "does not exist" in text):
        return DatabaseFailure(ConnectFailure(FailureKind.DATABASE_NOT_FOUND), Blame.DATABASE)
    for needles, kind, blame in _POSTGRES_TEXT:
        if any(n in text for n in needles):
            return DatabaseFailure(_with_service(kind, service), blame)
    network = classify_network_error(error)
    if network is not None:
        return DatabaseFailure(network)
    code = error_code("SQLSTATE", sqlstate)
    if code is not None:
        return DatabaseFailure(ConnectFailure(FailureKind.SERVER_ERROR, code=code))
    return DatabaseFailure(ConnectFailure(FailureKind.UNREACHABLE))


def _mysql(error: BaseException, service: str) -> DatabaseFailure:
    args = getattr(error, "args", ())
    number = args[0] if args and isinstance(args[0], int) else None
    if number in _MYSQL_AUTH:
        return DatabaseFailure(ConnectFailure(FailureKind.AUTHENTICATION), Blame.PASSWORD)
    if number == _MYSQL_UNKNOWN_DATABASE:
        return DatabaseFailure(ConnectFailure(FailureKind.DATABASE_NOT_FOUND), Blame.DATABASE)
    if number == _MYSQL_UNKNOWN_HOST:
        return DatabaseFailure(ConnectFailure(FailureKind.HOST_NOT_FOUND))
    network = classify_network_error(error)
    if number in _MYSQL_LOST and (network is None or network.kind is not FailureKind.TIMED_OUT):
        # Connected, then the handshake broke off: the port answered, not as MySQL does.
        return DatabaseFailure(_with_service(FailureKind.WRONG_SERVICE, service))
    if network is not None:
        return DatabaseFailure(network)
    if number is not None and number < 2000:  # the server's own error numbers
        code = error_code("MySQL", number)
        return DatabaseFailure(ConnectFailure(FailureKind.SERVER_ERROR, code=code))
    if number == 2003:
        return DatabaseFailure(ConnectFailure(FailureKind.UNREACHABLE))
    # Lost connection in the handshake (2013) with no timeout behind it, a packet out of sequence,
    # or a parser choking on bytes that were not a MySQL greeting: the port answered, not as MySQL.
    return DatabaseFailure(_with_service(FailureKind.WRONG_SERVICE, service))


def _with_service(kind: FailureKind, service: str) -> ConnectFailure:
    return ConnectFailure(kind, service=service) if kind is FailureKind.WRONG_SERVICE else ConnectFailure(kind)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class ConnectionNotOpened(ConnectionError):
    """No connection could be opened, for the reason ``found`` categorises. A ``ConnectionError``,
    so that a task's retry paths (:func:`~sluice.connectors.jdbc_common.errors.classify`) take it
    for the transient failure it is; its message is the key, the target and the category alone,
    and it is raised from nothing, so no trace shows the driver's text."""

    def __init__(self, key: str, target: str, found: DatabaseFailure) -> None:
        super().__init__(connectivity_message(key, target, found.failure))
        self.found = found


def open_categorised(open_connection: Callable[[], T], backend: str, target: str, keys: dict[Blame, str]) -> T:
    """``open_connection()``, or the failure categorised: refused credentials and a missing
    database (which retrying cannot fix) as a :class:`ConnectivityError` on the key ``keys`` gives
    for the blame (``keys[Blame.ADDRESS]`` otherwise), anything else as :class:`ConnectionNotOpened`.
    The driver's text goes to the log (it may quote what a port that is no database sent)."""
    try:
        return open_connection()
    except Exception as exc:  # the driver's own exception types vary
        found = classify_database_error(exc, backend)
        log.warning("Connecting to %s failed: %s", target, _first_line(exc))
        if found.failure.kind in (FailureKind.AUTHENTICATION, FailureKind.DATABASE_NOT_FOUND):
            raise ConnectivityError(keys.get(found.blame, keys[Blame.ADDRESS]), target, found.failure) from exc
        raise ConnectionNotOpened(keys[Blame.ADDRESS], target, found) from None


#: The JDBC connectors' keys for each blame.
JDBC_KEYS: dict[Blame, str] = {
    Blame.ADDRESS: "connection.url",
    Blame.USER: "connection.user",
    Blame.PASSWORD: "connection.password",
    Blame.DATABASE: "connection.url",
}
