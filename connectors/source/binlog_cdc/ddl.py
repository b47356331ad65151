"""The DDL that changes captured tables' shapes, parsed by hand: MySQL's and MariaDB's dialect.

:class:`SchemaModel` holds table shapes (:class:`TableShape`) by ``(database, table)`` and applies
one statement at a time (:meth:`SchemaModel.apply`), the way the server would: ``CREATE TABLE``
(column definitions, ``LIKE``), ``ALTER TABLE`` (``ADD``/``DROP``/``MODIFY``/``CHANGE``/
``RENAME COLUMN``, ``ALTER COLUMN … DEFAULT``, ``RENAME TO``, ``ADD``/``DROP PRIMARY KEY``,
``CONVERT TO CHARACTER SET``), ``DROP TABLE``, ``RENAME TABLE``,
``CREATE``/``DROP DATABASE`` and ``CREATE``/``DROP INDEX``. Index, constraint, partition and
table-option clauses change no column and are skipped; other statements (views, routines,
grants, ``SET``, ``TRUNCATE``) are not table DDL and change nothing.

Columns are kept as ``information_schema`` prints them (:mod:`.shapes`), so a shape from DDL
maps to the same schemas as one described by the server; tokens and column definitions are
:mod:`.ddl_syntax`'s.

Identifiers are matched as the server matches table names on Linux (case-sensitively) and
column names (case-insensitively). Quoted names (backticks with doubled backticks, double quotes),
comments (``/* */``, ``-- ``, ``#``) and executable comments (``/*!40101 … */``,
``/*M!100100 … */``, whose text counts) are understood. A statement the parser does not follow
raises :class:`DdlError`; the model is then unchanged, and the caller describes the tables the
statement names from the server instead.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import NamedTuple

from sluice.connectors.source.binlog_cdc.ddl_syntax import Parser, json_check_column
from sluice.connectors.source.binlog_cdc.shapes import DdlError, TableChange, TableId, TableShape

__all__ = ["DdlError", "SchemaModel", "Statement", "TableChange", "UnknownTable"]


class Statement(NamedTuple):
    """A parsed statement: its table changes, and the databases it created, altered or dropped."""

    changes: list[TableChange]
    databases: list[str]
    #: Whether it is DDL of tables or databases at all (views, routines, grants, ``SET`` are not).
    is_ddl: bool


class UnknownTable(DdlError):
    """The statement changes a table the model does not hold."""

    def __init__(self, table: TableId) -> None:
        super().__init__(f"table {table[0]}.{table[1]} is not known")
        self.table = table


class SchemaModel:
    """Table shapes by ``(database, table)``, changed statement by statement. Thread: the task thread."""

    def __init__(self) -> None:
        self.tables: dict[TableId, TableShape] = {}
        #: The server is MariaDB (its ``JSON`` is a ``LONGTEXT``), as the history finds out.
        self.mariadb = False
        #: A database's default character set: what a table created without one takes.
        self.database_charset: Callable[[str], str | None] = lambda database: None

    def apply(self, sql: str, default_db: str | None) -> Statement:
        """Apply one statement (``default_db``: the session's database when it ran); the model is
        unchanged when it raises :class:`DdlError`."""
        work = _Work(self.tables)
        statement = _Statements(
            Parser(sql, mariadb=self.mariadb), work, default_db or None, self.database_charset
        ).statement()
        work.commit()
        return statement

    def put(self, shape: TableShape) -> None:
        self.tables[shape.id] = shape

    def drop(self, table: TableId) -> None:
        self.tables.pop(table, None)


class _Work:
    """The tables a statement changes, copied on first touch and written back on success."""

    def __init__(self, tables: dict[TableId, TableShape]) -> None:
        self.tables = tables
        self.changed: dict[TableId, TableShape | None] = {}

    def get(self, table: TableId) -> TableShape | None:
        if table in self.changed:
            return self.changed[table]
        shape = self.tables.get(table)
        if shape is not None:
            shape = copy.deepcopy(shape)
            self.changed[table] = shape
        return shape

    def put(self, shape: TableShape) -> None:
        self.changed[shape.id] = shape

    def drop(self, table: TableId) -> None:
        self.changed[table] = None

    def in_database(self, database: str) -> list[TableId]:
        ids = {t for t in self.tables if t[0] == database} | {
            t for t, s in self.changed.items() if s and t[0] == database
        }
        return sorted(t for t in ids if self.get(t) is not None)

    def commit(self) -> None:
        for table, shape in self.changed.items():
            if shape is None:
                self.tables.pop(table, None)
            else:
                self.tables[table] = shape


_NOT_DDL = Statement([], [], False)


class _Statements:
    def __init__(
        self, parser: Parser, work: _Work, default_db: str | None, database_charset: Callable[[str], str | None]
    ) -> None:
        self.p = parser
        self.work = work
        self.db = default_db
        self.database_charset = database_charset

    def statement(self) -> Statement:
        p = self.p
        if p.accept("CREATE"):
            return self.create()
        if p.accept("ALTER"):
            return self.alter()
        if p.accept("DROP"):
            return self.drop()
        if p.accept("RENAME"):
            if not (p.accept("TABLE") or p.accept("TABLES")):
                return _NOT_DDL
            return self.rename()
        if p.accept("TRUNCATE"):  # rows go, the shape stays: as for Debezium, no schema change
            return _NOT_DDL
        return _NOT_DDL

    def existing(self, table: TableId) -> TableShape:
        shape = self.work.get(table)
        if shape is None:
            raise UnknownTable(table)
        return shape

    # -- CREATE --

    def create(self) -> Statement:
        p = self.p
        p.accept("OR", "REPLACE")
        if p.accept("DATABASE") or p.accept("SCHEMA"):
            p.accept("IF", "NOT", "EXISTS")
            return Statement([], [p.name()], True)
        temporary = p.accept("TEMPORARY")
        if p.accept("TABLE"):
            return self.create_table(temporary)
        p.accept("ONLINE") or p.accept("OFFLINE")
        if p.accept("UNIQUE") or p.accept("FULLTEXT") or p.accept("SPATIAL") or p.at("INDEX") or p.at("KEY"):
            p.accept("INDEX") or p.accept("KEY")
            p.accept("IF", "NOT", "EXISTS")
            p.name()
            while not p.done() and not p.at("ON"):
                p.next()
            p.expect("ON")
            table = self.existing(p.qualified(self.db))
            return Statement([TableChange("ALTER", table.id, table)], [], True)
        return _NOT_DDL

    def create_table(self, temporary: bool) -> Statement:
        p = self.p
        if_not_exists = p.accept("IF", "NOT", "EXISTS")
        table_id = p.qualified(self.db)
        if temporary:  # session-only: never in a row-based binlog's tables
            return Statement([], [], True)
        exists = self.work.get(table_id) is not None
        if p.accept("LIKE") or p.accept("(", "LIKE"):
            source = self.existing(p.qualified(self.db))
            shape = copy.deepcopy(source)
            shape.database, shape.name = table_id
        elif p.at("("):
            shape = self.definitions(table_id)
        else:
            raise DdlError("CREATE TABLE without column definitions (its columns come from a query)")
        if exists and if_not_exists:
            return Statement([], [], True)
        self.work.put(shape)
        return Statement([TableChange("CREATE", table_id, shape)], [], True)

    def definitions(self, table_id: TableId) -> TableShape:
        p = self.p
        shape = TableShape(*table_id)
        json_checks: list[str] = []
        p.expect("(")
        while True:
            if not self.table_element(shape, json_checks):
                col, primary = p.column(p.name())
                shape.columns.append(col)
                if primary:
                    shape.primary_key = [col.name]
            if p.accept(")"):
                break
            p.expect(",")
        self.table_options(shape)
        if shape.charset is None:
            shape.charset = self.database_charset(shape.database)
        for name in json_checks:
            if (checked := shape.column(name)) is not None:
                checked.json = True
        for col in shape.columns:
            if col.charset is None and col.data_type in _CHARSET_TYPES:
                col.charset = shape.charset
        self.key_not_null(shape)
        return shape

    def table_element(self, shape: TableShape, json_checks: list[str]) -> bool:
        """An index, key or constraint of a table definition (``False``: a column comes)."""
        p = self.p
        if p.accept("CONSTRAINT"):
            if not (p.at("PRIMARY") or p.at("UNIQUE") or p.at("FOREIGN") or p.at("CHECK")):
                p.name()
        elif not (p.at("PRIMARY", "KEY") or p.at("CHECK", "(") or p.at("PERIOD", "FOR")
                  or any(p.at(w) for w in ("UNIQUE", "INDEX", "KEY", "FULLTEXT", "SPATIAL", "FOREIGN"))):  # fmt: skip
            return False
        if p.accept("PRIMARY", "KEY"):
            if p.accept("USING"):
                p.next()
            shape.primary_key = [self.column_name(shape, n) for n in p.name_list()]
            p.skip_clause()
        elif p.accept("CHECK"):
            column = json_check_column(p.skip_parens())
            if column is not None:
                json_checks.append(column)
            p.skip_clause()
        else:
            p.skip_clause()
        return True

    @staticmethod
    def column_name(shape: TableShape, name: str) -> str:
        col = shape.column(name)
        if col is None:
            raise DdlError(f"table {shape.database}.{shape.name} has no column {name}")
        return col.name

    @staticmethod
    def key_not_null(shape: TableShape) -> None:
        for name in shape.primary_key:
            col = shape.column(name)
            if col is not None:
                col.nullable = False

    def table_options(self, shape: TableShape) -> None:
        p = self.p
        collation = None
        while not p.done():
            if p.accept("DEFAULT"):
                continue
            if p.accept("CHARACTER", "SET") or p.accept("CHARSET"):
                p.accept("=")
                shape.charset = p.name().lower()
            elif p.accept("COLLATE"):
                p.accept("=")
                collation = p.name().lower()
            elif p.accept("COMMENT"):
                p.accept("=")
                shape.comment = p.string()
            elif p.at("SELECT") or p.at("AS") or p.at("IGNORE") or p.at("REPLACE"):
                raise DdlError("CREATE TABLE ... SELECT: its columns come from a query")
            elif p.at("("):
                p.skip_parens()
            else:
                p.next()
        if shape.charset is None and collation:
            shape.charset = collation.split("_", 1)[0]

    # -- ALTER --

    def alter(self) -> Statement:
        p = self.p
        p.accept("ONLINE") or p.accept("OFFLINE")
        p.accept("IGNORE")
        if p.accept("DATABASE") or p.accept("SCHEMA"):
            name = self.db
            if not (p.at("DEFAULT") or p.at("CHARACTER") or p.at("CHARSET") or p.at("COLLATE") or p.at("COMMENT")
                    or p.at("UPGRADE") or p.at("READ")):  # fmt: skip
                name = p.name()
            return Statement([], [name] if name else [], True)
        if not p.accept("TABLE"):
            return _NOT_DDL
        if_exists = p.accept("IF", "EXISTS")
        table_id = p.qualified(self.db)
        shape = self.work.get(table_id)
        if shape is None:
            if if_exists:
                return Statement([], [], True)
            raise UnknownTable(table_id)
        if p.accept("WAIT"):
            p.next()
        p.accept("NOWAIT")
        new_id = table_id
        while not p.done():
            renamed = self.alter_spec(shape)
            if renamed is not None:
                new_id = renamed
            if not p.accept(","):
                if not p.done():
                    p.skip_clause()  # a clause without commas (PARTITION BY ..., ORDER BY a)
                    p.accept(",")
        self.key_not_null(shape)
        if new_id != table_id:
            self.work.drop(table_id)
            shape.database, shape.name = new_id
            self.work.put(shape)
            return Statement([TableChange("ALTER", new_id, shape, table_id)], [], True)
        return Statement([TableChange("ALTER", table_id, shape)], [], True)

    def alter_spec(self, shape: TableShape) -> TableId | None:
        """One clause of ``ALTER TABLE``; the table's new id when it renames the table."""
        p = self.p
        if p.accept("ADD"):
            self.alter_add(shape)
        elif p.accept("DROP"):
            self.alter_drop(shape)
        elif p.accept("MODIFY") or p.accept("CHANGE"):
            changing = self.p.tokens[self.p.i - 1].text.upper() == "CHANGE"
            p.accept("COLUMN")
            if_exists = p.accept("IF", "EXISTS")
            old = p.name()
            if shape.column(old) is None and if_exists:
                p.skip_clause()
            else:
                self.replace_column(shape, old, p.name() if changing else old)
        elif p.accept("RENAME"):
            return self.alter_rename(shape)
        elif p.accept("ALTER"):
            self.alter_column(shape)
        elif p.accept("CONVERT", "TO"):
            p.accept("CHARACTER", "SET") or p.accept("CHARSET")
            shape.charset = p.name().lower()
            for col in shape.columns:
                if col.data_type in _CHARSET_TYPES:
                    col.charset = shape.charset
            p.skip_clause()
        elif p.accept("DEFAULT") or p.at("CHARACTER") or p.at("CHARSET"):
            if p.accept("CHARACTER", "SET") or p.accept("CHARSET"):
                p.accept("=")
                shape.charset = p.name().lower()
            p.skip_clause()
        elif p.accept("COMMENT"):
            p.accept("=")
            shape.comment = p.string()
        else:
            p.skip_clause()  # table options, ALGORITHM, LOCK, FORCE, ORDER BY, partitioning
        return None

    def alter_add(self, shape: TableShape) -> None:
        p = self.p
        json_checks: list[str] = []
        if p.at("PARTITION") or p.at("SYSTEM", "VERSIONING") or p.at("PERIOD"):
            p.skip_clause()
        elif p.accept("COLUMN") or p.at("(") or not self.table_element(shape, json_checks):
            self.add_columns(shape)
        for name in json_checks:
            if (col := shape.column(name)) is not None:
                col.json = True

    def alter_drop(self, shape: TableShape) -> None:
        p = self.p
        if p.accept("PRIMARY", "KEY"):
            shape.primary_key = []
            return
        if any(p.at(w) for w in ("INDEX", "KEY", "FOREIGN", "CONSTRAINT", "CHECK", "PARTITION", "PERIOD", "SYSTEM")):
            p.skip_clause()
            return
        p.accept("COLUMN")
        if_exists = p.accept("IF", "EXISTS")
        name = p.name()
        col = shape.column(name)
        if col is None:
            if not if_exists:
                raise DdlError(f"DROP COLUMN: {shape.database}.{shape.name} has no column {name}")
        else:
            shape.columns.remove(col)
            shape.primary_key = [k for k in shape.primary_key if k != col.name]
        p.accept("RESTRICT") or p.accept("CASCADE")

    def alter_rename(self, shape: TableShape) -> TableId | None:
        p = self.p
        if p.accept("COLUMN"):
            if_exists = p.accept("IF", "EXISTS")
            old = p.name()
            p.expect("TO")
            new = p.name()
            col = shape.column(old)
            if col is None:
                if not if_exists:
                    raise DdlError(f"RENAME COLUMN: {shape.database}.{shape.name} has no column {old}")
            else:
                shape.primary_key = [new if k == col.name else k for k in shape.primary_key]
                col.name = new
            return None
        if p.at("INDEX") or p.at("KEY"):
            p.skip_clause()
            return None
        p.accept("TO") or p.accept("AS")
        return p.qualified(shape.database if self.db is None else self.db)

    def alter_column(self, shape: TableShape) -> None:
        """``ALTER [COLUMN] c SET DEFAULT v | DROP DEFAULT | ...`` (index and check clauses skipped)."""
        p = self.p
        if p.at("INDEX") or p.at("CONSTRAINT") or p.at("CHECK") or p.at("KEY"):
            p.skip_clause()
            return
        p.accept("COLUMN")
        p.accept("IF", "EXISTS")
        col = shape.column(p.name())
        if p.accept("SET", "DEFAULT"):
            value = p.default_value()
            if col is not None:
                col.default, col.has_default = value, True
        elif p.accept("DROP", "DEFAULT"):
            if col is not None:
                col.default, col.has_default = None, False
        p.skip_clause()

    def add_columns(self, shape: TableShape) -> None:
        p = self.p
        if_not_exists = p.accept("IF", "NOT", "EXISTS")
        if p.accept("("):
            while True:
                self.add_column(shape, p.name(), if_not_exists)
                if p.accept(")"):
                    return
                p.expect(",")
        self.add_column(shape, p.name(), if_not_exists)

    def add_column(self, shape: TableShape, name: str, if_not_exists: bool) -> None:
        p = self.p
        col, primary = p.column(name)
        if shape.column(name) is not None:
            if if_not_exists:
                p.skip_clause()
                return
            raise DdlError(f"ADD COLUMN: {shape.database}.{shape.name} has a column {name} already")
        if col.charset is None and col.data_type in _CHARSET_TYPES:
            col.charset = shape.charset
        shape.columns.insert(self.position(shape, len(shape.columns)), col)
        if primary:
            shape.primary_key = [col.name]

    def replace_column(self, shape: TableShape, old: str, new: str) -> None:
        p = self.p
        at = shape.index(old)
        previous = shape.columns.pop(at)
        col, primary = p.column(new)
        if col.charset is None and col.data_type in _CHARSET_TYPES:
            col.charset = shape.charset
        shape.columns.insert(self.position(shape, at), col)
        shape.primary_key = [col.name if k == previous.name else k for k in shape.primary_key]
        if primary:
            shape.primary_key = [col.name]

    def position(self, shape: TableShape, default: int) -> int:
        p = self.p
        if p.accept("FIRST"):
            return 0
        if p.accept("AFTER"):
            return shape.index(p.name()) + 1
        return default

    # -- DROP, RENAME --

    def drop(self) -> Statement:
        p = self.p
        if p.accept("DATABASE") or p.accept("SCHEMA"):
            p.accept("IF", "EXISTS")
            name = p.name()
            changes = []
            for table_id in self.work.in_database(name):
                shape = self.work.get(table_id)
                self.work.drop(table_id)
                changes.append(TableChange("DROP", table_id, None))
            return Statement(changes, [name], True)
        temporary = p.accept("TEMPORARY")
        if p.accept("INDEX"):
            p.accept("IF", "EXISTS")
            p.name()
            p.expect("ON")
            table = self.existing(p.qualified(self.db))
            return Statement([TableChange("ALTER", table.id, table)], [], True)
        if not p.accept("TABLE"):
            return _NOT_DDL
        p.accept("IF", "EXISTS")
        changes = []
        while True:
            table_id = p.qualified(self.db)
            shape = self.work.get(table_id)
            if shape is not None and not temporary:
                self.work.drop(table_id)
                changes.append(TableChange("DROP", table_id, None))
            if not p.accept(","):
                break
        return Statement(changes, [], True)

    def rename(self) -> Statement:
        p = self.p
        changes = []
        while True:
            old = p.qualified(self.db)
            if p.accept("WAIT"):
                p.next()
            p.accept("NOWAIT")
            p.expect("TO")
            new = p.qualified(self.db)
            shape = self.work.get(old)
            if shape is not None:
                self.work.drop(old)
                shape.database, shape.name = new
                self.work.put(shape)
                changes.append(TableChange("ALTER", new, shape, old))
            if not p.accept(","):
                return Statement(changes, [], True)


_CHARSET_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"})
