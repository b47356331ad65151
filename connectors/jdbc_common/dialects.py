"""SQL generation per database: identifier quoting, column types for Connect schemas, and the
insert / upsert / update / delete / DDL statements the sink runs.

Three dialects have native upserts (PostgreSQL and SQLite ``ON CONFLICT``, MySQL/MariaDB
``ON DUPLICATE KEY UPDATE``); any other SQLAlchemy backend gets the generic dialect, which
supports ``insert`` and ``update``.
"""

from __future__ import annotations

import datetime as _dt
import decimal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sluice.connectors.api import ConfigError, Date, Decimal, Schema, Time, Timestamp, Type


@dataclass(frozen=True)
class Column:
    """A column the sink writes: its name, the Connect schema of its values, and whether it is
    part of the primary key."""

    name: str
    schema: Schema
    primary_key: bool = False


class SqlDialect:
    """Generic SQL (ANSI double-quoted identifiers, ``?`` or ``%s`` placeholders)."""

    name = "generic"
    supports_upsert = False
    #: DDL joins the open transaction (MySQL commits it implicitly instead).
    transactional_ddl = True

    def __init__(self, paramstyle: str = "qmark", quote_char: str = '"') -> None:
        self.placeholder = "?" if paramstyle == "qmark" else "%s"
        self._quote_char = quote_char

    # -- identifiers -----------------------------------------------------------------------------

    def quote(self, identifier: str) -> str:
        """Quote one identifier (always, as Confluent's ``quote.sql.identifiers=always``)."""
        q = self._quote_char
        return q + identifier.replace(q, q + q) + q

    def table(self, name: str) -> str:
        """Quote a possibly qualified table name (``schema.table`` → ``"schema"."table"``)."""
        return ".".join(self.quote(part) for part in split_table_name(name))

    def columns(self, names: Sequence[str]) -> str:
        return ", ".join(self.quote(n) for n in names)

    # -- DML ---------------------------------------------------------------------------------------

    def insert(self, table: str, columns: Sequence[str]) -> str:
        marks = ", ".join([self.placeholder] * len(columns))
        return f"INSERT INTO {self.table(table)} ({self.columns(columns)}) VALUES ({marks})"

    def upsert(self, table: str, columns: Sequence[str], keys: Sequence[str]) -> str:
        raise ConfigError(
            f"insert.mode=upsert is not supported for {self.name} databases; use insert or update",
            key="insert.mode",
        )

    def update(self, table: str, columns: Sequence[str], keys: Sequence[str]) -> str:
        """``UPDATE … SET`` non-key columns ``WHERE`` keys; parameters: non-key values, then keys."""
        values = [c for c in columns if c not in keys]
        if not values:
            raise ConfigError(f"insert.mode=update needs at least one non-key column to write to table {table}")
        sets = ", ".join(f"{self.quote(c)} = {self.placeholder}" for c in values)
        where = " AND ".join(f"{self.quote(k)} = {self.placeholder}" for k in keys)
        return f"UPDATE {self.table(table)} SET {sets} WHERE {where}"

    def delete(self, table: str, keys: Sequence[str]) -> str:
        where = " AND ".join(f"{self.quote(k)} = {self.placeholder}" for k in keys)
        return f"DELETE FROM {self.table(table)} WHERE {where}"

    # -- DDL ---------------------------------------------------------------------------------------

    def create_table(self, table: str, columns: Sequence[Column]) -> str:
        """``CREATE TABLE`` with ``NOT NULL`` for required fields, defaults, and the primary key."""
        parts = [self._column_definition(c) for c in columns]
        keys = [c.name for c in columns if c.primary_key]
        if keys:
            parts.append(f"PRIMARY KEY({self.columns(keys)})")
        body = ",\n".join(f"  {p}" for p in parts)
        return f"CREATE TABLE {self.table(table)} (\n{body}\n)"

    def add_column(self, table: str, column: Column) -> str:
        return f"ALTER TABLE {self.table(table)} ADD {self._column_definition(column)}"

    def _column_definition(self, column: Column) -> str:
        sql = f"{self.quote(column.name)} {self.sql_type(column.schema, primary_key=column.primary_key)}"
        default = column.schema.default
        if default is not None:
            literal = self.literal(default, column.schema)
            if literal is not None:
                sql += f" DEFAULT {literal}"
        if column.primary_key or not column.schema.optional:
            sql += " NOT NULL"
        else:
            sql += " NULL"
        return sql

    def literal(self, value: Any, schema: Schema) -> str | None:
        """A SQL literal for a schema default, or ``None`` when it has none that is portable."""
        if isinstance(value, bool):
            return "TRUE" if value else "FALSE"
        if isinstance(value, (int, float, decimal.Decimal)):
            return str(value)
        if isinstance(value, str):
            return "'" + value.replace("'", "''") + "'"
        if isinstance(value, (_dt.date, _dt.time)):
            return "'" + value.isoformat() + "'"
        return None

    def sql_type(self, schema: Schema, *, primary_key: bool = False) -> str:
        """The column type for values of ``schema`` (a logical type first, then the Connect type)."""
        name = schema.name
        if name == Decimal.LOGICAL_NAME:
            return self._decimal_type(schema)
        if name == Date.LOGICAL_NAME:
            return "DATE"
        if name == Time.LOGICAL_NAME:
            return "TIME"
        if name == Timestamp.LOGICAL_NAME:
            return "TIMESTAMP"
        return self._types().get(schema.type) or self._complex_type(schema)

    def _decimal_type(self, schema: Schema) -> str:
        params = schema.parameters or {}
        precision = params.get("connect.decimal.precision")
        if precision is not None:
            return f"DECIMAL({precision},{params.get('scale', '0')})"
        return "DECIMAL"

    def _complex_type(self, schema: Schema) -> str:
        # Structs, maps and arrays are written as JSON text.
        return "TEXT"

    def _types(self) -> dict[Type, str]:
        return {
            Type.INT8: "SMALLINT",
            Type.INT16: "SMALLINT",
            Type.INT32: "INTEGER",
            Type.INT64: "BIGINT",
            Type.FLOAT32: "REAL",
            Type.FLOAT64: "DOUBLE PRECISION",
            Type.BOOLEAN: "BOOLEAN",
            Type.STRING: "TEXT",
            Type.BYTES: "BLOB",
        }

    # -- source queries ------------------------------------------------------------------------------

    def current_time_sql(self) -> str | None:
        """SQL returning the database's current time, or ``None`` to use the worker's clock."""
        return "SELECT CURRENT_TIMESTAMP"


class PostgresDialect(SqlDialect):
    """PostgreSQL: ``ON CONFLICT`` upserts, native arrays, JSONB for structs and maps."""

    name = "postgresql"
    supports_upsert = True

    def __init__(self, paramstyle: str = "format") -> None:
        super().__init__("format")

    def upsert(self, table: str, columns: Sequence[str], keys: Sequence[str]) -> str:
        return self.insert(table, columns) + self.on_conflict(columns, keys)

    def on_conflict(self, columns: Sequence[str], keys: Sequence[str]) -> str:
        values = [c for c in columns if c not in keys]
        if not values:
            return f" ON CONFLICT ({self.columns(keys)}) DO NOTHING"
        sets = ", ".join(f"{self.quote(c)} = EXCLUDED.{self.quote(c)}" for c in values)
        return f" ON CONFLICT ({self.columns(keys)}) DO UPDATE SET {sets}"

    def _types(self) -> dict[Type, str]:
        return {**super()._types(), Type.BYTES: "BYTEA"}

    def _decimal_type(self, schema: Schema) -> str:
        return super()._decimal_type(schema).replace("DECIMAL", "NUMERIC")

    def _complex_type(self, schema: Schema) -> str:
        item = schema.value_schema
        if schema.type is Type.ARRAY and item is not None and (item.type.is_primitive or item.name):
            return self.sql_type(item) + "[]"
        return "JSONB"


class SqliteDialect(SqlDialect):
    """SQLite 3.24+: ``ON CONFLICT`` upserts; dates and times are stored as ISO text."""

    name = "sqlite"
    supports_upsert = True

    def __init__(self, paramstyle: str = "qmark") -> None:
        super().__init__("qmark")

    def upsert(self, table: str, columns: Sequence[str], keys: Sequence[str]) -> str:
        values = [c for c in columns if c not in keys]
        base = self.insert(table, columns)
        if not values:
            return f"{base} ON CONFLICT ({self.columns(keys)}) DO NOTHING"
        sets = ", ".join(f"{self.quote(c)} = excluded.{self.quote(c)}" for c in values)
        return f"{base} ON CONFLICT ({self.columns(keys)}) DO UPDATE SET {sets}"

    def sql_type(self, schema: Schema, *, primary_key: bool = False) -> str:
        if schema.name == Timestamp.LOGICAL_NAME:
            return "DATETIME"
        return super().sql_type(schema, primary_key=primary_key)

    def _types(self) -> dict[Type, str]:
        return {
            Type.INT8: "INTEGER",
            Type.INT16: "INTEGER",
            Type.INT32: "INTEGER",
            Type.INT64: "INTEGER",
            Type.FLOAT32: "REAL",
            Type.FLOAT64: "REAL",
            Type.BOOLEAN: "BOOLEAN",
            Type.STRING: "TEXT",
            Type.BYTES: "BLOB",
        }

    def _decimal_type(self, schema: Schema) -> str:
        return "NUMERIC"

    def literal(self, value: Any, schema: Schema) -> str | None:
        if isinstance(value, bool):
            return "1" if value else "0"
        return super().literal(value, schema)

    def current_time_sql(self) -> str | None:
        return None  # SQLite's CURRENT_TIMESTAMP has whole seconds only


class MySqlDialect(SqlDialect):
    """MySQL and MariaDB: backquoted identifiers, ``ON DUPLICATE KEY UPDATE`` upserts."""

    name = "mysql"
    supports_upsert = True
    transactional_ddl = False

    def __init__(self, paramstyle: str = "format") -> None:
        super().__init__("format", quote_char="`")

    def upsert(self, table: str, columns: Sequence[str], keys: Sequence[str]) -> str:
        values = [c for c in columns if c not in keys] or list(keys[:1])
        sets = ", ".join(f"{self.quote(c)} = VALUES({self.quote(c)})" for c in values)
        return f"{self.insert(table, columns)} ON DUPLICATE KEY UPDATE {sets}"

    def sql_type(self, schema: Schema, *, primary_key: bool = False) -> str:
        name = schema.name
        if name == Time.LOGICAL_NAME:
            return "TIME(3)"
        if name == Timestamp.LOGICAL_NAME:
            return "DATETIME(3)"
        if name is None and primary_key and schema.type is Type.STRING:
            return "VARCHAR(256)"  # MySQL cannot index TEXT without a prefix length
        if name is None and primary_key and schema.type is Type.BYTES:
            return "VARBINARY(1024)"
        return super().sql_type(schema, primary_key=primary_key)

    def _types(self) -> dict[Type, str]:
        return {
            **super()._types(),
            Type.INT8: "TINYINT",
            Type.INT32: "INT",
            Type.FLOAT32: "FLOAT",
            Type.FLOAT64: "DOUBLE",
            Type.BOOLEAN: "TINYINT(1)",
        }

    def _decimal_type(self, schema: Schema) -> str:
        # MySQL's limits: precision 65, scale 30 (an unconstrained source NUMERIC has scale 127).
        params = schema.parameters or {}
        scale = min(int(params.get("scale", "0")), 30)
        precision = int(params.get("connect.decimal.precision", "65"))
        return f"DECIMAL({min(max(precision, scale), 65)},{scale})"

    def literal(self, value: Any, schema: Schema) -> str | None:
        if isinstance(value, bool):
            return "1" if value else "0"
        return super().literal(value, schema)

    def current_time_sql(self) -> str | None:
        return "SELECT CURRENT_TIMESTAMP(6)"


def split_table_name(name: str) -> list[str]:
    """``db.schema.table`` → parts; a name may not have empty parts."""
    parts = name.split(".")
    if any(not p for p in parts):
        raise ConfigError(f"Invalid table name {name!r}")
    return parts


def dialect_for(backend: str, paramstyle: str = "qmark") -> SqlDialect:
    """The dialect for a SQLAlchemy backend name (``engine.dialect.name``)."""
    if backend == "postgresql":
        return PostgresDialect()
    if backend == "sqlite":
        return SqliteDialect()
    if backend in ("mysql", "mariadb"):
        return MySqlDialect()
    return SqlDialect(paramstyle)
