"""Table shapes: a table's columns as ``information_schema`` prints them, and its primary key.

A :class:`ColumnDef` is one column as ``information_schema.COLUMNS`` has it (``DATA_TYPE``,
``COLUMN_TYPE`` with ``unsigned`` and the enum/set members, precision, scale and lengths with the
server's defaults), so :meth:`ColumnDef.info` is exactly the :class:`~.types.ColumnInfo` the type
mapping reads, whether the column came from DDL (:mod:`.ddl`), from ``information_schema``, or
back from the schema history (:mod:`.history`). :func:`column_def` turns a declared type into
that form: ``BOOLEAN`` is ``tinyint(1)``, ``SERIAL`` ``bigint(20) unsigned``, ``FLOAT(p>24)``
``double``, ``REAL`` ``double``, ``CHAR … CHARACTER SET binary`` ``binary``, and ``JSON`` MySQL's
``json`` or, on MariaDB, the ``longtext`` it stands for (marked :attr:`ColumnDef.json`, as the
``json_valid`` check marks it, for the history's ``typeExpression``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sluice.connectors.source.binlog_cdc.types import ColumnInfo, allowed_values

TableId = tuple[str, str]


class DdlError(ValueError):
    """A statement the parser cannot follow (the message says where)."""


@dataclass
class ColumnDef:
    """One column as ``information_schema.COLUMNS`` has it (types lower case), plus what Debezium's
    schema history records of it."""

    name: str
    data_type: str
    column_type: str
    nullable: bool = True
    precision: int | None = None
    scale: int | None = None
    datetime_precision: int | None = None
    length: int | None = None
    json: bool = False
    charset: str | None = None
    auto_increment: bool = False
    generated: bool = False
    #: The default's expression as written (``None``: no default, or ``DEFAULT NULL``).
    default: str | None = None
    has_default: bool = False
    comment: str | None = None
    #: The type as declared, for the history, where the server keeps another (``BOOLEAN``, ``JSON``).
    declared: str | None = None

    def info(self) -> ColumnInfo:
        return ColumnInfo(
            self.name, self.data_type, self.column_type, self.nullable, self.precision, self.scale,
            self.datetime_precision, self.length, self.json,
        )  # fmt: skip


@dataclass
class TableShape:
    """A table's columns (in order) and primary key."""

    database: str
    name: str
    columns: list[ColumnDef] = field(default_factory=list)
    primary_key: list[str] = field(default_factory=list)
    charset: str | None = None
    comment: str | None = None

    @property
    def id(self) -> TableId:
        return (self.database, self.name)

    def column(self, name: str) -> ColumnDef | None:
        lower = name.lower()
        return next((c for c in self.columns if c.name.lower() == lower), None)

    def index(self, name: str) -> int:
        lower = name.lower()
        for i, c in enumerate(self.columns):
            if c.name.lower() == lower:
                return i
        raise DdlError(f"table {self.database}.{self.name} has no column {name}")


class TableChange(NamedTuple):
    """What one statement did to one table: ``CREATE``, ``ALTER`` or ``DROP``; the table's shape
    after it (``None`` for ``DROP``, as Debezium writes it); ``previous``: its old id after a rename."""

    kind: str
    id: TableId
    shape: TableShape | None
    previous: TableId | None = None


def quote_string(value: str) -> str:
    """A value as ``COLUMN_TYPE`` prints enum and set members: single-quoted, quotes doubled."""
    return "'" + value.replace("'", "''") + "'"


# -- types -------------------------------------------------------------------------------------------------

#: Integer types: (information_schema name, numeric precision).
_INTEGERS = {
    "tinyint": ("tinyint", 3), "int1": ("tinyint", 3), "smallint": ("smallint", 5), "int2": ("smallint", 5),
    "mediumint": ("mediumint", 7), "int3": ("mediumint", 7), "middleint": ("mediumint", 7),
    "int": ("int", 10), "integer": ("int", 10), "int4": ("int", 10), "bigint": ("bigint", 19), "int8": ("bigint", 19),
}  # fmt: skip
_TEXT_LENGTHS = {"tinytext": 255, "text": 65535, "mediumtext": 16777215, "longtext": 4294967295}
_BLOB_LENGTHS = {"tinyblob": 255, "blob": 65535, "mediumblob": 16777215, "longblob": 4294967295}
_TEMPORAL = ("time", "datetime", "timestamp")
_INTEGER_TYPES = ("tinyint", "smallint", "mediumint", "int", "bigint")
_SPATIAL = ("geometry", "point", "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
            "geometrycollection", "uuid", "inet4", "inet6", "vector")  # fmt: skip


def column_def(
    name: str, type_name: str, params: list[str], flags: set[str], charset: str | None, *, mariadb: bool = False
) -> ColumnDef:
    """A column from its declared type: ``type_name`` lower case (``double precision``,
    ``character varying``, ...), ``params`` the parenthesised arguments (enum/set members
    unquoted), ``flags`` among ``unsigned``, ``zerofill``; ``mariadb``: the server is MariaDB (its
    ``JSON`` is a ``LONGTEXT``)."""
    base = _ALIASES.get(type_name, type_name)
    if charset == "binary" and base in ("char", "varchar", *_TEXT_LENGTHS):
        base = {"char": "binary", "varchar": "varbinary"}.get(base, base.replace("text", "blob"))
        charset = None
    numeric = _numeric_def(name, base, params, flags)
    if numeric is not None:
        return numeric
    return _other_def(name, base, params, charset, mariadb)


_ALIASES = {
    "national char": "char", "nchar": "char", "national character": "char", "character": "char",
    "national varchar": "varchar", "nvarchar": "varchar", "national char varying": "varchar",
    "character varying": "varchar", "char varying": "varchar", "national character varying": "varchar",
    "varchar2": "varchar", "varcharacter": "varchar", "long": "mediumtext", "long varchar": "mediumtext",
    "long varbinary": "mediumblob", "double precision": "double", "real": "double", "dec": "decimal",
    "numeric": "decimal", "fixed": "decimal",
}  # fmt: skip


def _numeric_def(name: str, base: str, params: list[str], flags: set[str]) -> ColumnDef | None:
    """Integer, decimal and floating-point columns (``None``: another type)."""
    suffix = "".join(f" {f}" for f in ("unsigned", "zerofill") if f in flags)
    if "zerofill" in flags and " unsigned" not in suffix:
        suffix = " unsigned" + suffix  # ZEROFILL implies UNSIGNED
    ints = _INTEGERS.get(base)
    if base in ("bool", "boolean"):
        return ColumnDef(name, "tinyint", "tinyint(1)", precision=3, scale=0, declared="BOOLEAN")
    if base == "serial":
        return ColumnDef(name, "bigint", "bigint unsigned", nullable=False, precision=20, scale=0, auto_increment=True)
    if ints is not None:
        data_type, precision = ints
        # The display width only as declared (information_schema prints a default one; Debezium none).
        shown = f"({params[0]})" if params else ""
        if data_type == "bigint" and suffix:
            precision = 20
        return ColumnDef(name, data_type, f"{data_type}{shown}{suffix}", precision=precision, scale=0)
    if base == "decimal":
        precision = int(params[0]) if params else 10
        scale = int(params[1]) if len(params) > 1 else 0
        return ColumnDef(name, "decimal", f"decimal({precision},{scale}){suffix}", precision=precision, scale=scale)
    if base in ("float", "double", "float4", "float8"):
        data_type = "double" if base in ("double", "float8") else "float"
        if data_type == "float" and len(params) == 1 and int(params[0]) > 24:
            data_type = "double"
        if len(params) == 2:
            return ColumnDef(
                name, data_type, f"{data_type}({params[0]},{params[1]}){suffix}",
                precision=int(params[0]), scale=int(params[1]),
            )  # fmt: skip
        return ColumnDef(name, data_type, f"{data_type}{suffix}", precision=12 if data_type == "float" else 22)
    return None


def _other_def(name: str, base: str, params: list[str], charset: str | None, mariadb: bool) -> ColumnDef:
    """Bit, text, binary, JSON, enum/set, temporal and spatial columns."""
    if base == "bit":
        length = int(params[0]) if params else 1
        return ColumnDef(name, "bit", f"bit({length})", precision=length)
    if base in ("char", "varchar", "binary", "varbinary"):
        if base == "varchar" or base == "varbinary":
            if not params:
                raise DdlError(f"column {name}: {base.upper()} needs a length")
        length = int(params[0]) if params else 1
        return ColumnDef(name, base, f"{base}({length})", length=length, charset=charset if "char" in base else None)
    if base in _TEXT_LENGTHS or base in _BLOB_LENGTHS:
        if params and base in ("text", "blob"):  # TEXT(n): the smallest type that holds n
            wanted = int(params[0])
            sizes = _TEXT_LENGTHS if base == "text" else _BLOB_LENGTHS
            base = next(t for t, size in sizes.items() if size >= wanted or t.startswith("long"))
        length = _TEXT_LENGTHS.get(base) or _BLOB_LENGTHS[base]
        return ColumnDef(name, base, base, length=length, charset=charset if "text" in base else None)
    if base == "json":
        if mariadb:  # an alias of LONGTEXT (utf8mb4_bin) with a json_valid() check
            return ColumnDef(name, "longtext", "longtext", length=_TEXT_LENGTHS["longtext"], json=True, declared="JSON")
        return ColumnDef(name, "json", "json", json=True, declared="JSON")
    if base in ("enum", "set"):
        members = ",".join(quote_string(p) for p in params)
        return ColumnDef(name, base, f"{base}({members})", charset=charset)
    if base == "date":
        return ColumnDef(name, "date", "date")
    if base in _TEMPORAL:
        digits = int(params[0]) if params else 0
        return ColumnDef(name, base, f"{base}({digits})" if digits else base, datetime_precision=digits)
    if base == "year":
        return ColumnDef(name, "year", "year(4)")
    if base in _SPATIAL:
        return ColumnDef(name, base, base)
    raise DdlError(f"column {name}: unknown type {base.upper()}")


def quoted_id(table: TableId) -> str:
    """A table's id as Debezium writes it in table changes: ``"db"."table"``."""
    return ".".join('"' + part.replace('"', '""') + '"' for part in table)


def parse_id(text: str) -> TableId:
    """``"db"."table"`` (or ``db.table``) back to ``(db, table)``."""
    parts: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == '"':
            j, chars = i + 1, []
            while j < len(text):
                if text[j] == '"' and text[j + 1 : j + 2] == '"':
                    chars.append('"')
                    j += 2
                elif text[j] == '"':
                    break
                else:
                    chars.append(text[j])
                    j += 1
            parts.append("".join(chars))
            i = j + 2  # past the quote and the dot
        else:
            end = text.find(".", i)
            end = len(text) if end < 0 else end
            parts.append(text[i:end])
            i = end + 1
    if len(parts) != 2:
        raise ValueError(f"table id {text!r} is not <database>.<table>")
    return parts[0], parts[1]


# -- Debezium's table documents ----------------------------------------------------------------------------

#: java.sql.Types of each information_schema type, as Debezium's MySQL/MariaDB DDL parser resolves them.
_JDBC_TYPES = {
    "boolean": 16, "json": 1111, "char": 1, "varchar": 12, "tinytext": 12, "text": 12, "mediumtext": 12,
    "longtext": 12, "enum": 1, "set": 1,
    "tinyint": -6, "smallint": 5, "mediumint": 4, "int": 4, "bigint": -5, "float": 6, "double": 8,
    "decimal": 3, "bit": -7, "date": 91, "time": 92, "datetime": 93, "timestamp": 2014, "year": 4,
    "binary": -2, "varbinary": -3, "tinyblob": 2004, "blob": 2004, "mediumblob": 2004, "longblob": 2004,
}  # fmt: skip
_OTHER = 1111
_SIZED = ("decimal", "bit", "char", "varchar", "binary", "varbinary", *_TEMPORAL)


def _type_name(col: ColumnDef) -> str:
    if col.declared:
        return col.declared
    name = col.data_type.upper()
    if " zerofill" in col.column_type:
        return f"{name} UNSIGNED ZEROFILL"
    return f"{name} UNSIGNED" if " unsigned" in col.column_type else name


def _length_scale(col: ColumnDef) -> tuple[int | None, int | None]:
    """Debezium's ``length`` and ``scale`` of a column: what its declared type's parentheses say
    (an enum's 1, a set's members and commas, as Debezium counts them)."""
    inner = col.column_type[col.column_type.find("(") + 1 : col.column_type.find(")")] if "(" in col.column_type else ""
    if col.declared:
        return None, None
    if col.data_type in _INTEGER_TYPES:
        return (int(inner) if inner.isdigit() else None), None
    if col.data_type in ("float", "double"):
        return (col.precision, col.scale) if inner else (None, None)
    if col.data_type == "decimal":
        return col.precision, col.scale
    if col.data_type == "bit":
        return col.precision, None
    if col.data_type in _TEMPORAL:
        return (col.datetime_precision or None), None
    if col.data_type in ("char", "varchar", "binary", "varbinary"):
        return col.length, None
    if col.data_type == "enum":
        return 1, None
    if col.data_type == "set":
        return max(0, 2 * len(allowed_values(col.column_type)) - 1), None
    return None, None


def column_document(col: ColumnDef, position: int) -> dict[str, Any]:
    """A column as Debezium's schema history records it (``position`` counts from 1)."""
    length, scale = _length_scale(col)
    type_name = _type_name(col)
    doc: dict[str, Any] = {
        "name": col.name,
        "jdbcType": _JDBC_TYPES.get(type_name.lower(), _JDBC_TYPES.get(col.data_type, _OTHER)),
        "typeName": type_name,
        "typeExpression": type_name,
        "charsetName": None if col.declared == "JSON" else col.charset,
    }
    if length is not None:
        doc["length"] = length
    if scale is not None:
        doc["scale"] = scale
    doc.update(
        position=position,
        optional=col.nullable,
        autoIncremented=col.auto_increment,
        generated=col.generated or col.auto_increment,  # Debezium marks AUTO_INCREMENT generated
        comment=col.comment,
        hasDefaultValue=col.has_default or col.nullable,  # a nullable column defaults to NULL
    )
    if col.has_default and col.default is not None:
        doc["defaultValueExpression"] = col.default
    # Debezium keeps the members as written, quotes included.
    doc["enumValues"] = (
        [quote_string(v) for v in allowed_values(col.column_type)] if col.data_type in ("enum", "set") else []
    )
    return doc


def table_document(shape: TableShape) -> dict[str, Any]:
    """The ``table`` of a history record's table change (Debezium's JSON form)."""
    return {
        "defaultCharsetName": shape.charset,
        "primaryKeyColumnNames": list(shape.primary_key),
        "columns": [column_document(c, i) for i, c in enumerate(shape.columns, 1)],
        "attributes": [],
    }


def column_from_document(doc: Mapping[str, Any], *, mariadb: bool = False) -> ColumnDef:
    """A column back from its history document (the inverse of :func:`column_document`;
    ``mariadb``: the server is MariaDB, whose ``JSON`` is a ``LONGTEXT``)."""
    type_name = str(doc["typeName"]).lower()
    flags = {f for f in ("unsigned", "zerofill") if f" {f}" in type_name}
    base = type_name.replace(" unsigned", "").replace(" zerofill", "")
    length, scale = doc.get("length"), doc.get("scale")
    params: list[str] = []
    if base in ("enum", "set"):
        params = list(allowed_values(f"{base}({','.join(str(v) for v in doc.get('enumValues') or [])})"))
    elif base in _INTEGER_TYPES or base in _SIZED or base in ("float", "double"):
        if length is not None:
            params.append(str(length))
            if scale is not None and base in ("decimal", "float", "double"):
                params.append(str(scale))
    col = column_def(str(doc["name"]), base, params, flags, doc.get("charsetName"), mariadb=mariadb)
    col.nullable = bool(doc.get("optional", True))
    col.auto_increment = bool(doc.get("autoIncremented"))
    col.generated = bool(doc.get("generated")) and not col.auto_increment
    col.comment = doc.get("comment")
    col.default = doc.get("defaultValueExpression")
    col.has_default = col.default is not None or (bool(doc.get("hasDefaultValue")) and not col.nullable)
    return col


def shape_from_document(table: TableId, doc: Mapping[str, Any], *, mariadb: bool = False) -> TableShape:
    """A table back from a history record's ``table`` document."""
    columns = sorted(doc.get("columns") or [], key=lambda c: int(c.get("position") or 0))
    return TableShape(
        table[0],
        table[1],
        [column_from_document(c, mariadb=mariadb) for c in columns],
        [str(k) for k in doc.get("primaryKeyColumnNames") or []],
        doc.get("defaultCharsetName"),
        doc.get("comment"),
    )


# -- information_schema ------------------------------------------------------------------------------------

_COLUMNS_SQL = (
    "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, "
    "CHARACTER_MAXIMUM_LENGTH, CHARACTER_SET_NAME, COLUMN_DEFAULT, EXTRA, COLUMN_COMMENT "
    "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION"
)
_TABLE_SQL = (
    "SELECT TABLE_COLLATION, TABLE_COMMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s"
)
_PRIMARY_KEY_SQL = (
    "SELECT COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND CONSTRAINT_NAME = 'PRIMARY' ORDER BY ORDINAL_POSITION"
)
# MariaDB's JSON type is LONGTEXT with a json_valid() check named after the column.
_CHECKS_SQL = (
    "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS WHERE CONSTRAINT_SCHEMA = %s AND TABLE_NAME = %s"
)
_JSON_VALID = re.compile(r"json_valid\(`((?:[^`]|``)+)`\)", re.IGNORECASE)


def describe_shape(cursor: Any, database: str, name: str) -> TableShape | None:
    """The table as ``information_schema`` describes it now (``None``: it does not exist)."""
    cursor.execute(_COLUMNS_SQL, (database, name))
    rows = cursor.fetchall()
    if not rows:
        return None
    cursor.execute(_TABLE_SQL, (database, name))
    table_row = cursor.fetchone()
    cursor.execute(_PRIMARY_KEY_SQL, (database, name))
    primary_key = [str(r[0]) for r in cursor.fetchall()]
    cursor.execute(_CHECKS_SQL, (database, name))
    json_columns = {
        m.group(1).replace("``", "`") for (clause,) in cursor.fetchall() for m in _JSON_VALID.finditer(clause)
    }
    columns = []
    for (
        col,
        data_type,
        col_type,
        nullable,
        precision,
        scale,
        dt_precision,
        length,
        charset,
        default,
        extra,
        comment,
    ) in rows:
        extra = str(extra or "").lower()
        default_text = None if default is None or str(default).upper() == "NULL" else str(default)
        if default_text and len(default_text) > 1 and default_text[0] == default_text[-1] == "'":
            default_text = default_text[1:-1].replace("''", "'")  # MariaDB quotes a text default
        columns.append(
            ColumnDef(
                str(col),
                str(data_type).lower(),
                str(col_type).lower(),
                nullable == "YES",
                _int(precision),
                _int(scale),
                _int(dt_precision),
                _int(length),
                col in json_columns,
                charset=charset,
                auto_increment="auto_increment" in extra,
                generated="generated" in extra,
                default=default_text,
                has_default=default is not None,
                comment=comment or None,
            )  # fmt: skip
        )
    collation = str(table_row[0] or "") if table_row else ""
    table_comment = (table_row[1] or None) if table_row else None
    return TableShape(database, name, columns, primary_key, collation.split("_", 1)[0] or None, table_comment)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)
