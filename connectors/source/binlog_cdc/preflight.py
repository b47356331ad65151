"""Pre-flight checks of the binlog CDC source: what would stop capture, found before it starts.

Each problem is reported on the config key the user acts on, with what to do about it:

- ``database.hostname`` (the server's settings): the binary log off (``log_bin``),
  ``binlog_format`` other than ``ROW``, ``binlog_row_image`` other than ``FULL``;
- ``database.user``: missing the global ``REPLICATION SLAVE`` grant (reading the binlog) or
  ``REPLICATION CLIENT`` (``BINLOG MONITOR`` on MariaDB 10.5+: the binlog position);
- ``database.server.id``: a replica registered with the server under the same id
  (``SHOW SLAVE HOSTS``), which would take the binlog stream from this connector, or this one
  from it. The source itself does not register, so another connector with the same id is found
  only once streaming, by the server's error (:func:`server_id_taken`).

With ``include.query``, :func:`statement_logging_off` names the server variable that logs each
row event's statement when it is off (the task warns: the events' ``source.query`` stays null).

A failure to connect is named by its category, never the driver's text (which may quote what a
port that is no MySQL server sent); messages never contain the password.
"""

from __future__ import annotations

import re
from typing import Any

import pymysql

from sluice.connectors.api.connectivity import connectivity_message, host_port
from sluice.connectors.jdbc_common.connect_failures import Blame, classify_database_error
from sluice.connectors.source.binlog_cdc.config import BinlogCdcConfig
from sluice.connectors.source.binlog_cdc.connection import connect

_BLAMED_KEYS = {Blame.PASSWORD: "database.password", Blame.USER: "database.user"}
_GLOBAL_GRANT = re.compile(r"^GRANT (.+?) ON \*\.\* TO ", re.IGNORECASE)


def server_problems(cursor: Any, config: BinlogCdcConfig) -> list[tuple[str, str]]:
    """The server's binlog settings, on ``database.hostname``."""
    where = f"The server at {config.database_hostname}:{config.database_port}"
    cursor.execute("SELECT @@GLOBAL.log_bin, @@GLOBAL.binlog_format, @@GLOBAL.binlog_row_image")
    log_bin, binlog_format, row_image = cursor.fetchone()
    if not int(log_bin or 0):
        return [("database.hostname", f"{where} writes no binary log: change data capture reads it. Start the "
                 "server with log-bin (and binlog-format=ROW, binlog-row-image=FULL).")]  # fmt: skip
    found = []
    if str(binlog_format).upper() != "ROW":
        found.append(("database.hostname", f"{where} has binlog_format={binlog_format}; change data capture needs "
                      "ROW (SET GLOBAL binlog_format = 'ROW', and binlog-format=ROW in the server's configuration)."))  # fmt: skip
    if str(row_image).upper() != "FULL":
        found.append(("database.hostname", f"{where} has binlog_row_image={row_image}; change data capture needs "
                      "FULL, so updates and deletes carry whole rows (SET GLOBAL binlog_row_image = 'FULL', and "
                      "binlog-row-image=FULL in the server's configuration)."))  # fmt: skip
    return found


def grant_problems(cursor: Any, config: BinlogCdcConfig) -> list[tuple[str, str]]:
    """The user's global grants, on ``database.user``."""
    cursor.execute("SHOW GRANTS")
    privileges: set[str] = set()
    for (line,) in cursor.fetchall():
        match = _GLOBAL_GRANT.match(str(line))
        if match:
            privileges.update(p.strip().upper() for p in match.group(1).split(","))
    if "ALL PRIVILEGES" in privileges:
        return []
    missing = []
    if not privileges & {"REPLICATION SLAVE", "REPLICATION REPLICA"}:
        missing.append("REPLICATION SLAVE")
    if not privileges & {"REPLICATION CLIENT", "BINLOG MONITOR", "SUPER"}:
        missing.append("REPLICATION CLIENT")
    if not missing:
        return []
    user = config.database_user
    return [("database.user", f"User {user!r} lacks the global privilege(s) {', '.join(missing)}, which reading "
             f"the binlog needs: GRANT {', '.join(missing)} ON *.* TO '{user}'@'...' (and SELECT on the captured "
             "tables).")]  # fmt: skip


#: The server variable that logs the statement behind row events: MariaDB's, MySQL's.
_STATEMENT_LOGGING = ("binlog_annotate_row_events", "binlog_rows_query_log_events")


def statement_logging_off(cursor: Any) -> str | None:
    """The variable (``binlog_annotate_row_events`` on MariaDB, ``binlog_rows_query_log_events`` on
    MySQL) that makes the server log the statement behind row events, when it is off globally;
    ``None`` when it is on."""
    names = ", ".join(f"'{name}'" for name in ("version", *_STATEMENT_LOGGING))
    cursor.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
    found = {str(name).lower(): str(value) for name, value in cursor.fetchall()}
    variable = _STATEMENT_LOGGING[0 if "mariadb" in found.get("version", "").lower() else 1]
    return None if found.get(variable, "").upper() in ("ON", "1") else variable


def server_id_holder(cursor: Any, server_id: int) -> str | None:
    """``host:port`` of the replica registered with ``server_id`` (``SHOW SLAVE HOSTS``, or MySQL
    8.4's ``SHOW REPLICAS``), ``None`` when none is or the server does not say."""
    for statement in ("SHOW SLAVE HOSTS", "SHOW REPLICAS"):
        try:
            cursor.execute(statement)
        except pymysql.Error:  # the other statement's server, or no REPLICATION SLAVE grant
            continue
        # Both statements start with the server id, the reported host and port.
        for row in cursor.fetchall():
            if int(row[0]) == server_id:
                return host_port(str(row[1] or "?"), int(row[2] or 0))
        return None
    return None


def server_id_taken(config: BinlogCdcConfig, holder: str | None) -> str:
    """The problem of a ``database.server.id`` another connection uses (``holder``: its address)."""
    who = f"the replica at {holder}" if holder else "another connection (another connector or a replica)"
    return (f"database.server.id={config.server_id} is in use by {who} on the server at "
            f"{host_port(config.database_hostname, config.database_port)}: the server streams the binlog to one "
            "connection per server id and drops the other. Give each connector and each replica of this server a "
            "unique database.server.id.")  # fmt: skip


def preflight_problems(conn: Any, config: BinlogCdcConfig) -> dict[str, str]:
    """``{key: problem}`` for everything that would stop this connector on this server."""
    problems: dict[str, list[str]] = {}
    with conn.cursor() as cur:
        for key, problem in (*server_problems(cur, config), *grant_problems(cur, config)):
            problems.setdefault(key, []).append(problem)
        holder = server_id_holder(cur, config.server_id)
    if holder is not None:
        problems.setdefault("database.server.id", []).append(server_id_taken(config, holder))
    return {key: " ".join(found) for key, found in problems.items()}


def connectivity_problems(config: BinlogCdcConfig, timeout_s: float) -> dict[str, str]:
    """Open (and close) one connection with the connector's settings; ``{}`` when all is well,
    otherwise the problem on the key to fix (see the module docstring)."""
    try:
        conn = connect(config, timeout_s=timeout_s, read_timeout=max(1, int(timeout_s)))
    except pymysql.Error as exc:
        found = classify_database_error(exc, "mysql")
        key = _BLAMED_KEYS.get(found.blame, "database.hostname")
        return {key: connectivity_message(key, host_port(config.database_hostname, config.database_port), found.failure)}
    try:
        return preflight_problems(conn, config)
    finally:
        conn.close()
