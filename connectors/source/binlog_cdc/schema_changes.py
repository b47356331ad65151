"""Debezium's schema change events: what the binlog source writes to ``<topic.prefix>`` for each DDL.

The key is ``io.debezium.connector.<mysql|mariadb>.SchemaChangeKey`` ``{databaseName}``, the value
``….SchemaChangeValue``: ``source`` (the connector's source block), ``ts_ms`` (when the statement
ran), ``databaseName``, ``schemaName`` (always null on MySQL), ``ddl`` (the statement as the binlog
has it) and ``tableChanges``, one ``io.debezium.connector.schema.Change`` per table the statement
changed (``type`` CREATE/ALTER/DROP, ``id`` as Debezium quotes it, ``"db"."table"``, and
the ``table`` after the change, null for a DROP: its default character set, primary key columns
and columns). Checked field by field against Debezium 3.5's MariaDB connector on the same DDL.
The history topic (:mod:`.history`) holds the same changes in Debezium's JSON document form.
"""

from __future__ import annotations

import time
from functools import cache
from typing import Any

from sluice.connectors.api import Schema, Type
from sluice.connectors.source.binlog_cdc.history import SchemaHistory
from sluice.connectors.source.binlog_cdc.positions import BinlogPosition
from sluice.connectors.source.binlog_cdc.shapes import TableChange, TableShape, column_document, quoted_id
from sluice.connectors.source.binlog_cdc.source_block import VERSION

_STRING = Schema(Type.STRING)
_OPT_STRING = Schema(Type.STRING, optional=True)
_OPT_INT = Schema(Type.INT32, optional=True)
_OPT_BOOL = Schema(Type.BOOLEAN, optional=True)

COLUMN_SCHEMA = Schema.struct(
    [
        ("name", _STRING),
        ("jdbcType", Schema(Type.INT32)),
        ("nativeType", _OPT_INT),
        ("typeName", _STRING),
        ("typeExpression", _OPT_STRING),
        ("charsetName", _OPT_STRING),
        ("length", _OPT_INT),
        ("scale", _OPT_INT),
        ("position", Schema(Type.INT32)),
        ("optional", _OPT_BOOL),
        ("autoIncremented", _OPT_BOOL),
        ("generated", _OPT_BOOL),
        ("comment", _OPT_STRING),
        ("defaultValueExpression", _OPT_STRING),
        ("enumValues", Schema.array(_STRING, optional=True)),
    ],
    name="io.debezium.connector.schema.Column",
    version=1,
)
TABLE_SCHEMA = Schema.struct(
    [
        ("defaultCharsetName", _OPT_STRING),
        ("primaryKeyColumnNames", Schema.array(_STRING, optional=True)),
        ("columns", Schema.array(COLUMN_SCHEMA)),
        ("comment", _OPT_STRING),
    ],
    name="io.debezium.connector.schema.Table",
    version=1,
    optional=True,
)
CHANGE_SCHEMA = Schema.struct(
    [("type", _STRING), ("id", _STRING), ("table", TABLE_SCHEMA)],
    name="io.debezium.connector.schema.Change",
    version=1,
)
_CONNECT_COLUMN_FIELDS = tuple(f.name for f in COLUMN_SCHEMA.fields or ())


@cache
def key_schema(connector: str) -> Schema:
    """``io.debezium.connector.<connector>.SchemaChangeKey``."""
    return Schema.struct(
        [("databaseName", _STRING)], name=f"io.debezium.connector.{connector}.SchemaChangeKey", version=1
    )


@cache
def value_schema(connector: str, source: Schema) -> Schema:
    """``io.debezium.connector.<connector>.SchemaChangeValue`` with the connector's source block."""
    return Schema.struct(
        [
            ("source", source),
            ("ts_ms", Schema(Type.INT64)),
            ("databaseName", _OPT_STRING),
            ("schemaName", _OPT_STRING),
            ("ddl", _OPT_STRING),
            ("tableChanges", Schema.array(CHANGE_SCHEMA)),
        ],
        name=f"io.debezium.connector.{connector}.SchemaChangeValue",
        version=1,
    )


def _connect_table(shape: TableShape) -> dict[str, Any]:
    columns = []
    for i, col in enumerate(shape.columns, 1):
        doc = column_document(col, i)
        doc["enumValues"] = doc["enumValues"] or None  # an empty list is null in the event
        columns.append({name: doc.get(name) for name in _CONNECT_COLUMN_FIELDS})
    return {
        "defaultCharsetName": shape.charset,
        "primaryKeyColumnNames": list(shape.primary_key),
        "columns": columns,
        "comment": shape.comment,
    }


def connect_changes(changes: list[TableChange]) -> list[dict[str, Any]]:
    """Table changes in the event's ``tableChanges`` form."""
    return [
        {"type": c.kind, "id": quoted_id(c.id), "table": _connect_table(c.shape) if c.shape is not None else None}
        for c in changes
    ]


def schema_change_value(
    source: dict[str, Any], ts_ms: int, database: str, ddl: str, changes: list[TableChange]
) -> dict[str, Any]:
    """The value of one schema change event."""
    return {
        "source": source,
        "ts_ms": ts_ms,
        "databaseName": database,
        "schemaName": None,
        "ddl": ddl,
        "tableChanges": connect_changes(changes),
    }


class SchemaChangeEvents:
    """The decoder's DDL hook: the schema history follows the statement and records it; with
    ``include.schema.changes`` the events of the captured tables' changes come back, one per
    database, for the decoder to emit in stream order. Thread: the task thread."""

    def __init__(
        self, history: SchemaHistory, *, connector: str, topic_prefix: str, source: Schema, emit: bool
    ) -> None:
        self.history = history
        self.connector = connector
        self.prefix = topic_prefix
        self.emit = emit
        self.key_schema = key_schema(connector)
        self.value_schema = value_schema(connector, source)

    def __call__(
        self, ddl: str, database: str | None, event: Any, start: int, position: BinlogPosition
    ) -> list[tuple[str, Any, Schema, Any, Schema]]:
        ts = int(event.timestamp)
        now_ms = time.time_ns() // 1_000_000  # Debezium's value and history ts_ms: when it was processed
        recorded = self.history.apply_ddl(ddl, database, position.offset(), now_ms)
        if not self.emit:
            return []
        events = []
        for db, text, changes in recorded:
            source = {
                "version": VERSION,
                "connector": self.connector,
                "name": self.prefix,
                "ts_ms": ts * 1000,
                "snapshot": "false",
                "db": db,
                "sequence": None,
                "ts_us": ts * 1_000_000,
                "ts_ns": ts * 1_000_000_000,
                "table": ",".join(c.id[1] for c in changes) or None,
                "server_id": int(event.packet.server_id),
                "gtid": position.gtid,
                "file": position.file,
                "pos": start,
                "row": 0,
                "thread": None,
                "query": None,
            }
            value = schema_change_value(source, now_ms, db, text, changes)
            events.append((self.prefix, {"databaseName": db}, self.key_schema, value, self.value_schema))
        return events
