"""ExtractNewRecordState: turn a Debezium change event into the row it describes ("unwrap").

A Debezium value is an envelope ``{before, after, source, op, ts_ms, ...}`` whose schema is named
``<prefix>.Envelope``. Most sinks want only the row, so this SMT keeps ``after`` and decides what a
delete becomes. Records that are not envelopes (heartbeats, schema changes) pass through.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.errors import DataError
from sluice.connectors.api.schema import OPTIONAL_STRING_SCHEMA, Schema, Type
from sluice.connectors.api.transform import R
from sluice.transforms._support import BuiltinTransformation, CommaList, SchemaCache, copy_struct_schema

__all__ = ["ExtractNewRecordState"]

DELETED_FIELD = "__deleted"

DeleteTombstoneMode = Literal["drop", "tombstone", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone"]

#: mode → (what a delete event becomes, whether tombstones are kept)
_MODES: dict[str, tuple[str, bool]] = {
    "drop": ("drop", False),
    "tombstone": ("tombstone", True),
    "rewrite": ("rewrite", False),
    "rewrite-with-tombstone": ("rewrite", True),
    "delete-to-tombstone": ("tombstone", False),
}
_LEGACY_DELETE = {"drop": "drop", "none": "tombstone", "rewrite": "rewrite"}


class ExtractNewRecordStateConfig(PluginConfig):
    """Settings of ExtractNewRecordState (Debezium's keys)."""

    delete_tombstone_handling_mode: DeleteTombstoneMode | None = Field(
        None,
        description="drop: drop deletes and tombstones; tombstone (default): deletes become tombstones; "
        "rewrite: deletes become the old row with __deleted=true, tombstones dropped; rewrite-with-tombstone: "
        "rewrite and keep tombstones; delete-to-tombstone: deletes become tombstones, original tombstones dropped.",
    )
    delete_handling_mode: Literal["drop", "rewrite", "none"] | None = Field(
        None, description="Deprecated: drop, rewrite or none (the delete passes as a null value)."
    )
    drop_tombstones: bool | None = Field(
        None, description="Deprecated: drop tombstones (default true with the legacy keys)."
    )
    add_fields: CommaList = Field(
        (), description="Envelope or source fields to add to the row (op, table, source.ts_ms)."
    )
    add_fields_prefix: str = Field("__", description="Prefix of added field names.")
    add_headers: CommaList = Field((), description="Envelope or source fields to add as headers.")
    add_headers_prefix: str = Field("__", description="Prefix of added header names.")


def _is_envelope(schema: Schema | None, value: Any) -> bool:
    if schema is not None:
        return schema.type is Type.STRUCT and (schema.name or "").endswith(".Envelope")
    return isinstance(value, dict) and "op" in value and ("after" in value or "before" in value)


class ExtractNewRecordState(BuiltinTransformation):
    """Replace a Debezium change event by its ``after`` row.

    Deletes and tombstones follow ``delete.tombstone.handling.mode`` (or the legacy
    ``delete.handling.mode`` + ``drop.tombstones``). ``add.fields``/``add.headers`` copy envelope
    fields (``op``, ``ts_ms``), ``source`` fields (``table``, ``lsn``) or dotted paths
    (``source.ts_ms``) into the row as ``__op``, ``__table``, ``__source_ts_ms`` or into headers.
    """

    Config = ExtractNewRecordStateConfig
    aliases: ClassVar[tuple[str, ...]] = ("io.debezium.transforms.ExtractNewRecordState",)

    def _configured(self, config: ExtractNewRecordStateConfig) -> None:
        if config.delete_tombstone_handling_mode is not None:
            self._on_delete, self._keep_tombstones = _MODES[config.delete_tombstone_handling_mode]
        elif config.delete_handling_mode is not None or config.drop_tombstones is not None:
            self._on_delete = _LEGACY_DELETE[config.delete_handling_mode or "drop"]
            self._keep_tombstones = config.drop_tombstones is False
        else:
            self._on_delete, self._keep_tombstones = _MODES["tombstone"]
        self._fields = [(config.add_fields_prefix + f.replace(".", "_"), self._path(f)) for f in config.add_fields]
        self._headers = [(config.add_headers_prefix + f.replace(".", "_"), self._path(f)) for f in config.add_headers]
        self._schemas: SchemaCache[tuple[Schema, Schema], Schema] = SchemaCache()

    @staticmethod
    def _path(spec: str) -> tuple[str, ...]:
        return tuple(spec.split("."))

    def _resolve(self, envelope: dict[str, Any], path: tuple[str, ...]) -> Any:
        # A bare name is an envelope field (op, ts_ms) or else a source field (table, lsn).
        if len(path) == 1 and path[0] not in envelope:
            path = ("source", path[0])
        current: Any = envelope
        for name in path:
            if not isinstance(current, dict):
                return None
            current = current.get(name)
        return current

    def _resolve_schema(self, envelope: Schema, path: tuple[str, ...]) -> Schema:
        if len(path) == 1 and envelope.field(path[0]) is None:
            path = ("source", path[0])
        current = envelope
        for name in path:
            f = current.field(name) if current.type is Type.STRUCT else None
            if f is None:
                raise DataError(
                    f"ExtractNewRecordState: field {'.'.join(path)} is not in the envelope schema {envelope.name}"
                )
            current = f.schema
        return current.as_optional()

    def _row_schema(self, key: tuple[Schema, Schema]) -> Schema:
        envelope, row = key
        fields = [(f.name, f.schema) for f in row.fields]
        fields += [(name, self._resolve_schema(envelope, path)) for name, path in self._fields]
        if self._on_delete == "rewrite":
            fields.append((DELETED_FIELD, OPTIONAL_STRING_SCHEMA))
        return copy_struct_schema(row, fields)

    def apply(self, record: R) -> R | None:
        value, schema = record.value, record.value_schema
        if value is None:
            return record if self._keep_tombstones else None
        if not _is_envelope(schema, value):
            return record
        if not isinstance(value, dict):
            raise DataError(f"ExtractNewRecordState: the envelope value must be a struct, found {type(value).__name__}")
        deleted = value.get("op") == "d"
        if deleted:
            if self._on_delete == "drop":
                return None
            if self._on_delete == "tombstone":
                return record.replace(value=None, value_schema=None)
            row, row_field = value.get("before"), "before"
        else:
            row, row_field = value.get("after"), "after"
        if row is None:
            return record  # a truncate or a message without row state
        if self._headers:
            added: tuple[tuple[str, Any], ...] = tuple((n, self._resolve(value, path)) for n, path in self._headers)
            record = record.replace(headers=(*(record.headers or ()), *added))
        new_row = dict(row)
        for name, path in self._fields:
            new_row[name] = self._resolve(value, path)
        if self._on_delete == "rewrite":
            new_row[DELETED_FIELD] = "true" if deleted else "false"
        new_schema = None
        if schema is not None:
            field = schema.field(row_field)
            if field is None or field.schema.type is not Type.STRUCT:
                raise DataError(f"ExtractNewRecordState: envelope {schema.name} has no struct field {row_field}")
            new_schema = self._schemas.get((schema, field.schema), self._row_schema)
        return record.replace(value=new_row, value_schema=new_schema)
