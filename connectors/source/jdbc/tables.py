"""Finding the tables a JDBC source reads, and naming them the way Confluent's connector does."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice.connectors.source.jdbc.config import JdbcSourceConfig

#: Schemas that hold the database's own catalog, never user tables.
_SYSTEM_SCHEMAS = {"information_schema", "pg_catalog", "pg_toast", "mysql", "performance_schema", "sys"}


@dataclass(frozen=True, order=True)
class TableRef:
    """A table: ``catalog`` (the database, where the backend has one), ``schema`` and ``name``."""

    catalog: str | None
    schema: str | None
    name: str

    @property
    def qualified(self) -> str:
        """``catalog.schema.table`` without the parts the backend lacks: the offsets' ``table`` value."""
        return ".".join(p for p in (self.catalog, self.schema, self.name) if p)

    @staticmethod
    def parse(text: str, backend: str, catalog: str | None) -> TableRef:
        """The inverse of :attr:`qualified` for a given backend."""
        parts = text.split(".")
        if backend == "postgresql" and len(parts) >= 2:
            return TableRef(catalog, parts[-2], parts[-1])
        return TableRef(catalog, None, parts[-1])


def like_to_regex(pattern: str) -> re.Pattern[str]:
    """A SQL ``LIKE`` pattern (``%``, ``_``) as a regular expression (``schema.pattern``)."""
    out = []
    for ch in pattern:
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
    return re.compile("".join(out))


def catalog_name(url_database: str | None, backend: str) -> str | None:
    """The catalog part of table names: the database for PostgreSQL and MySQL, none for SQLite."""
    if backend in ("postgresql", "mysql", "mariadb"):
        return url_database
    return None


def list_tables(conn: Any, config: JdbcSourceConfig, backend: str, catalog: str | None) -> list[TableRef]:
    """The tables (and views, if ``table.types`` says so) that the include/exclude settings select."""
    from sqlalchemy import inspect

    inspector = inspect(conn)
    if backend == "postgresql":
        pattern = like_to_regex(config.schema_pattern) if config.schema_pattern else None
        schemas: list[str | None] = [
            s
            for s in inspector.get_schema_names()
            if (pattern.fullmatch(s) if pattern else s not in _SYSTEM_SCHEMAS and not s.startswith("pg_"))
        ]
    else:
        schemas = [None]
    found: list[TableRef] = []
    for schema in schemas:
        names: list[str] = []
        if "TABLE" in config.table_types:
            names += inspector.get_table_names(schema=schema)
        if "VIEW" in config.table_types:
            names += inspector.get_view_names(schema=schema)
        found += [TableRef(catalog, schema, n) for n in names if not (backend == "sqlite" and n.startswith("sqlite_"))]
    return sorted(t for t in found if _selected(t, config))


def _names(table: TableRef) -> set[str]:
    names = {table.name, table.qualified}
    if table.schema:
        names.add(f"{table.schema}.{table.name}")
    return names


def _selected(table: TableRef, config: JdbcSourceConfig) -> bool:
    names = _names(table)
    if config.table_whitelist and not names & set(config.table_whitelist):
        return False
    if config.table_blacklist and names & set(config.table_blacklist):
        return False
    if config.table_include_list and not any(re.fullmatch(p, n) for p in config.table_include_list for n in names):
        return False
    return not any(re.fullmatch(p, n) for p in config.table_exclude_list for n in names)


def group_tables(tables: Sequence[str], groups: int) -> list[list[str]]:
    """Split ``tables`` into at most ``groups`` contiguous, nearly equal groups (Connect's ``groupPartitions``)."""
    n = min(groups, len(tables))
    if n <= 0:
        return []
    size, extra = divmod(len(tables), n)
    out, start = [], 0
    for i in range(n):
        stop = start + size + (1 if i < extra else 0)
        out.append(list(tables[start:stop]))
        start = stop
    return out
