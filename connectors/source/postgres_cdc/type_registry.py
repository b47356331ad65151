"""Which column types Debezium maps, resolved through the catalog; hstore and unknown types.

:func:`~connectors.source.postgres_cdc.types.column_type` turns a built-in type OID into its
representation. This module decides what a column's type *is* first: a domain is its base type, an
array its element's, and an extension type (with an OID that differs from database to database) is
recognised by its name, as Debezium's ``TypeRegistry`` does. A type Debezium has no mapping for
(``pg_lsn``, ``tsquery``, ``txid_snapshot``, multiranges, composite types, extension types it does
not know…) is *unknown*: ``include.unknown.datatypes=false`` leaves such a column out of the events
(with one warning), ``true`` captures its text as bytes, per ``binary.handling.mode``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from typing import Any

import orjson
from psycopg import Connection

from sluice.connectors.api import Schema, Type
from sluice.connectors.source.postgres_cdc import types as pg
from sluice.connectors.source.postgres_cdc.types import ColumnType, TypeModes, column_type, semantic

#: Built-in types with a representation of their own in ``column_type``.
MAPPED_OIDS = frozenset({
    pg.BOOL, pg.BYTEA, pg.CHAR, pg.NAME, pg.INT8, pg.INT2, pg.INT4, pg.TEXT, pg.OID, pg.JSON, pg.XML, pg.FLOAT4,
    pg.FLOAT8, pg.MONEY, pg.INET, pg.CIDR, pg.MACADDR, pg.BPCHAR, pg.VARCHAR, pg.DATE, pg.TIME, pg.TIMESTAMP,
    pg.TIMESTAMPTZ, pg.INTERVAL, pg.TIMETZ, pg.NUMERIC, pg.UUID, pg.JSONB, pg.BIT, pg.VARBIT, pg.POINT,
})  # fmt: skip

#: Built-in types Debezium maps that Sluice captures as their text (their exact Debezium shapes
#: are not implemented yet): macaddr8, the six built-in ranges, geometric types but the point, tsvector.
TEXT_OIDS = frozenset({
    774,  # macaddr8
    3904, 3906, 3908, 3910, 3912, 3926,  # int4range, numrange, tsrange, tstzrange, daterange, int8range
    601, 602, 603, 604, 628, 718,  # lseg, path, box, polygon, line, circle
    3614,  # tsvector
})  # fmt: skip

#: Extension types Debezium maps, by name (hstore has a representation of its own).
EXTENSION_TYPES = frozenset({"hstore", "citext", "ltree", "geometry", "geography", "vector", "halfvec", "sparsevec", "isbn"})

HSTORE_JSON_SCHEMA = semantic(Type.STRING, "io.debezium.data.Json")
HSTORE_MAP_SCHEMA = Schema.map(Schema(Type.STRING), Schema(Type.STRING, optional=True))

_HSTORE_PAIR = re.compile(r'"((?:[^"\\]|\\.)*)"\s*=>\s*(?:"((?:[^"\\]|\\.)*)"|NULL)')
_ESCAPED = re.compile(r"\\(.)")


def _java_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as an unsigned 32-bit integer."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


def _hashmap_order(keys: list[str]) -> list[str]:
    """``keys`` in the order a ``java.util.HashMap`` filled with them in this order iterates them,
    which is the order of Debezium's hstore values: by bucket, then by insertion within one."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = _java_hash(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys, key=bucket)


def parse_hstore(x: bytes) -> dict[str, str | None]:
    """hstore's text output (``"a"=>"1", "b"=>NULL``) → the pairs, in Debezium's (HashMap) order."""
    pairs = {
        _ESCAPED.sub(r"\1", m.group(1)): None if m.group(2) is None else _ESCAPED.sub(r"\1", m.group(2))
        for m in _HSTORE_PAIR.finditer(x.decode())
    }
    return {k: pairs[k] for k in _hashmap_order(list(pairs))}


def _hstore_json(x: bytes) -> str:
    return orjson.dumps(parse_hstore(x)).decode()


def hstore_type(modes: TypeModes) -> ColumnType:
    """``hstore.handling.mode``: ``json`` (a JSON object string) or ``map`` (string → optional string)."""
    if modes.hstore_handling_mode == "map":
        return ColumnType(HSTORE_MAP_SCHEMA, parse_hstore, None, {})
    return ColumnType(HSTORE_JSON_SCHEMA, _hstore_json, None, "{}")


def _text_bytes(x: bytes) -> bytes:
    return bytes(x)


_TEXT_AS_STRING: dict[str, Callable[[bytes], str]] = {
    "base64": lambda x: base64.b64encode(x).decode(),
    "base64-url-safe": lambda x: base64.urlsafe_b64encode(x).decode(),
    "hex": lambda x: bytes(x).hex(),
}


def unknown_type(modes: TypeModes) -> ColumnType:
    """A type without a mapping, with ``include.unknown.datatypes=true``: its text as bytes (or as
    the string ``binary.handling.mode`` makes of them)."""
    if modes.binary_handling_mode == "bytes":
        return ColumnType(Schema(Type.BYTES), _text_bytes, None, b"")
    return ColumnType(Schema(Type.STRING), _TEXT_AS_STRING[modes.binary_handling_mode], None, "")


_TYPE_SQL = """
SELECT t.typname, t.typtype::text, t.typelem::int, t.typbasetype::int, t.typtypmod,
       t.typinput = 'array_in'::regproc,
       (SELECT array_agg(e.enumlabel ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = t.oid)
FROM pg_type t WHERE t.oid = %s
"""


class TypeResolver:
    """Resolves column types through the catalog (one query per type that is not a plain built-in).

    :meth:`resolve` returns ``(representation, type name)``; the representation is ``None`` for a
    type Debezium has no mapping for."""

    def __init__(self, conn: Connection[Any], modes: TypeModes) -> None:
        self._conn = conn
        self.modes = modes

    def resolve(self, oid: int, typmod: int, depth: int = 0) -> tuple[ColumnType | None, str]:
        if oid in MAPPED_OIDS or oid in TEXT_OIDS:
            return column_type(oid, typmod, self.modes), str(oid)
        row = self._conn.execute(_TYPE_SQL, (oid,)).fetchone()
        if row is None or depth > 8:
            return None, f"oid {oid}"
        name, typtype, elem, base, base_typmod, is_array, labels = row
        if typtype == "d" and base:  # a domain: its base type
            return self.resolve(base, base_typmod if base_typmod >= 0 else typmod, depth + 1)[0], name
        if typtype == "e":
            return column_type(oid, typmod, self.modes, enum_labels=tuple(labels or ())), name
        if is_array and elem:  # not int2vector/oidvector: their text is no array literal
            element, _ = self.resolve(pg.ARRAY_ELEMENTS.get(oid, elem), typmod, depth + 1)
            if element is None and self.modes.include_unknown_datatypes:
                element = unknown_type(self.modes)
            return (None if element is None else column_type(oid, typmod, self.modes, element=element)), name
        if name == "hstore":
            return hstore_type(self.modes), name
        if name in EXTENSION_TYPES:
            return column_type(pg.TEXT, typmod, self.modes), name
        if self.modes.include_unknown_datatypes:
            return unknown_type(self.modes), name
        return None, name
