"""Captured tables: Debezium's schemas of a table's columns, and the conversion of its binlog rows.

A table's columns come from the schema history (:mod:`.history`: the shape the DDL in the binlog
gave it at the stream's position, so rows behind an ``ALTER`` keep the shape they were written
with) and, where the history has none or a table map disagrees with it, from
``information_schema`` (:func:`describe`: the table's *current* shape).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice.connectors.api import Schema
from sluice.connectors.cdc import keys as cdc_keys
from sluice.connectors.cdc.envelope import adjust_schema_name, envelope_schema, sanitize
from sluice.connectors.cdc.filters import CollectionFilter
from sluice.connectors.cdc.keys import key_builder
from sluice.connectors.source.binlog_cdc.types import ColumnInfo, ColumnType, TypeModes, column_type

log = logging.getLogger(__name__)

#: The server's own databases: never captured.
SYSTEM_DATABASES = frozenset({"mysql", "sys", "information_schema", "performance_schema"})

_COLUMNS_SQL = (
    "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, "
    "CHARACTER_MAXIMUM_LENGTH, COLUMN_KEY FROM information_schema.COLUMNS "
    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION"
)
_PRIMARY_KEY_SQL = (
    "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION"
)
# MariaDB's JSON type is LONGTEXT with a json_valid() check named after the column.
_JSON_CHECKS_SQL = (
    "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s"
)
_JSON_VALID = re.compile(r"json_valid\(`((?:[^`]|``)+)`\)", re.IGNORECASE)


@dataclass(frozen=True)
class Column:
    """One column of a captured table."""

    name: str
    ctype: ColumnType
    optional: bool

    @property
    def schema(self) -> Schema:
        return self.ctype.schema.as_optional() if self.optional else self.ctype.schema


@dataclass
class Table:
    """A captured table and what turns its binlog rows into Debezium's values."""

    database: str
    name: str
    #: The captured columns, in table order (excluded and unsupported columns left out).
    columns: list[Column]
    primary_key: list[str]
    topic_prefix: str
    #: The ``source`` block's schema (the connector's: MySQL's or MariaDB's).
    source_schema: Schema
    #: Every column name of the table, in order, as the description saw them.
    all_columns: tuple[str, ...] = ()
    name_mode: str = "none"
    #: The event key's columns when ``message.key.columns`` chooses them (``None``: the primary key).
    key_columns: list[str] | None = None
    topic: str = field(init=False)
    key_schema: Schema | None = field(init=False)
    value_schema: Schema = field(init=False)
    envelope_schema: Schema = field(init=False)

    def __post_init__(self) -> None:
        base = sanitize(f"{self.topic_prefix}.{self.database}.{self.name}")
        self.topic = base
        base = adjust_schema_name(base, self.name_mode)
        by_name = {c.name: c for c in self.columns}
        self.value_schema = Schema.struct([(c.name, c.schema) for c in self.columns], name=f"{base}.Value", optional=True)
        key = self.key
        self.key_schema = (
            Schema.struct([(k, by_name[k].schema) for k in key if k in by_name], name=f"{base}.Key") if key else None
        )
        self.envelope_schema = envelope_schema(base, self.value_schema, self.source_schema)
        self.key_of = key_builder(key)
        self._conversions = [(c.name, c.ctype.convert, c.ctype.fallback if not c.optional else None) for c in self.columns]

    @property
    def qualified(self) -> str:
        return f"{self.database}.{self.name}"

    @property
    def key(self) -> list[str]:
        """The event key's columns: ``message.key.columns``' choice, else the primary key."""
        return self.key_columns if self.key_columns is not None else self.primary_key

    def row(self, values: dict[str, Any], none_sources: dict[str, str] | None = None) -> dict[str, Any]:
        """A binlog row (the reader's values by column name) → the event's ``before``/``after``.

        A column the row lacks is null; a null in a required column (a zero date, which the reader
        reads as null) becomes Debezium's fallback; an empty SET (read as null too) is ``""``."""
        out: dict[str, Any] = {}
        for name, convert, fallback in self._conversions:
            value = values.get(name)
            if value is None:
                if none_sources and none_sources.get(name) == "empty set":
                    value = ""
                else:
                    value = fallback
            elif convert is not None:
                value = convert(value)
            out[name] = value
        return out


def collection_filter(
    database_include: Sequence[str],
    database_exclude: Sequence[str],
    table_include: Sequence[str],
    table_exclude: Sequence[str],
    column_include: Sequence[str],
    column_exclude: Sequence[str],
) -> CollectionFilter:
    """Debezium's lists over ``database``, ``database.table`` and ``database.table.column``."""
    return CollectionFilter(
        namespace_include=database_include,
        namespace_exclude=database_exclude,
        table_include=table_include,
        table_exclude=table_exclude,
        column_include=column_include,
        column_exclude=column_exclude,
        system=lambda database: database.lower() in SYSTEM_DATABASES,
    )


def describe(
    cursor: Any,
    database: str,
    name: str,
    *,
    topic_prefix: str,
    source_schema: Schema,
    modes: TypeModes,
    table_filter: CollectionFilter,
    name_mode: str = "none",
    message_key_columns: str = "",
) -> Table | None:
    """The table as ``information_schema`` describes it now (``None``: it does not exist)."""
    cursor.execute(_COLUMNS_SQL, (database, name))
    rows = cursor.fetchall()
    if not rows:
        return None
    cursor.execute(_PRIMARY_KEY_SQL, (database, name))
    primary_key = [r[0] for r in cursor.fetchall()]
    cursor.execute(_JSON_CHECKS_SQL, (database, name))
    json_columns = {m.group(1).replace("``", "`") for (clause,) in cursor.fetchall() for m in _JSON_VALID.finditer(clause)}
    columns = []
    names = []
    for col, data_type, col_type, nullable, precision, scale, dt_precision, length, _ in rows:
        names.append(col)
        info = ColumnInfo(
            col, str(data_type).lower(), str(col_type).lower(), nullable == "YES",
            _int(precision), _int(scale), _int(dt_precision), _int(length), col in json_columns,
        )  # fmt: skip
        ctype = column_type(info, modes)
        if ctype is None:
            log.warning("Column %s.%s.%s of type %s is not captured (type not supported yet)", database, name, col, col_type)
            continue
        if col not in primary_key and not table_filter.column_included(database, name, col):
            continue
        columns.append(Column(col, ctype, info.nullable))
    key_columns = cdc_keys.message_key_columns(message_key_columns, f"{database}.{name}", names)
    return Table(
        database,
        name,
        columns,
        primary_key,
        topic_prefix,
        source_schema,
        tuple(names),
        name_mode=name_mode,
        key_columns=key_columns,
    )


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def same_columns(table: Table, names: Sequence[str | None]) -> bool:
    """Whether a table map's column names are those of the description."""
    return tuple(names) == table.all_columns



def captured_tables(cursor: Any, table_filter: CollectionFilter) -> list[tuple[str, str]]:
    """The server's base tables the filter captures, as ``(database, table)`` in catalog order."""
    cursor.execute(
        "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES WHERE TABLE_TYPE = 'BASE TABLE' "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME"
    )
    return [(str(db), str(name)) for db, name in cursor.fetchall() if table_filter.captures(str(db), str(name))]
