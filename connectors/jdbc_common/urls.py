"""Database URLs split into allow-listed parts before a driver sees them.

A ``connection.url`` comes from whoever may create a connector, and every database driver Sluice
ships reads local files or changes its behaviour through URL parameters: libpq reads a password
file (``passfile``), client keys and certificates (``sslkey``, ``sslcert``, ``sslrootcert``,
``sslcrl``) and a service file (``service``); PyMySQL reads an option file (``read_default_file``)
and sends any local file the server asks for with ``local_infile``; SQLite opens (and creates) the
file the URL names. A URL is therefore parsed here into host, port, database, credentials and the
parameters an allow-list names per driver, with each value checked; everything else is refused with
a :class:`ConfigError` naming the key and the parameter, before any connection is attempted.

Files a URL may still name (a SQLite database, ``sslrootcert=``, ``ssl_ca=``, …) are reported by
:meth:`ParsedUrl.files`; the connectors hand them to the worker through
:meth:`PluginConfig.local_paths`, which confines them to ``connector.allowed.paths``. The files a
driver would read *without* being asked — libpq's ``~/.pgpass``, ``~/.postgresql/postgresql.key``
and friends, and the ``PGPASSFILE``/``PGSSLKEY``-style environment variables naming them — are
switched off by :func:`forced_connect_args`, which names a path that cannot exist for every file
parameter the URL leaves unset: the worker's own credentials never follow a URL to a server the
caller chose.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from sluice.connectors.api import ConfigError

#: A path that can never exist (``/dev/null`` is not a directory): given for every libpq file
#: parameter the URL does not set, so libpq neither reads its default under ``~/`` nor a path from
#: the worker's environment. libpq treats a missing file as "none", silently.
NO_FILE = "/dev/null/sluice-no-file"

_INT = re.compile(r"[0-9]{1,9}")
_BOOL01 = re.compile(r"[01]")
_WORD = re.compile(r"[A-Za-z0-9_]{1,64}")
_TEXT = re.compile(r"[\x20-\x7e]{0,64}")
_CIPHERS = re.compile(r"[A-Za-z0-9_:+!@.-]{1,512}")
_TLS_VERSION = re.compile(r"TLSv1(\.[0-3])?")
_BOOL_WORDS = re.compile(r"(?i)true|false|yes|no|on|off|[01]")
#: A host name, an IPv4 address or an IPv6 address (bracketed or not): never a Unix socket directory
#: (libpq's ``host=/run/postgresql``), a list of hosts, or anything with a conninfo separator.
HOST_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]|[0-9A-Fa-f:.]{2,45}")


def _choice(*values: str) -> re.Pattern[str]:
    return re.compile("|".join(re.escape(v) for v in values))


#: libpq parameters a URL may set, with the pattern of their values.
LIBPQ_PARAMS: dict[str, re.Pattern[str]] = {
    "sslmode": _choice("disable", "allow", "prefer", "require", "verify-ca", "verify-full"),
    "connect_timeout": _INT,
    "application_name": _TEXT,
    "target_session_attrs": _choice("any", "read-write", "read-only", "primary", "standby", "prefer-standby"),
    "keepalives": _BOOL01,
    "keepalives_idle": _INT,
    "keepalives_interval": _INT,
    "keepalives_count": _INT,
    "tcp_user_timeout": _INT,
    "channel_binding": _choice("disable", "prefer", "require"),
    "gssencmode": _choice("disable", "prefer", "require"),
    "sslcompression": _BOOL01,
    "sslsni": _BOOL01,
    "ssl_min_protocol_version": _TLS_VERSION,
    "ssl_max_protocol_version": _TLS_VERSION,
}

#: libpq parameters that name a file: allowed, and reported for confinement (``sslrootcert=system``,
#: the operating system's CA store, is no file of the worker's choosing and is not reported).
LIBPQ_FILE_PARAMS: tuple[str, ...] = ("sslrootcert", "sslcert", "sslkey", "sslcrl", "sslcrldir", "passfile")

#: The libpq file parameters :func:`forced_connect_args` neutralises when the URL leaves them unset
#: (``sslcrldir`` has no default location).
_LIBPQ_DEFAULT_FILES = ("passfile", "sslcert", "sslkey", "sslrootcert", "sslcrl")

#: PyMySQL parameters a URL may set (SQLAlchemy coerces the numbers and ``ssl_check_hostname``).
PYMYSQL_PARAMS: dict[str, re.Pattern[str]] = {
    "charset": _WORD,
    "connect_timeout": _INT,
    "read_timeout": _INT,
    "write_timeout": _INT,
    "ssl_check_hostname": _BOOL_WORDS,
    "ssl_cipher": _CIPHERS,
}

#: PyMySQL parameters that name a file (SQLAlchemy gathers them into PyMySQL's ``ssl`` mapping).
PYMYSQL_FILE_PARAMS: tuple[str, ...] = ("ssl_ca", "ssl_cert", "ssl_key")

#: Why some well-known parameters are refused, for a message that says more than "not allowed".
_REFUSED_WHY: dict[str, str] = {
    "local_infile": "it lets the server read any local file; LOCAL INFILE is always off",
    "allowLoadLocalInfile": "it lets the server read any local file; LOCAL INFILE is always off",
    "allowLoadLocalInfileInPath": "it lets the server read local files; LOCAL INFILE is always off",
    "client_flag": "client flags can switch on LOCAL INFILE; they are fixed",
    "read_default_file": "it reads a MySQL option file on the worker",
    "read_default_group": "it reads a MySQL option file (my.cnf) on the worker",
    "unix_socket": "connections go over TCP to the URL's host",
    "init_command": "the connectors set up their sessions themselves",
    "service": "it reads a pg_service.conf file on the worker; write the host and parameters out",
    "servicefile": "it reads a service file on the worker; write the host and parameters out",
    "options": "it sets server parameters the connectors set themselves (time zone, date style)",
    "host": "the host goes before the path of the URL (a Unix socket directory is not allowed)",
    "hostaddr": "the host goes before the path of the URL",
    "sslkeylogfile": "it writes TLS session keys to a file on the worker",
    "sslpassword": "an encrypted client key is not supported; use an unencrypted key under the allowed paths",
    "uri": "SQLite URI filenames can name other files and virtual file systems",
    "mode": "SQLite URI filenames can name other files and virtual file systems",
    "vfs": "SQLite URI filenames can name other files and virtual file systems",
}

#: JDBC (pgjdbc) parameter names accepted in ``jdbc:postgresql:`` URLs, as their libpq names.
_PGJDBC_ALIASES = {"ApplicationName": "application_name", "connectTimeout": "connect_timeout"}

#: Drivers per SQLAlchemy drivername; a backend Sluice does not ship a driver for is refused.
_SQLALCHEMY_BACKENDS = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "postgresql+psycopg": "postgresql",
    "mysql": "mysql",
    "mariadb": "mysql",
    "mysql+pymysql": "mysql",
    "mariadb+pymysql": "mysql",
    "sqlite": "sqlite",
    "sqlite+pysqlite": "sqlite",
}
_JDBC_BACKENDS = {
    "postgresql": "postgresql",
    "postgres": "postgresql",
    "mysql": "mysql",
    "mariadb": "mysql",
    "sqlite": "sqlite",
}

#: Backfill jobs read with Spark's JDBC reader, which has drivers for these; they cannot confine
#: files either (no ``connector.allowed.paths`` check), so a backfill URL names none.
BACKFILL_BACKENDS = ("postgresql", "mysql")
BACKFILL_URL_KEY = "source.connection.url"

#: The SQLAlchemy drivername Sluice uses per backend.
DRIVERNAMES = {"postgresql": "postgresql+psycopg", "mysql": "mysql+pymysql", "sqlite": "sqlite"}


@dataclass(frozen=True)
class ParsedUrl:
    """A database URL taken apart: every part checked, every parameter allow-listed.

    ``params`` uses the driver's own names (libpq's, PyMySQL's); ``database`` of SQLite is its file
    (``:memory:`` for an in-memory database).
    """

    backend: str
    host: str | None = None
    port: int | None = None
    database: str | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    params: Mapping[str, str] = field(default_factory=dict)

    def files(self) -> tuple[str, ...]:
        """The local files connecting with this URL opens: what the worker must confine."""
        if self.backend == "sqlite":
            return () if self.database in (None, "", ":memory:") else (str(self.database),)
        names = LIBPQ_FILE_PARAMS if self.backend == "postgresql" else PYMYSQL_FILE_PARAMS
        return tuple(
            self.params[name]
            for name in names
            if name in self.params and not (name == "sslrootcert" and self.params[name] == "system")
        )


def _refuse(key: str, what: str) -> ConfigError:
    return ConfigError(f"{key}: {what}", key=key)


def _refuse_param(key: str, name: str, backend: str) -> ConfigError:
    why = _REFUSED_WHY.get(name)
    if why is None:
        allowed = _allowed_names(backend)
        why = f"not allowed; allowed: {', '.join(allowed)}" if allowed else "SQLite URLs take no parameters"
    return _refuse(key, f"parameter {name!r} is refused: {why}")


def _allowed_names(backend: str) -> list[str]:
    if backend == "postgresql":
        return sorted([*LIBPQ_PARAMS, *LIBPQ_FILE_PARAMS])
    if backend == "mysql":
        return sorted([*PYMYSQL_PARAMS, *PYMYSQL_FILE_PARAMS])
    return []


def parse_connection_url(
    text: str,
    user: str | None = None,
    password: str | None = None,
    *,
    key: str = "connection.url",
    allow_files: bool = True,
    backends: tuple[str, ...] = ("postgresql", "mysql", "sqlite"),
) -> ParsedUrl:
    """Parse ``text`` (SQLAlchemy or JDBC spelling) or raise :class:`ConfigError` naming ``key``.

    ``user``/``password`` (``connection.user``/``connection.password``) override credentials in
    the URL. ``allow_files=False`` refuses every parameter that names a file (for callers that
    cannot confine files, such as backfill jobs); ``backends`` are the databases the caller reads.
    """
    text = text.strip()
    if not text:
        raise _refuse(key, "must not be empty")
    if any(ord(c) < 0x20 or c == "\x7f" for c in text):
        raise _refuse(key, "must not contain control characters")
    parsed = _parse_jdbc(text[len("jdbc:") :], key) if text.startswith("jdbc:") else _parse_sqlalchemy(text, key)
    if parsed.backend not in backends:
        raise _refuse(key, f"{parsed.backend} is not supported here; use {' or '.join(backends)}")
    if not allow_files and parsed.files():
        raise _refuse(key, "parameters and databases that name a local file are not allowed here")
    if user:
        parsed = _replace(parsed, username=user)
    if password:
        parsed = _replace(parsed, password=password)
    return parsed


def _replace(parsed: ParsedUrl, **changes: Any) -> ParsedUrl:
    values = {name: getattr(parsed, name) for name in ParsedUrl.__dataclass_fields__}
    values.update(changes)
    return ParsedUrl(**values)


def _parse_sqlalchemy(text: str, key: str) -> ParsedUrl:
    scheme, sep, rest = text.partition("://")
    if not sep:
        raise _refuse(key, "is not a database URL (postgresql://…, mysql://…, sqlite:///path or jdbc:…)")
    backend = _SQLALCHEMY_BACKENDS.get(scheme.lower())
    if backend is None:
        raise _refuse(
            key,
            f"unsupported database or driver {scheme!r}; supported: postgresql[+psycopg], mysql[+pymysql], "
            "mariadb[+pymysql], sqlite",
        )
    if backend == "sqlite":
        # sqlite:///relative.db, sqlite:////absolute.db, sqlite:// (in memory)
        path, query_sep, query = rest.partition("?")
        if query_sep:
            names = [name for name, _ in parse_qsl(query, keep_blank_values=True)] or [query]
            raise _refuse_param(key, names[0], "sqlite")
        if path and not path.startswith("/"):
            raise _refuse(key, "a SQLite URL is sqlite:///relative/path, sqlite:////absolute/path or sqlite://")
        return _sqlite(unquote(path[1:]) if path else ":memory:", key)
    split = urlsplit("//" + rest)
    return _server(backend, split, key, jdbc=False)


def _parse_jdbc(rest: str, key: str) -> ParsedUrl:
    protocol, _, remainder = rest.partition(":")
    backend = _JDBC_BACKENDS.get(protocol.lower())
    if backend is None:
        raise _refuse(key, f"unsupported JDBC subprotocol {protocol!r}; supported: {', '.join(sorted(_JDBC_BACKENDS))}")
    if backend == "sqlite":
        # jdbc:sqlite:/abs/path, jdbc:sqlite:relative.db, jdbc:sqlite::memory:, jdbc:sqlite:
        path, query_sep, query = remainder.partition("?")
        if query_sep:
            names = [name for name, _ in parse_qsl(query, keep_blank_values=True)] or [query]
            raise _refuse_param(key, names[0], "sqlite")
        return _sqlite(path.removeprefix("//") or ":memory:", key)
    if not remainder.startswith("//"):
        raise _refuse(key, f"a JDBC URL is jdbc:{protocol}://host[:port]/database")
    return _server(backend, urlsplit(remainder), key, jdbc=True)


def _sqlite(path: str, key: str) -> ParsedUrl:
    if path == ":memory:":
        return ParsedUrl("sqlite", database=":memory:")
    if "\0" in path:
        raise _refuse(key, "a path cannot contain a NUL character")
    if path.lower().startswith(("file:", ":resource:")) or path.startswith(":"):
        raise _refuse(key, "SQLite URI filenames (file:…) and resources are not allowed; name the database file")
    return ParsedUrl("sqlite", database=path)


def _server(backend: str, split: Any, key: str, *, jdbc: bool) -> ParsedUrl:
    """Host, port, database, credentials and allow-listed parameters of a PostgreSQL or MySQL URL."""
    hostport = split.netloc.rpartition("@")[2]
    if hostport.startswith("[") and "]" in hostport:
        written = hostport[: hostport.index("]") + 1]
    else:
        written = hostport.partition(":")[0]
    if not written:
        raise _refuse(key, "needs a host (connections go over TCP; a Unix socket is not allowed)")
    if not HOST_PATTERN.fullmatch(unquote(written)):
        raise _refuse(key, f"{unquote(written)!r} is not a host name or address (one host; no socket directories)")
    host = written[1:-1] if written.startswith("[") else written
    try:
        port = split.port
    except ValueError:
        raise _refuse(key, "invalid port") from None
    database = unquote(split.path[1:]) if split.path.startswith("/") else (unquote(split.path) or None)
    if database and ("=" in database or "/" in database or "\0" in database):
        raise _refuse(key, f"{database!r} is not a database name")
    username = unquote(split.username) if split.username else None
    password = unquote(split.password) if split.password is not None else None
    params: dict[str, str] = {}
    seen: set[str] = set()
    for name, value in parse_qsl(split.query, keep_blank_values=True, strict_parsing=False):
        if name in seen:
            raise _refuse(key, f"parameter {name!r} is given twice")
        seen.add(name)
        if jdbc and name == "user":
            username = value
            continue
        if jdbc and name == "password":
            password = value
            continue
        canonical, value = _jdbc_param(backend, name, value) if jdbc else (name, value)
        params[canonical] = _checked_param(backend, canonical, value, name, key)
    if backend == "postgresql" and params.get("sslmode", "").startswith("verify") and "sslrootcert" not in params:
        raise _refuse(
            key,
            f"sslmode={params['sslmode']} needs sslrootcert=<a file under the allowed paths> or sslrootcert=system "
            "(the worker's ~/.postgresql/root.crt is not read)",
        )
    return ParsedUrl(backend, host, port, database or None, username, password, params)


def _jdbc_param(backend: str, name: str, value: str) -> tuple[str, str]:
    """A JDBC driver's spelling of a parameter as the Python driver's (pgjdbc, Connector/J)."""
    if backend == "postgresql":
        if name == "ssl" and value.lower() in ("true", "false"):
            return "sslmode", "verify-full" if value.lower() == "true" else "disable"
        return _PGJDBC_ALIASES.get(name, name), value
    if name == "connectTimeout" and _INT.fullmatch(value):
        # Connector/J counts milliseconds, PyMySQL seconds.
        return "connect_timeout", str(max(1, -(-int(value) // 1000)))
    return name, value


def _checked_param(backend: str, name: str, value: str, written: str, key: str) -> str:
    if backend == "postgresql":
        pattern, files = LIBPQ_PARAMS.get(name), LIBPQ_FILE_PARAMS
    else:
        pattern, files = PYMYSQL_PARAMS.get(name), PYMYSQL_FILE_PARAMS
    if name in files:
        if not value or "\0" in value:
            raise _refuse(key, f"parameter {written!r} must name a file")
        return value
    if pattern is None:
        raise _refuse_param(key, written, backend)
    if not pattern.fullmatch(value):
        raise _refuse(key, f"parameter {written!r} has an invalid value {value!r}")
    return value


def forced_connect_args(backend: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Driver arguments that override whatever a URL, a dialect or the environment would choose.

    PostgreSQL: every libpq file parameter ``params`` leaves unset names :data:`NO_FILE`, so libpq
    reads neither ``~/.pgpass`` nor ``~/.postgresql/*`` nor the files ``PGPASSFILE``, ``PGSSLCERT``,
    … name. MySQL: LOCAL INFILE off whatever the server asks.
    """
    if backend == "postgresql":
        return {name: NO_FILE for name in _LIBPQ_DEFAULT_FILES if name not in params}
    if backend == "mysql":
        return {"local_infile": False}
    return {}


def check_params(backend: str, params: Mapping[str, Any], key: str = "connection.url") -> None:
    """Refuse a parameter outside the allow-list (for URLs that did not come through the parser)."""
    if backend == "sqlite":
        if params:
            raise _refuse_param(key, next(iter(params)), "sqlite")
        return
    if backend not in ("postgresql", "mysql"):
        raise _refuse(key, f"unsupported database {backend!r}")
    for name, value in params.items():
        _checked_param(backend, name, value if isinstance(value, str) else str(value), name, key)


def libpq_connect_params(parsed: ParsedUrl) -> dict[str, Any]:
    """psycopg keyword arguments for ``parsed`` (a PostgreSQL URL), file defaults neutralised."""
    params: dict[str, Any] = {"host": parsed.host, "dbname": parsed.database or "postgres"}
    if parsed.port:
        params["port"] = parsed.port
    if parsed.username:
        params["user"] = parsed.username
    if parsed.password:
        params["password"] = parsed.password
    params.update(parsed.params)
    params.update(forced_connect_args("postgresql", parsed.params))
    return params
