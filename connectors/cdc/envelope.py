"""Debezium's change-event envelope, the parts every database's events share.

A change event's value is ``{before, after, source, transaction, op, ts_ms, ts_us, ts_ns}``; only
the ``source`` block differs between databases (PostgreSQL's names an LSN and a transaction id,
MySQL's a binlog file and position), so a source passes its own source schema to
:func:`envelope_schema`. Topic and schema names follow Debezium's rules (:func:`sanitize`,
:func:`adjust_schema_name`).

The native encoders write the same envelope as bytes; :func:`writes_native_json` says whether the
converters the runtime offers write what they write, and :func:`json_frames` renders the constant
parts around a record's payload.
"""

from __future__ import annotations

import re

from sluice.connectors.api import Schema, Serialization, Type, WireFormat
from sluice.converters.json_text import dumps
from sluice.converters.json_write import json_schema

_UNSAFE = re.compile(r"[^A-Za-z0-9._\-]")

#: Debezium's values of ``source.snapshot``: the first row of the snapshot is ``first``, the first
#: of each later table ``first_in_data_collection``, the last of each table but the last
#: ``last_in_data_collection``, the snapshot's very last ``last``, any other ``true``.
SNAPSHOT_MARKERS = "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"

#: The ``source.snapshot`` field every database's source block has.
SNAPSHOT_FIELD = Schema(
    Type.STRING,
    optional=True,
    default="false",
    name="io.debezium.data.Enum",
    version=1,
    parameters={"allowed": SNAPSHOT_MARKERS},
)

#: The fields every Debezium connector's ``source`` block starts with (its ``AbstractSourceInfo``),
#: in order; a database's own fields follow them.
COMMON_SOURCE_FIELDS: tuple[tuple[str, Schema], ...] = (
    ("version", Schema(Type.STRING)),
    ("connector", Schema(Type.STRING)),
    ("name", Schema(Type.STRING)),
    ("ts_ms", Schema(Type.INT64)),
    ("snapshot", SNAPSHOT_FIELD),
    ("db", Schema(Type.STRING)),
    ("sequence", Schema(Type.STRING, optional=True)),
    ("ts_us", Schema(Type.INT64, optional=True)),
    ("ts_ns", Schema(Type.INT64, optional=True)),
)

#: The ``transaction`` block of an event (``provide.transaction.metadata``), null otherwise.
TRANSACTION_BLOCK_SCHEMA = Schema.struct(
    [("id", Schema(Type.STRING)), ("total_order", Schema(Type.INT64)), ("data_collection_order", Schema(Type.INT64))],
    name="event.block",
    version=1,
    optional=True,
)


def envelope_schema(base: str, value_schema: Schema, source_schema: Schema) -> Schema:
    """The ``<base>.Envelope`` schema of a table's change events (version 2, as Debezium's)."""
    return Schema.struct(
        [
            ("before", value_schema),
            ("after", value_schema),
            ("source", source_schema),
            ("transaction", TRANSACTION_BLOCK_SCHEMA),
            ("op", Schema(Type.STRING)),
            ("ts_ms", Schema(Type.INT64, optional=True)),
            ("ts_us", Schema(Type.INT64, optional=True)),
            ("ts_ns", Schema(Type.INT64, optional=True)),
        ],
        name=f"{base}.Envelope",
        version=2,
    )


def sanitize(name: str) -> str:
    """Topic and schema names keep ``[A-Za-z0-9._-]``; anything else becomes ``_`` (as Debezium does)."""
    return _UNSAFE.sub("_", name)


def adjust_schema_name(name: str, mode: str = "none") -> str:
    """A schema name as Debezium's ``schema.name.adjustment.mode`` makes it.

    ``avro`` replaces each character Avro does not allow in a full name (letters, digits, ``_``
    and ``.``, not a digit or ``.`` first) with ``_``; ``avro_unicode`` with ``_uXXXX``, the
    character's UTF-16 code unit(s) in hex; ``none`` keeps the name.
    """
    if mode == "none":
        return name
    out = []
    for i, ch in enumerate(name):
        if ch == "_" or (ch.isascii() and (ch.isalpha() or (i > 0 and (ch.isdigit() or ch == ".")))):
            out.append(ch)
        elif mode == "avro":
            out.append("_")
        else:
            units = ch.encode("utf-16-be")
            out.extend(f"_u{int.from_bytes(units[j : j + 2], 'big'):04x}" for j in range(0, len(units), 2))
    return "".join(out)


# -- the native encoders' side ---------------------------------------------------------------------


def writes_native_json(serialization: Serialization | None) -> bool:
    """Whether the runtime's converters write what the native encoders write: Connect's JSON, with
    or without the schema envelope, decimals as base64, for keys and values."""
    return serialization is not None and all(map(_writes, serialization))


def _writes(wire: WireFormat) -> bool:
    return wire.kind == "json" and wire.decimal_format == "BASE64"


def json_frames(
    serialization: Serialization, key_schema: Schema | None, value_schema: Schema
) -> tuple[bytes, bytes, bytes, bytes]:
    """``(key head, key tail, value head, value tail)``: the bytes JsonConverter writes around a
    payload, ``{"schema":…,"payload":`` and ``}`` with ``schemas.enable``, nothing without."""
    key_head = key_tail = value_head = value_tail = b""
    if serialization.key.schemas and key_schema is not None:
        key_head, key_tail = b'{"schema":' + json_schema(key_schema) + b',"payload":', b"}"
    if serialization.value.schemas:
        value_head, value_tail = b'{"schema":' + json_schema(value_schema) + b',"payload":', b"}"
    return key_head, key_tail, value_head, value_tail


def source_head(version: str, connector: str, name: str) -> bytes:
    """The JSON of a ``source`` block up to its ``ts_ms`` value, the same for every event of a source."""
    return (
        b',"source":{"version":'
        + dumps(version)
        + b',"connector":'
        + dumps(connector)
        + b',"name":'
        + dumps(name)
        + b',"ts_ms":'
    )
