"""Connections to the MySQL or MariaDB server, under the least-privilege rules of the JDBC connectors.

Every connection the source opens (the SQL one for ``information_schema`` and the pre-flight
checks, the binlog stream and the reader's own control connection) goes through
:func:`connect`, which builds PyMySQL's arguments from the validated config and nothing else:
TCP to ``database.hostname`` (never a Unix socket), no option file (``read_default_file``), no
``init_command``, ``LOCAL INFILE`` off (a server could otherwise ask for any file the worker can
read), UTF-8 (utf8mb4), the session in UTC. TLS follows ``database.ssl.mode``: ``preferred``
falls back to plain TCP when the server offers no TLS; the modes from ``required`` on refuse such
a server (:class:`TlsRequired`).
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

import pymysql

from sluice.connectors.source.binlog_cdc.config import BinlogCdcConfig

#: PyMySQL arguments no caller may change (whatever the reader library passes).
_FORCED: dict[str, Any] = {
    "local_infile": False,
    "read_default_file": None,
    "read_default_group": None,
    "init_command": None,
    "unix_socket": None,
    "charset": "utf8mb4",
}


#: PyMySQL's error number when TLS was asked for and the server offers none.
_NO_TLS = 2026


class TlsRequired(pymysql.err.OperationalError):
    """``database.ssl.mode`` asks for TLS and the server did not offer it."""


def ssl_context(config: BinlogCdcConfig) -> ssl.SSLContext | None:
    """The TLS context of ``database.ssl.mode`` (``None``: plain TCP)."""
    mode = config.database_ssl_mode
    if mode == "disabled":
        return None
    if mode in ("preferred", "required"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    context = ssl.create_default_context(cafile=config.database_ssl_ca or None)
    context.check_hostname = mode == "verify_identity"
    return context


def connection_args(config: BinlogCdcConfig, *, timeout_s: float | None = None) -> dict[str, Any]:
    """PyMySQL's keyword arguments for ``config``'s server (the forced ones included)."""
    seconds = max(1, int(timeout_s if timeout_s is not None else config.connect_timeout_ms / 1000))
    args: dict[str, Any] = {
        "host": config.database_hostname,
        "port": config.database_port,
        "user": config.database_user,
        "password": config.password or "",
        "connect_timeout": seconds,
        "autocommit": True,
        "ssl": ssl_context(config),
        **_FORCED,
    }
    return args


def connect(config: BinlogCdcConfig, *, timeout_s: float | None = None, **extra: Any) -> pymysql.connections.Connection[Any]:
    """An autocommit connection in UTC. Raises PyMySQL's errors, :class:`TlsRequired`."""
    conn = opener(config)(**connection_args(config, timeout_s=timeout_s), **extra)
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
    return conn


def opener(config: BinlogCdcConfig) -> Callable[..., pymysql.connections.Connection[Any]]:
    """``pymysql.connect`` with the forced arguments applied last and ``database.ssl.mode``'s
    fallback: what the binlog reader library is given to open its connections with."""
    mode = config.database_ssl_mode

    def open_connection(**kwargs: Any) -> pymysql.connections.Connection[Any]:
        # The reader library passes its own settings (charset, the information_schema database,
        # a cursor class): the forced ones win.
        args = {**kwargs, **_FORCED}
        try:
            return pymysql.connect(**args)
        except pymysql.err.OperationalError as exc:
            if not (exc.args and exc.args[0] == _NO_TLS and args.get("ssl") is not None):
                raise
            if mode != "preferred":
                raise TlsRequired(_NO_TLS, f"database.ssl.mode={mode}: the server does not offer TLS") from None
        # preferred: the server offers no TLS, so plain TCP (PyMySQL itself has no such mode).
        return pymysql.connect(**{**args, "ssl": None})

    return open_connection
