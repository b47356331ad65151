"""Pre-flight checks of the PostgreSQL CDC source: what would stop capture, found before it starts.

Each problem is reported on the config key the user acts on, with what to do about it:

- the server: a version without ``pgoutput`` (before 10), ``wal_level`` other than ``logical``;
- ``database.user``: neither superuser, nor the REPLICATION attribute, nor a cloud's replication
  role (``rds_replication`` on Amazon RDS and Aurora);
- ``publication.name``: missing while ``publication.autocreate.mode=disabled``;
- ``slot.name``: a slot of another plugin or database, a slot another client is reading, or no
  free slot left to create it (``max_replication_slots``);
- ``slot.failover``: ``true`` on a server before PostgreSQL 17, which has no failover slots;
- ``table.include.list``: a captured table whose updates and deletes PostgreSQL cannot publish (no
  primary key under ``REPLICA IDENTITY DEFAULT``, or ``REPLICA IDENTITY NOTHING``): once the table is
  in the publication, the application's own UPDATE and DELETE statements on it fail.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import Connection

from sluice.connectors.api.connectivity import connectivity_message, host_port
from sluice.connectors.jdbc_common.connect_failures import Blame, classify_database_error
from sluice.connectors.source.postgres_cdc.catalog import (
    FAILOVER_SLOT_SERVER_VERSION,
    TableFilter,
    check_message_key_columns,
    failover_unsupported,
    list_tables,
)
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig, PublicationMode

#: pgoutput, logical replication of tables, arrived in PostgreSQL 10.
MIN_SERVER_VERSION = 100000
#: The ``application_name`` of the task's own connections: a slot held by one of them is this
#: connector (or another Sluice one) at work, which a config update must not call a conflict.
OWN_APPLICATION = "sluice-postgres-cdc"
_LISTED = 5
_BLAMED_KEYS = {Blame.PASSWORD: "database.password", Blame.USER: "database.user", Blame.DATABASE: "database.dbname"}


def preflight_problems(conn: Connection[Any], config: PostgresCdcConfig, *, transient: bool = True) -> dict[str, str]:
    """``{key: problem}`` for everything that would stop this connector on this server; without
    ``transient``, not a slot another client is reading (the task waits for it, ``slot.max.retries``)."""
    problems: dict[str, list[str]] = {}
    for key, problem in (
        *_server_problems(conn, config),
        *_role_problems(conn, config),
        *_publication_problems(conn, config),
        *_slot_problems(conn, config, transient),
        *_failover_problems(conn, config),
        *_table_problems(conn, config),
    ):
        problems.setdefault(key, []).append(problem)
    return {key: " ".join(found) for key, found in problems.items()}


def _server_problems(conn: Connection[Any], config: PostgresCdcConfig) -> list[tuple[str, str]]:
    where = f"The PostgreSQL server at {config.database_hostname}:{config.database_port}"
    found = []
    version = conn.info.server_version
    if version < MIN_SERVER_VERSION:
        found.append(("database.hostname", f"{where} runs version {version // 10000}.{version % 10000 // 100}; "
                      "logical replication with pgoutput needs PostgreSQL 10 or later."))
    wal_level = conn.execute("SHOW wal_level").fetchone()
    if wal_level is not None and wal_level[0] != "logical":
        found.append(("database.hostname", f"{where} has wal_level={wal_level[0]}; change data capture needs "
                      "wal_level=logical (ALTER SYSTEM SET wal_level = logical, then restart the server)."))
    return found


def _role_problems(conn: Connection[Any], config: PostgresCdcConfig) -> list[tuple[str, str]]:
    row = conn.execute(
        "SELECT r.rolsuper, r.rolreplication, EXISTS (SELECT 1 FROM pg_roles c WHERE c.rolname = 'rds_replication' "
        "AND pg_has_role(current_user, c.oid, 'member')) FROM pg_roles r WHERE r.rolname = current_user"
    ).fetchone()
    if row is None or any(row):
        return []
    user = config.database_user
    return [("database.user", f"User {user!r} may not stream changes: it needs the REPLICATION attribute "
             f"(ALTER ROLE {_ident(user)} REPLICATION) or, on Amazon RDS, the rds_replication role.")]


def _publication_problems(conn: Connection[Any], config: PostgresCdcConfig) -> list[tuple[str, str]]:
    if config.publication_autocreate_mode is not PublicationMode.DISABLED:
        return []
    name = config.publication_name
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone() is not None:
        return []
    return [("publication.name", f"Publication {name!r} does not exist and publication.autocreate.mode=disabled "
             f"does not create it: CREATE PUBLICATION {_ident(name)} FOR TABLE ..., or set "
             "publication.autocreate.mode=filtered.")]


def _slot_problems(conn: Connection[Any], config: PostgresCdcConfig, transient: bool) -> list[tuple[str, str]]:
    name = config.slot_name
    row = conn.execute(
        "SELECT s.plugin, s.database, s.active_pid, a.application_name, a.client_addr::text "
        "FROM pg_replication_slots s LEFT JOIN pg_stat_activity a ON a.pid = s.active_pid WHERE s.slot_name = %s",
        (name,),
    ).fetchone()
    if row is None:
        used, limit = conn.execute(
            "SELECT (SELECT count(*) FROM pg_replication_slots), current_setting('max_replication_slots')::int"
        ).fetchone() or (0, 0)
        if used >= limit:
            return [("slot.name", f"Replication slot {name!r} does not exist and cannot be created: all "
                     f"{limit} slots of max_replication_slots are in use. Drop an unused slot "
                     "(SELECT pg_drop_replication_slot('...')) or raise max_replication_slots and restart.")]
        return []
    plugin, database, pid, application, client = row
    if plugin != "pgoutput":
        return [("slot.name", f"Replication slot {name!r} uses the plugin {plugin!r}; this connector reads "
                 "pgoutput. Name another slot, or drop this one.")]
    if database != config.database_dbname:
        return [("slot.name", f"Replication slot {name!r} belongs to database {database!r}, not "
                 f"{config.database_dbname!r}. Name another slot.")]
    if pid is not None and application != OWN_APPLICATION and transient:
        holder = f"PID {pid}" + (f", application {application!r}" if application else "") + (f", from {client}" if client else "")
        return [("slot.name", f"Replication slot {name!r} is being read by another client ({holder}); a slot has "
                 "one reader. Stop that client, or name another slot.")]
    return []


def _failover_problems(conn: Connection[Any], config: PostgresCdcConfig) -> list[tuple[str, str]]:
    version = conn.info.server_version
    if not config.slot_failover or version >= FAILOVER_SLOT_SERVER_VERSION:
        return []
    return [("slot.failover", failover_unsupported(version))]


def _table_problems(conn: Connection[Any], config: PostgresCdcConfig) -> list[tuple[str, str]]:
    captured = list_tables(conn, TableFilter(config))
    rows = conn.execute(  # one query for every captured table
        "SELECT c.oid::int, c.relreplident, EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary) "
        "FROM pg_class c WHERE c.oid = ANY(%s)",
        ([oid for oid, _, _ in captured],),
    ).fetchall()
    identities = {oid: (identity, has_key) for oid, identity, has_key in rows}
    unpublishable = []
    for oid, schema, table in captured:
        identity, has_key = identities.get(oid, ("d", True))
        if identity == "n" or (identity == "d" and not has_key):
            unpublishable.append(f"{schema}.{table}")
    if not unpublishable:
        return []
    listed = ", ".join(unpublishable[:_LISTED]) + (f" and {len(unpublishable) - _LISTED} more" if len(unpublishable) > _LISTED else "")
    return [("table.include.list", f"Captured table(s) {listed} have neither a primary key nor a replica identity: "
             "in a publication, UPDATE and DELETE on them fail. Add a primary key, or ALTER TABLE ... REPLICA "
             "IDENTITY FULL, or leave them out of table.include.list.")]


def _ident(name: str) -> str:
    """A SQL identifier as the user would type it in the suggested statement."""
    return name if name.isidentifier() and name == name.lower() else '"' + name.replace('"', '""') + '"'


def connectivity_problems(config: PostgresCdcConfig, timeout_s: float, *, transient: bool = True) -> dict[str, str]:
    """Open (and close) one ordinary connection with the connector's settings; ``{}`` when it works,
    otherwise the problem on the key to fix. A failure to connect is named by its category (never
    the driver's text) and the message never contains the password. Without
    ``transient``, problems that pass by themselves are left out (see :func:`preflight_problems`)."""
    info = {**config.conninfo(), "connect_timeout": max(1, int(timeout_s))}
    try:
        with psycopg.connect(**info, autocommit=True) as conn:
            key_problem = check_message_key_columns(conn, config) if config.message_key_columns else None
            problems = preflight_problems(conn, config, transient=transient)
    except psycopg.Error as exc:
        # The category only: libpq's text may quote what a port that is no PostgreSQL sent.
        found = classify_database_error(exc, "postgresql")
        key = _BLAMED_KEYS.get(found.blame, "database.hostname")
        return {
            key: connectivity_message(key, host_port(config.database_hostname, config.database_port), found.failure)
        }
    if key_problem:
        problems["message.key.columns"] = key_problem
    return problems
