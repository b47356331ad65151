"""What the connector reads from and sets up in the database: tables, slot, publication.

All functions take an open autocommit psycopg connection (not the replication connection).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import Connection, pq, sql

from sluice.connectors.api import ConfigError
from sluice.connectors.cdc.filters import CollectionFilter
from sluice.connectors.cdc.keys import message_key_columns
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig, PublicationMode
from sluice.connectors.source.postgres_cdc.defaults import column_default
from sluice.connectors.source.postgres_cdc.tables import Column, Table
from sluice.connectors.source.postgres_cdc.type_registry import TypeResolver, unknown_type
from sluice.connectors.source.postgres_cdc.types import ColumnType, TypeModes

log = logging.getLogger(__name__)

SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast")


class TableFilter(CollectionFilter):
    """Debezium's include/exclude lists (:class:`~sluice.connectors.cdc.filters.CollectionFilter`)
    over ``schema``, ``schema.table`` and ``schema.table.column``; PostgreSQL's own schemas are
    never captured."""

    def __init__(self, config: PostgresCdcConfig) -> None:
        super().__init__(
            namespace_include=config.schema_include_list,
            namespace_exclude=config.schema_exclude_list,
            table_include=config.table_include_list,
            table_exclude=config.table_exclude_list,
            column_include=config.column_include_list,
            column_exclude=config.column_exclude_list,
            system=lambda schema: schema in SYSTEM_SCHEMAS or schema.startswith("pg_"),
        )
        self.signal_table = config.signal_data_collection


_COLUMNS_SQL = """
SELECT a.attname, a.atttypid::int, a.atttypmod, NOT a.attnotnull, t.typname, pg_get_expr(d.adbin, d.adrelid), t.typtype = 'e'
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
ORDER BY a.attnum
"""

_PK_SQL = """
SELECT a.attname FROM pg_index i
JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) ON true
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.n
"""


def list_tables(conn: Connection[Any], table_filter: TableFilter) -> list[tuple[int, str, str]]:
    """``(oid, schema, table)`` of every ordinary or partitioned table the filters capture, in
    snapshot order: by ``table.include.list`` pattern, then by name."""
    rows = conn.execute(
        "SELECT c.oid::int, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY n.nspname, c.relname"
    ).fetchall()
    captured = [(oid, schema, name) for oid, schema, name in rows if table_filter.captures(schema, name)]
    return sorted(captured, key=lambda row: table_filter.order(row[1], row[2]))  # stable: by name within a pattern


def table_oid(conn: Connection[Any], schema: str, name: str) -> int | None:
    row = conn.execute(
        "SELECT c.oid::int FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s",
        (schema, name),
    ).fetchone()
    return int(row[0]) if row else None


def load_table(
    conn: Connection[Any],
    oid: int,
    config: PostgresCdcConfig,
    table_filter: TableFilter,
    relation: tuple[str, str, str, list[tuple[str, int, int]]] | None = None,
) -> Table | None:
    """Describe table ``oid``; ``relation`` (schema, name, replica identity, columns from a Relation
    message) gives the columns as the stream sends them, else the catalog's current ones.

    Raises :class:`ConfigError` on ``message.key.columns`` when it names a column the table lacks."""
    row = conn.execute(
        "SELECT n.nspname, c.relname, c.relreplident::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.oid = %s",
        (oid,),
    ).fetchone()
    if row is None and relation is None:
        return None
    if relation is not None:
        schema, name, replident, stream_columns = relation
    else:
        assert row is not None
        schema, name, replident = row
        stream_columns = []
    catalog: dict[str, tuple[Any, ...]] = {r[0]: r for r in conn.execute(_COLUMNS_SQL, (oid,)).fetchall()}
    if relation is None:
        stream_columns = [(r[0], r[1], r[2]) for r in catalog.values()]
    primary_key = [r[0] for r in conn.execute(_PK_SQL, (oid,)).fetchall()]
    names = [c[0] for c in stream_columns]
    key_columns = message_key(config, schema, name, names)
    always = set(primary_key) | set(key_columns or ())
    resolver = TypeResolver(conn, type_modes(config))
    columns: list[Column] = []
    included: list[bool] = []
    for col_name, type_oid, typmod in stream_columns:
        info = catalog.get(col_name)
        optional = True if info is None else bool(info[3])
        ctype, type_name = resolver.resolve(type_oid, typmod)
        known = ctype is not None
        if ctype is None:
            if col_name not in always:
                _warn_unknown(f"{schema}.{name}", col_name, type_name)
            ctype = unknown_type(resolver.modes)
        default = _default(info, type_oid, typmod, ctype)
        columns.append(Column(col_name, type_oid, typmod, optional and col_name not in primary_key, ctype, default))
        included.append(col_name in always or (known and table_filter.column_included(schema, name, col_name)))
    primary_key = [k for k in primary_key if k in names]
    return Table(
        oid,
        schema,
        name,
        columns,
        primary_key,
        replident,
        config.topic_prefix,
        included,
        config.schema_name_adjustment_mode,
        key_columns=key_columns,
        placeholder=config.placeholder_bytes,
    )


def _default(info: tuple[Any, ...] | None, type_oid: int, typmod: int, ctype: ColumnType) -> Any:
    """A column's schema default from its catalog row (:data:`_COLUMNS_SQL`): only while the column
    still has the type the stream sent."""
    if info is None or info[1] != type_oid:
        return None
    return column_default(info[5], info[4], typmod, ctype, enum=info[6])


def type_modes(config: PostgresCdcConfig) -> TypeModes:
    """The settings that shape column representations."""
    return TypeModes(
        config.decimal_handling_mode,
        config.time_precision_mode,
        config.binary_handling_mode,
        config.interval_handling_mode,
        config.hstore_handling_mode,
        config.money_fraction_digits,
        config.include_unknown_datatypes,
    )


_warned_unknown: set[tuple[str, str, str]] = set()


def _warn_unknown(table: str, column: str, type_name: str) -> None:
    """Once per column (as Debezium warns): a column of a type without a mapping is left out."""
    if (table, column, type_name) in _warned_unknown:
        return
    _warned_unknown.add((table, column, type_name))
    log.warning(
        "Column %s.%s has type %s, which has no mapping: it is left out of the events "
        "(include.unknown.datatypes=true captures its text as bytes)",
        table,
        column,
        type_name,
    )


def message_key(config: PostgresCdcConfig, schema: str, table: str, columns: Sequence[str]) -> list[str] | None:
    """The event key's columns per ``message.key.columns`` (``None``: the primary key; see
    :func:`~sluice.connectors.cdc.keys.message_key_columns`)."""
    return message_key_columns(config.message_key_columns, f"{schema}.{table}", columns)


def check_message_key_columns(conn: Connection[Any], config: PostgresCdcConfig) -> str | None:
    """The problem with ``message.key.columns`` for the tables the filters capture, or ``None``."""
    for oid, schema, name in list_tables(conn, TableFilter(config)):
        columns = [r[0] for r in conn.execute(_COLUMNS_SQL, (oid,)).fetchall()]
        try:
            message_key(config, schema, name, columns)
        except ConfigError as exc:
            return str(exc)
    return None


def warn_about_identity(tables: Sequence[Table]) -> None:
    """Explain what ``before`` will hold for tables without a key or with the default identity."""
    for table in tables:
        if not table.primary_key:
            log.warning(
                "Table %s has no primary key: its events have %s, and with REPLICA IDENTITY %s "
                "updates and deletes %s. Add a primary key or ALTER TABLE %s REPLICA IDENTITY FULL.",
                table.qualified,
                f"the key {table.key} (message.key.columns)" if table.key else "a null key",
                _identity_name(table.replica_identity),
                "carry the whole old row" if table.replica_identity == "f" else "are not captured at all",
                table.qualified,
            )
        elif table.replica_identity == "d":
            log.warning(
                "Table %s has REPLICA IDENTITY DEFAULT: 'before' is null in update events and holds only the "
                "primary key columns (other required columns at zero values) in delete events; "
                "ALTER TABLE %s REPLICA IDENTITY FULL to get the whole old row.",
                table.qualified,
                table.qualified,
            )
        elif table.replica_identity == "n":
            log.warning(
                "Table %s has REPLICA IDENTITY NOTHING: updates and deletes cannot be captured.", table.qualified
            )


def _identity_name(code: str) -> str:
    return {"d": "DEFAULT", "f": "FULL", "n": "NOTHING", "i": "INDEX"}.get(code, code)


# -- slot and publication --------------------------------------------------------------------------


def slot_state(conn: Connection[Any], slot: str) -> tuple[str, str | None, int | None] | None:
    """``(plugin, database, confirmed_flush_lsn)`` of the slot, or ``None`` if it does not exist."""
    row = conn.execute(
        "SELECT plugin, database, (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = %s",
        (slot,),
    ).fetchone()
    return (row[0], row[1], row[2]) if row else None


def ensure_slot(conn: Connection[Any], config: PostgresCdcConfig) -> bool:
    """Create the logical slot if missing; ``True`` when it was created now."""
    state = slot_state(conn, config.slot_name)
    if state is not None:
        plugin, database, _ = state
        if plugin != "pgoutput":
            raise ConfigError(
                f"Replication slot {config.slot_name!r} uses plugin {plugin!r}, not pgoutput", key="slot.name"
            )
        if database != config.database_dbname:
            raise ConfigError(
                f"Replication slot {config.slot_name!r} belongs to database {database!r}, not {config.database_dbname!r}",
                key="slot.name",
            )
        _align_failover(conn, config)
        return False
    if config.slot_failover:
        if conn.info.server_version < FAILOVER_SLOT_SERVER_VERSION:
            raise ConfigError(failover_unsupported(conn.info.server_version), key="slot.failover")
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput', failover => true)", (config.slot_name,))
    else:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (config.slot_name,))
    log.info("Created replication slot %s%s", config.slot_name, " (failover)" if config.slot_failover else "")
    return True


def _align_failover(conn: Connection[Any], config: PostgresCdcConfig) -> None:
    """An existing slot made a failover slot, or no longer one, as ``slot.failover`` says
    (``ALTER_REPLICATION_SLOT``, PostgreSQL 17+, on a replication connection: the only way to
    change it without dropping the slot and what it retains)."""
    if conn.info.server_version < FAILOVER_SLOT_SERVER_VERSION:
        return  # no failover slots; slot.failover=true is refused at validate and at creation
    row = conn.execute("SELECT failover FROM pg_replication_slots WHERE slot_name = %s", (config.slot_name,)).fetchone()
    if row is None or bool(row[0]) == config.slot_failover:
        return
    slot = config.slot_name.replace('"', '""')
    command = f'ALTER_REPLICATION_SLOT "{slot}" (FAILOVER {"true" if config.slot_failover else "false"})'
    with psycopg.connect(**config.conninfo(replication=True), autocommit=True) as replication:
        result = replication.pgconn.exec_(command.encode())  # walsender commands: simple protocol only
        if result.status != pq.ExecStatus.COMMAND_OK:
            message = result.error_message.decode(errors="replace").strip()
            raise ConfigError(
                f"Replication slot {config.slot_name!r} exists with failover={bool(row[0])}, and changing it to "
                f"slot.failover={config.slot_failover} failed: {message}",
                key="slot.failover",
            )
    log.info("Replication slot %s %s a failover slot", config.slot_name, "is now" if config.slot_failover else "is no longer")


#: Failover slots (``failover => true``) arrived in PostgreSQL 17.
FAILOVER_SLOT_SERVER_VERSION = 170000


def failover_unsupported(server_version: int) -> str:
    """Why ``slot.failover=true`` cannot be honoured on a server of ``server_version``."""
    return (
        f"slot.failover=true needs PostgreSQL 17 or later (failover slots); this server runs PostgreSQL "
        f"{server_version // 10000}. Set slot.failover=false, or upgrade the server."
    )


def drop_slot(conn: Connection[Any], slot: str) -> None:
    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s", (slot,))


def ensure_publication(conn: Connection[Any], config: PostgresCdcConfig, tables: Sequence[tuple[str, str]]) -> None:
    """Create (or, in ``filtered`` mode, update) the publication per ``publication.autocreate.mode``."""
    name = config.publication_name
    exists = conn.execute("SELECT puballtables FROM pg_publication WHERE pubname = %s", (name,)).fetchone()
    mode = config.publication_autocreate_mode
    if mode is PublicationMode.DISABLED:
        if exists is None:
            raise ConfigError(
                f"Publication {name!r} does not exist and publication.autocreate.mode is disabled",
                key="publication.name",
            )
        return
    if mode is PublicationMode.ALL_TABLES:
        if exists is None:
            conn.execute(sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES").format(sql.Identifier(name)))
            log.info("Created publication %s FOR ALL TABLES", name)
        return
    wanted = sorted(set(tables))
    identifiers = sql.SQL(", ").join(sql.Identifier(s, t) for s, t in wanted)
    if exists is None:
        if not wanted:
            conn.execute(sql.SQL("CREATE PUBLICATION {}").format(sql.Identifier(name)))
        else:
            conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(name), identifiers))
        log.info("Created publication %s for %d tables", name, len(wanted))
        return
    current = sorted(
        (s, t)
        for s, t in conn.execute("SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s", (name,))
    )
    if current != wanted and wanted:
        conn.execute(sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(sql.Identifier(name), identifiers))
        log.info("Updated publication %s to %d tables", name, len(wanted))
