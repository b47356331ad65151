"""What kind of connectivity failure happened, never what the far side said.

A connector config is untrusted: ``connection.url`` may name any host and port the worker can
reach. If validate or a task's status trace repeated the remote server's answer (an HTTP body, a
driver's message quoting the bytes it received), a REST caller could read services only the worker
reaches, and tell closed, filtered and open ports apart by the wording. So every connectivity
failure that reaches a REST caller is one of a small fixed set of categories
(:class:`FailureKind`), described by :meth:`ConnectFailure.describe` with nothing from the remote
side but an HTTP status code or a database error code (both checked to be codes). The original
error belongs in the worker's log, for the operator.

This module classifies what the standard library raises (sockets, DNS, TLS, timeouts). What a
driver raises (psycopg, PyMySQL, httpx) is mapped by the connectors that use the driver, onto the
same categories.
"""

from __future__ import annotations

import enum
import re
import socket
import ssl
from collections.abc import Iterator
from dataclasses import dataclass

from sluice.connectors.api.errors import ConnectError, RetriableError

_CODE = re.compile(r"[0-9A-Z]{1,8}")


class FailureKind(enum.Enum):
    """The categories a connectivity failure is reported as; the value is the fixed text."""

    REFUSED = "connection refused"
    TIMED_OUT = "timed out"
    TLS = "TLS failure"
    AUTHENTICATION = "authentication failed"
    HTTP_STATUS = "HTTP status"
    WRONG_SERVICE = "not the expected service"
    HOST_NOT_FOUND = "host not found"
    DATABASE_NOT_FOUND = "database not found"
    SERVER_ERROR = "server error"
    UNREACHABLE = "unreachable"


@dataclass(frozen=True)
class ConnectFailure:
    """One categorised failure: the kind, plus the HTTP status, the error code or the service a
    ``WRONG_SERVICE`` failure expected, when they apply."""

    kind: FailureKind
    status: int | None = None
    #: A database error code (``SQLSTATE 53300``, ``MySQL 1040``): a label and a code, no text.
    code: str | None = None
    #: The service the far side is not, e.g. ``Elasticsearch`` for "not an Elasticsearch server".
    service: str | None = None

    def describe(self) -> str:
        """The fixed text of the category: the same words whatever the remote side sent."""
        if self.kind is FailureKind.HTTP_STATUS and self.status is not None:
            return f"HTTP {self.status}"
        if self.kind is FailureKind.AUTHENTICATION and self.status is not None:
            return f"authentication failed (HTTP {self.status})"
        if self.kind is FailureKind.WRONG_SERVICE and self.service:
            article = "an" if self.service[:1].upper() in "AEIOU" else "a"
            return f"not {article} {self.service} server"
        if self.kind is FailureKind.SERVER_ERROR and self.code:
            return f"server error ({self.code})"
        return self.kind.value


def http_status_failure(status: int) -> ConnectFailure:
    """The category of an HTTP error status: 401 and 403 are refused credentials, the rest is the
    status code alone (the body never counts)."""
    if status in (401, 403):
        return ConnectFailure(FailureKind.AUTHENTICATION, status=status)
    return ConnectFailure(FailureKind.HTTP_STATUS, status=status)


def error_code(label: str, code: object) -> str | None:
    """``"<label> <code>"`` when ``code`` looks like an error code (digits and capitals, at most
    eight), else ``None``: a server chooses the code, so it is checked before it is repeated."""
    text = str(code) if code is not None else ""
    return f"{label} {text}" if _CODE.fullmatch(text) else None


def causes(error: BaseException) -> Iterator[BaseException]:
    """``error`` and every exception it was raised from or during, outermost first (each once)."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def classify_network_error(error: BaseException) -> ConnectFailure | None:
    """The category of the standard library's socket, DNS, TLS or timeout error found in
    ``error``'s chain, or ``None`` when there is none (a driver's own error, to be mapped by the
    connector that knows the driver)."""
    for cause in causes(error):
        kind = _network_kind(cause)
        if kind is not None:
            return ConnectFailure(kind)
    return None


def _network_kind(error: BaseException) -> FailureKind | None:
    # Order matters: an SSL error is an OSError, a refused connection a ConnectionError.
    if isinstance(error, (ssl.SSLError, ssl.CertificateError)):
        return FailureKind.TLS
    if isinstance(error, ConnectionRefusedError):
        return FailureKind.REFUSED
    if isinstance(error, socket.gaierror):
        return FailureKind.HOST_NOT_FOUND
    if isinstance(error, TimeoutError):
        return FailureKind.TIMED_OUT
    if isinstance(error, OSError):
        return FailureKind.UNREACHABLE
    return None


def host_port(host: str | None, port: int | None) -> str:
    """``host:port`` as the user wrote them (IPv6 in brackets), for messages."""
    shown = host or "?"
    if ":" in shown and not shown.startswith("["):
        shown = f"[{shown}]"
    return f"{shown}:{port}" if port is not None else shown


def connectivity_message(key: str, target: str, failure: ConnectFailure, context: str = "") -> str:
    """The message for ``key``: which setting, which ``host:port``, which category; nothing else
    but ``context``, the connector's own words on what it was doing."""
    text = f"{key}: cannot connect to {target}: {failure.describe()}"
    return f"{context}: {text}" if context else text


class ConnectivityError(ConnectError):
    """The external system could not be used, for the reason ``failure`` categorises.

    The message says only the key, the target the user configured and the category. The runtime
    shows it in status traces without the exceptions it was raised from, which hold the driver's or
    the server's words (they go to the worker's log instead).
    """

    def __init__(self, key: str, target: str, failure: ConnectFailure, *, context: str = "") -> None:
        super().__init__(connectivity_message(key, target, failure, context))
        self.key = key
        self.target = target
        self.failure = failure


class RetriableConnectivityError(ConnectivityError, RetriableError):
    """A :class:`ConnectivityError` worth retrying (the server may come back)."""
