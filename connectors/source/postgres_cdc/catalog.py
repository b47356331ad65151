"""What the connector reads from and sets up in the database: tables, slot, publication.

All functions take an open autocommit psycopg connection (not the replication connection).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from psycopg import Connection, sql

from connectors.api import ConfigError
from connectors.source.postgres_cdc.config import PostgresCdcConfig, PublicationMode
from connectors.source.postgres_cdc.tables import Column, Table
from connectors.source.postgres_cdc.types import ARRAY_ELEMENTS, ColumnType, TypeModes, column_type

log = logging.getLogger(__name__)

SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast")


class TableFilter:
    """Debezium's include/exclude lists: anchored regexes over ``schema``, ``schema.table`` and
    ``schema.table.column`` (an include list wins over its exclude list, as in Debezium)."""

    def __init__(self, config: PostgresCdcConfig) -> None:
        def compile_all(patterns: Sequence[str]) -> list[re.Pattern[str]]:
            return [re.compile(p) for p in patterns]

        self.schema_include = compile_all(config.schema_include_list)
        self.schema_exclude = compile_all(config.schema_exclude_list)
        self.table_include = compile_all(config.table_include_list)
        self.table_exclude = compile_all(config.table_exclude_list)
        self.column_include = compile_all(config.column_include_list)
        self.column_exclude = compile_all(config.column_exclude_list)
        self.signal_table = config.signal_data_collection

    @staticmethod
    def _any(patterns: list[re.Pattern[str]], text: str) -> bool:
        return any(p.fullmatch(text) for p in patterns)

    def captures(self, schema: str, table: str) -> bool:
        if schema in SYSTEM_SCHEMAS or schema.startswith("pg_"):
            return False
        if self.schema_include and not self._any(self.schema_include, schema):
            return False
        if not self.schema_include and self._any(self.schema_exclude, schema):
            return False
        qualified = f"{schema}.{table}"
        if self.table_include:
            return self._any(self.table_include, qualified)
        return not self._any(self.table_exclude, qualified)

    def column_included(self, schema: str, table: str, column: str) -> bool:
        qualified = f"{schema}.{table}.{column}"
        if self.column_include:
            return self._any(self.column_include, qualified)
        return not self._any(self.column_exclude, qualified)


_COLUMNS_SQL = """
SELECT a.attname, a.atttypid::int, a.atttypmod, NOT a.attnotnull,
       t.typtype::text, t.typelem::int, t.typbasetype::int, t.typtypmod,
       (SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_enum e
         WHERE e.enumtypid = CASE WHEN t.typelem <> 0 AND t.typcategory = 'A' THEN t.typelem ELSE a.atttypid END),
       t.typcategory::text
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
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
    """``(oid, schema, table)`` of every ordinary or partitioned table the filters capture."""
    rows = conn.execute(
        "SELECT c.oid::int, n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition ORDER BY n.nspname, c.relname"
    ).fetchall()
    return [(oid, schema, name) for oid, schema, name in rows if table_filter.captures(schema, name)]


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
    message) gives the columns as the stream sends them, else the catalog's current ones."""
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
    modes = TypeModes(
        config.decimal_handling_mode,
        config.time_precision_mode,
        config.binary_handling_mode,
        config.interval_handling_mode,
    )
    columns: list[Column] = []
    for col_name, type_oid, typmod in stream_columns:
        info = catalog.get(col_name)
        optional = True if info is None else bool(info[3])
        ctype = _column_type(type_oid, typmod, info, modes)
        columns.append(Column(col_name, type_oid, typmod, optional and col_name not in primary_key, ctype))
    names = {c.name for c in columns}
    primary_key = [k for k in primary_key if k in names]
    included = [c.name in primary_key or table_filter.column_included(schema, name, c.name) for c in columns]
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
    )


def _column_type(type_oid: int, typmod: int, info: tuple[Any, ...] | None, modes: TypeModes) -> ColumnType:
    if info is None:
        return column_type(type_oid, typmod, modes)
    _, _, _, _, typtype, typelem, typbasetype, typtypmod, labels, category = info
    if typtype == "d" and typbasetype:  # a domain: its base type
        return column_type(typbasetype, typtypmod if typtypmod >= 0 else typmod, modes)
    if typtype == "e":
        return column_type(type_oid, typmod, modes, enum_labels=tuple(labels or ()))
    if category == "A" and typelem:
        element_oid = ARRAY_ELEMENTS.get(type_oid, typelem)
        element = (
            column_type(element_oid, typmod, modes, enum_labels=tuple(labels))
            if labels
            else column_type(element_oid, typmod, modes)
        )
        return column_type(type_oid, typmod, modes, element=element)
    return column_type(type_oid, typmod, modes)


def warn_about_identity(tables: Sequence[Table]) -> None:
    """Explain what ``before`` will hold for tables without a key or with the default identity."""
    for table in tables:
        if not table.primary_key:
            log.warning(
                "Table %s has no primary key: its events have a null key, and with REPLICA IDENTITY %s "
                "updates and deletes %s. Add a primary key or ALTER TABLE %s REPLICA IDENTITY FULL.",
                table.qualified,
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
        return False
    conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (config.slot_name,))
    log.info("Created replication slot %s", config.slot_name)
    return True


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
