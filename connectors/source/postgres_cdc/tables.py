"""Captured tables: columns, Debezium schemas and generated row decoders.

A :class:`Table` is built from a pgoutput Relation message (column names, type OIDs and typmods,
in the order tuples arrive) plus the catalog (nullability, primary key, enum labels, array element
types), so a table change (a new column, a changed type) seen in the stream yields new schemas.

Each table compiles two decoders as straight-line Python (one line per column, names entering the
source only through ``repr``): one reads a pgoutput TupleData straight from the message buffer into
the value dict, the other turns a ``COPY … TO STDOUT`` text line into the same dict. Inlining the
per-type conversion avoids a Python call per column, which is most of the cost of a row.
"""

from __future__ import annotations

import decimal
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sluice.connectors.api import Schema, Type
from sluice.connectors.cdc.envelope import COMMON_SOURCE_FIELDS, adjust_schema_name, envelope_schema, sanitize
from sluice.connectors.cdc.keys import key_builder
from sluice.connectors.source.postgres_cdc.types import UNAVAILABLE, ColumnType

#: An unchanged TOASTed value while it is looked up in the old row (never in an event).
UNCHANGED = object()

SOURCE_SCHEMA = Schema.struct(
    [
        *COMMON_SOURCE_FIELDS,
        ("schema", Schema(Type.STRING)),
        ("table", Schema(Type.STRING)),
        ("txId", Schema(Type.INT64, optional=True)),
        ("lsn", Schema(Type.INT64, optional=True)),
        ("xmin", Schema(Type.INT64, optional=True)),
        ("origin", Schema(Type.STRING, optional=True)),
        ("origin_lsn", Schema(Type.INT64, optional=True)),
    ],
    name="io.debezium.connector.postgresql.Source",
    version=1,
)


@dataclass(frozen=True)
class Column:
    """One column as the stream sends it."""

    name: str
    type_oid: int
    typmod: int
    optional: bool
    ctype: ColumnType
    #: The field schema's ``default`` (see :mod:`.defaults`), in the column's representation.
    default: Any = None

    @property
    def schema(self) -> Schema:
        """The column's field schema: optional unless ``NOT NULL``, with its default."""
        schema = self.ctype.schema.as_optional() if self.optional else self.ctype.schema
        return schema if self.default is None else schema.with_(default=self.default)


@dataclass
class Table:
    """A captured table and everything needed to turn its rows into Debezium records."""

    oid: int
    schema_name: str
    name: str
    columns: list[Column]
    primary_key: list[str]
    replica_identity: str
    topic_prefix: str
    included: list[bool]
    #: ``schema.name.adjustment.mode`` (none, avro, avro_unicode) for the Key/Value/Envelope names.
    name_mode: str = "none"
    #: The event key's columns when ``message.key.columns`` chooses them (``None``: the primary key).
    key_columns: list[str] | None = None
    #: ``unavailable.value.placeholder``: what an unchanged TOASTed value becomes.
    placeholder: bytes = UNAVAILABLE.encode()
    key_schema: Schema | None = field(init=False)
    value_schema: Schema = field(init=False)
    envelope_schema: Schema = field(init=False)
    topic: str = field(init=False)
    decode: Callable[[bytes, int], tuple[dict[str, Any], int]] = field(init=False, repr=False)
    from_copy: Callable[[bytes], dict[str, Any]] = field(init=False, repr=False)
    key_of: Callable[[dict[str, Any]], dict[str, Any] | None] = field(init=False, repr=False)
    #: The primary key of a row (the snapshot chunks and deduplicates by it); ``key_of`` unless
    #: ``message.key.columns`` chose other key columns.
    pk_of: Callable[[dict[str, Any]], dict[str, Any] | None] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        base = sanitize(f"{self.topic_prefix}.{self.schema_name}.{self.name}")
        self.topic = base
        base = adjust_schema_name(base, self.name_mode)
        by_name = {c.name: c for c in self.columns}
        fields: list[tuple[str, Schema]] = []
        for column, keep in zip(self.columns, self.included):
            if keep:
                fields.append((column.name, column.schema))
        self.value_schema = Schema.struct(fields, name=f"{base}.Value", optional=True)
        key = self.key
        if key:
            self.key_schema = Schema.struct([(k, by_name[k].schema) for k in key if k in by_name], name=f"{base}.Key")
        else:
            self.key_schema = None
        self.envelope_schema = envelope_schema(base, self.value_schema, SOURCE_SCHEMA)
        #: The key struct of a row (``None`` for a table without a key), generated code.
        self.key_of = key_builder(key)
        self.pk_of = self.key_of if key == self.primary_key else key_builder(self.primary_key)
        #: What an unchanged TOASTed value of each kept column decodes to.
        self._unavailable = {
            c.name: c.ctype.unavailable_as(self.placeholder) for c, keep in zip(self.columns, self.included) if keep
        }
        self.decode = _tuple_decoder(self.columns, self.included, self._unavailable)
        #: The new row of an update under ``REPLICA IDENTITY FULL``: unchanged values come out as
        #: :data:`UNCHANGED`, for :meth:`fill_unchanged` to take from the old row.
        self.decode_beside_old = _tuple_decoder(
            self.columns, self.included, dict.fromkeys(self._unavailable, UNCHANGED)
        )
        self.from_copy = _copy_decoder(self.columns, self.included)
        self._fallbacks = [
            (c.name, c.ctype.fallback)
            for c, keep in zip(self.columns, self.included)
            if keep and not c.optional and c.name not in self.primary_key
        ]

    @property
    def qualified(self) -> str:
        return f"{self.schema_name}.{self.name}"

    @property
    def key(self) -> list[str]:
        """The event key's columns: ``message.key.columns``' choice, else the primary key."""
        return self.key_columns if self.key_columns is not None else self.primary_key

    @property
    def included_columns(self) -> list[Column]:
        return [c for c, keep in zip(self.columns, self.included) if keep]

    def fill_old_key(self, row: dict[str, Any]) -> dict[str, Any]:
        """An old-key tuple (``REPLICA IDENTITY DEFAULT``) has only the key columns; required other
        columns get Debezium's fallback (zero) values so the record matches its schema."""
        for name, fallback in self._fallbacks:
            if row.get(name) is None:
                row[name] = fallback
        return row

    def fill_unchanged(self, after: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
        """With ``REPLICA IDENTITY FULL`` the old row holds every value: an unchanged TOASTed column
        of the new row takes it, as Debezium fills it, instead of the placeholder."""
        for name, value in after.items():
            if value is UNCHANGED:
                old = before.get(name, UNCHANGED)
                after[name] = self._unavailable[name] if old is UNCHANGED else old
        return after

    def same_shape(self, other: Table) -> bool:
        def shape(t: Table) -> list[tuple[str, int, int, bool, Any]]:
            return [(c.name, c.type_oid, c.typmod, c.optional, c.default) for c in t.columns]

        return (
            shape(self) == shape(other)
            and self.primary_key == other.primary_key
            and self.key_columns == other.key_columns
            and self.included == other.included
            and self.replica_identity == other.replica_identity
        )


class TupleShapeError(Exception):
    """A tuple did not have the column count of its Relation message (the table changed)."""


def _value_source(ctype: ColumnType, x: str, i: int, env: dict[str, Any], prefix: str) -> str:
    """Python source converting the ``bytes`` variable ``x`` to the column's value: the type's inline
    expression (``{x}``; ``{f}`` names its function for a slow path), else a call of its function."""
    env[f"{prefix}{i}"] = ctype.fn
    if ctype.expr is not None:
        return ctype.expr.format(x=x, f=f"{prefix}{i}")
    return f"{prefix}{i}({x})"


def _tuple_decoder(
    columns: Sequence[Column], included: Sequence[bool], unavailable: dict[str, Any]
) -> Callable[[bytes, int], tuple[dict[str, Any], int]]:
    """TupleData → value dict. Each column is one ``struct`` read of its kind byte and length (the
    buffer carries four bytes of padding, see ``ChangeDecoder.handle``, so a trailing null column
    can be read the same way); excluded columns are skipped without conversion."""
    env: dict[str, Any] = {
        "D": decimal.Decimal,
        "H": struct.Struct(">h").unpack_from,
        "KL": struct.Struct(">Bi").unpack_from,
        "TupleShapeError": TupleShapeError,
    }
    lines = [
        "def decode(buf, pos):",
        f"    if H(buf, pos)[0] != {len(columns)}:",
        "        raise TupleShapeError(H(buf, pos)[0])",
        "    pos += 2",
    ]
    names: list[str] = []
    for i, (column, keep) in enumerate(zip(columns, included)):
        lines += [
            "    k, ln = KL(buf, pos)",
            "    if k == 116:",
            "        pos += 5 + ln",
        ]
        if keep:
            env[f"u{i}"] = unavailable[column.name]
            lines += [
                "        v = buf[pos - ln:pos]",
                f"        x{i} = {_value_source(column.ctype, 'v', i, env, 'f')}",
                "    else:",
                "        pos += 1",
                f"        x{i} = None if k == 110 else u{i}",
            ]
            names.append(f"{column.name!r}: x{i}")
        else:
            lines += ["    else:", "        pos += 1"]
    lines.append("    return {" + ", ".join(names) + "}, pos")
    exec(compile("\n".join(lines), "<pgoutput tuple decoder>", "exec"), env)  # noqa: S102 - repr()/index-built source
    return env["decode"]  # type: ignore[no-any-return]


def unescape_copy(x: bytes) -> bytes:
    """Undo COPY text-format escaping (``\\t``, ``\\n``, ``\\\\``, octal ``\\NNN``…)."""
    out = bytearray()
    i, n = 0, len(x)
    while i < n:
        c = x[i]
        if c != 92 or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        d = x[i + 1]
        mapped = _COPY_ESCAPES.get(d)
        if mapped is not None:
            out.append(mapped)
            i += 2
        elif 48 <= d <= 55:
            j = i + 1
            while j < n and j < i + 4 and 48 <= x[j] <= 55:
                j += 1
            out.append(int(x[i + 1 : j], 8) & 0xFF)
            i = j
        elif d == 120:  # \xHH
            j = i + 2
            while j < n and j < i + 4 and x[j : j + 1].isalnum():
                j += 1
            out.append(int(x[i + 2 : j], 16))
            i = j
        else:
            out.append(d)
            i += 2
    return bytes(out)


_COPY_ESCAPES = {98: 8, 102: 12, 110: 10, 114: 13, 116: 9, 118: 11, 92: 92}


def _copy_decoder(columns: Sequence[Column], included: Sequence[bool]) -> Callable[[bytes], dict[str, Any]]:
    """A decoder for one COPY text line holding the included columns, in order.

    A line without a backslash (no NULL, nothing escaped: most lines) converts its fields directly;
    only other lines pay for the per-field NULL and escape handling."""
    env: dict[str, Any] = {"unescape": unescape_copy, "NULL": b"\\N", "D": decimal.Decimal}
    kept = [(i, c) for i, (c, keep) in enumerate(zip(columns, included)) if keep]
    unpack = ", ".join(f"f{i}" for i, _ in kept) + ("," if len(kept) == 1 else "")
    lines = ["def from_copy(line):", f"    {unpack} = line.split(b'\\t')", "    if 92 not in line:"]
    fast = []
    names = []
    for i, column in kept:
        fast.append(f"{column.name!r}: {_value_source(column.ctype, f'f{i}', i, env, 'c')}")
    lines.append("        return {" + ", ".join(fast) + "}")
    for i, column in kept:
        value = _value_source(column.ctype, f"f{i}", i, env, "c")
        lines += [f"    if 92 in f{i}:", f"        f{i} = None if f{i} == NULL else unescape(f{i})"]
        lines.append(f"    x{i} = None if f{i} is None else {value}")
        names.append(f"{column.name!r}: x{i}")
    lines.append("    return {" + ", ".join(names) + "}")
    exec(compile("\n".join(lines), "<copy row decoder>", "exec"), env)  # noqa: S102 - repr()/index-built source
    return env["from_copy"]  # type: ignore[no-any-return]
