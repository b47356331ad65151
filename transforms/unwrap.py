"""ExtractNewRecordState: turn a Debezium change event into the row it describes ("unwrap").

A Debezium value is an envelope ``{before, after, source, op, ts_ms, ...}`` whose schema is named
``<prefix>.Envelope``. Most sinks want only the row, so this SMT keeps ``after`` and decides what a
delete becomes. Records that are not envelopes (heartbeats, schema changes) pass through.

The reference is Debezium 3.6's SMT as it runs in Kafka Connect, checked record by record and byte
by byte (``tests/compat/UnwrapVectors.java``): every key it reads is honoured with its semantics,
including the quirks (an unwrapped row's schema is required even though ``after``'s is optional;
the default ``tombstone`` mode turns a delete into a null value that keeps ``after``'s schema and
drops the original tombstone; a truncate event is dropped). Keys Debezium no longer reads but
Connect still accepts (``operation.header``, ``delete.handling.mode``, ``drop.tombstones``) are
accepted and, as there, have no effect; a warning names what replaced them. Sluice also unwraps a
schemaless envelope (a JSON map), which Debezium passes through.

On a sink, batches of JsonConverter envelopes (with schemas) are rewritten as bytes
(:mod:`.unwrap_raw`), so a sink task that reads raw values keeps doing so (``keeps_raw_values``),
unless headers, routing or dropped fields are asked for.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, ClassVar, Literal

from pydantic import Field

from sluice.connectors.api.config import PluginConfig
from sluice.connectors.api.errors import DataError
from sluice.connectors.api.records import SinkRecordBatch, header_data
from sluice.connectors.api.schema import OPTIONAL_STRING_SCHEMA, STRING_SCHEMA, Schema, SchemaAndValue, Type
from sluice.connectors.api.transform import R
from sluice.connectors.api.wire import WireFormat
from sluice.transforms._support import BuiltinTransformation, CommaList, RawRewrittenBatch, SchemaCache, fill_default
from sluice.transforms.unwrap_fields import FieldReference, parse_references, schema_basics
from sluice.transforms.unwrap_raw import DELETED_FIELD, RawEnvelopes

__all__ = ["ExtractNewRecordState"]

log = logging.getLogger(__name__)

DeleteTombstoneMode = Literal["drop", "tombstone", "rewrite", "rewrite-with-tombstone", "delete-to-tombstone"]

#: Keys of Debezium 1.x/2.x that Debezium 3.6 ignores (Connect passes them on without complaint).
_IGNORED = {
    "operation_header": ("operation.header", "add.headers=op"),
    "delete_handling_mode": ("delete.handling.mode", "delete.tombstone.handling.mode"),
    "drop_tombstones": ("drop.tombstones", "delete.tombstone.handling.mode"),
}


class ExtractNewRecordStateConfig(PluginConfig):
    """Settings of ExtractNewRecordState: Debezium 3.6's keys."""

    delete_tombstone_handling_mode: DeleteTombstoneMode = Field(
        "tombstone",
        description="drop: drop deletes and tombstones; tombstone (default): a delete becomes a null value, "
        "tombstones are dropped; rewrite: a delete becomes the old row with __deleted=true (every row gets "
        "__deleted), tombstones dropped; rewrite-with-tombstone: rewrite and keep tombstones; "
        "delete-to-tombstone: a delete becomes a tombstone, original tombstones dropped.",
    )
    route_by_field: str = Field("", description="Row field whose value becomes the topic (before's for deletes).")
    add_fields: CommaList = Field(
        (), description="Envelope, source or transaction fields to add to the row (op, table, source.ts_ms, op:OP)."
    )
    add_fields_prefix: str = Field("__", description="Prefix of added field names.")
    add_headers: CommaList = Field((), description="Envelope, source or transaction fields to add as headers.")
    add_headers_prefix: str = Field("__", description="Prefix of added header names.")
    replace_null_with_default: bool = Field(
        True, description="In rewrite modes, a null field with a default is written as the default."
    )
    drop_fields_header_name: str | None = Field(
        None, description="Header holding a list of field names to remove from the row."
    )
    drop_fields_from_key: bool = Field(False, description="Remove those fields from the key too.")
    drop_fields_keep_schema_compatible: bool = Field(
        True, description="Remove only optional fields (true) or every listed field (false)."
    )
    operation_header: str | None = Field(None, description="Ignored, as by Debezium 3.x: use add.headers=op.")
    delete_handling_mode: str | None = Field(
        None, description="Ignored, as by Debezium 3.x: use delete.tombstone.handling.mode."
    )
    drop_tombstones: str | None = Field(
        None, description="Ignored, as by Debezium 3.x: use delete.tombstone.handling.mode."
    )


def _is_envelope(schema: Schema | None, value: Any) -> bool:
    if schema is not None:
        return schema.type is Type.STRUCT and (schema.name or "").endswith(".Envelope") and isinstance(value, dict)
    return isinstance(value, dict) and "op" in value and ("after" in value or "before" in value)


def _row_field(envelope: Schema, name: str) -> Schema:
    found = envelope.field(name)
    if found is None or found.schema.type is not Type.STRUCT:
        raise DataError(f"ExtractNewRecordState: envelope {envelope.name} has no struct field {name}")
    return found.schema


def _required_struct(base: Schema, fields: list[tuple[str, Schema]]) -> Schema:
    """What Connect's SMTs build a changed struct schema from: the basics, required, and ``fields``."""
    basics = schema_basics(base, optional=False)
    return Schema.struct(fields, name=basics.name, version=basics.version, doc=basics.doc, parameters=basics.parameters)


class ExtractNewRecordState(BuiltinTransformation):
    """Replace a Debezium change event by its ``after`` row, as Debezium 3.6's SMT does.

    Deletes and tombstones follow ``delete.tombstone.handling.mode``. ``add.fields``/``add.headers``
    copy envelope fields (``op``, ``ts_ms``), ``source`` fields (``table``, ``lsn``), ``transaction``
    fields (``id``) or ``struct.field`` paths into the row or headers as ``__op``, ``__source_ts_ms``
    (``field:NAME`` picks the name); a header carries the field's schema, made optional, for the
    header converter. ``route.by.field`` sets the topic from the row; ``drop.fields.header.name``
    removes the fields a header lists.
    """

    Config = ExtractNewRecordStateConfig
    aliases: ClassVar[tuple[str, ...]] = ("io.debezium.transforms.ExtractNewRecordState",)

    def _configured(self, config: ExtractNewRecordStateConfig) -> None:
        self._mode = config.delete_tombstone_handling_mode
        self._rewrite = self._mode in ("rewrite", "rewrite-with-tombstone")
        self._fields = parse_references(config.add_fields_prefix, config.add_fields, "add.fields")
        self._headers = parse_references(config.add_headers_prefix, config.add_headers, "add.headers")
        self._route = config.route_by_field or None
        self._replace_null = config.replace_null_with_default
        self._drop_header = config.drop_fields_header_name or None
        self._drop_from_key = config.drop_fields_from_key
        self._drop_compatible = config.drop_fields_keep_schema_compatible
        self._added: SchemaCache[tuple[Schema, Schema], tuple[Schema, tuple[FieldReference, ...]]] = SchemaCache()
        self._derived: SchemaCache[tuple[Schema, tuple[str, ...]], Schema] = SchemaCache()
        # Raw envelopes are rewritten as bytes unless the record needs more than a new value.
        plain = not (self._headers or self._route or self._drop_header)
        self._raw = RawEnvelopes(self._mode, self._fields, self._replace_null) if plain else None
        ignored = {
            "operation_header": config.operation_header,
            "delete_handling_mode": config.delete_handling_mode,
            "drop_tombstones": config.drop_tombstones,
        }
        for attr, value in ignored.items():
            if value is not None:
                key, instead = _IGNORED[attr]
                log.warning(
                    "ExtractNewRecordState: %s=%s has no effect (Debezium 3 ignores it too); use %s",
                    key,
                    value,
                    instead,
                )

    def keeps_raw_values(self, wire: WireFormat) -> bool:
        """JsonConverter envelopes (``schemas.enable=true``, decimals as base64) stay raw, rewritten
        as the unwrapped rows' envelopes, unless ``add.headers``, ``route.by.field`` or
        ``drop.fields.header.name`` is set."""
        return self._raw is not None and wire.kind == "json" and wire.schemas and wire.decimal_format == "BASE64"

    def apply_columns(self, batch: SinkRecordBatch) -> SinkRecordBatch | None:
        """A batch with raw envelopes as one with the rows' raw values (:mod:`.unwrap_raw`); ``None``
        for a decoded batch, or one the record path must take."""
        raws, wire = batch.raw_values, batch.raw_format
        if self._raw is None or raws is None or wire is None or not self.keeps_raw_values(wire):
            return None
        rewritten = self._raw.rewrite(raws, wire.replace_null_with_default)
        if rewritten is None:
            return None
        values, kept = rewritten
        return RawRewrittenBatch(batch, values, kept, partial(self._decoded, batch, kept))

    def _decoded(self, batch: SinkRecordBatch, kept: list[int] | None) -> tuple[list[Schema | None], list[Any]]:
        """The values of a rewritten batch, read only if a task reads them: its records transformed one by one."""
        records = batch.records()
        out = [self.apply(records[i]) for i in (range(len(records)) if kept is None else kept)]
        if any(r is None for r in out):  # the raw path keeps what the record path keeps: never
            raise DataError("ExtractNewRecordState: the raw rewrite kept a record the record path drops")
        return [r.value_schema for r in out], [r.value for r in out]  # type: ignore[union-attr]

    def apply(self, record: R) -> R | None:
        value: Any = record.value
        schema: Schema | None = record.value_schema
        if value is None:
            return self._tombstone(record)
        if not _is_envelope(schema, value):
            return record
        if self._headers:
            headers: tuple[tuple[str, Any], ...] = (*(record.headers or ()), *self._header_values(value, schema))
            record = record.replace(headers=headers)
        after, before = value.get("after"), value.get("before")
        if after is None and before is None:
            return None  # a truncate: Debezium drops it
        if after is None:
            return self._deleted(record, value, schema, before)
        return self._changed(record, value, schema, after)

    def _tombstone(self, record: R) -> R | None:
        if self._mode != "rewrite-with-tombstone":
            return None
        # Debezium marks a kept tombstone with the op header only, as a required string "d".
        added: tuple[tuple[str, Any], ...] = tuple(
            (ref.new_name, SchemaAndValue(STRING_SCHEMA, "d")) for ref in self._headers if ref.field == "op"
        )
        return record.replace(headers=(*(record.headers or ()), *added)) if added else record

    def _header_values(self, envelope: dict[str, Any], schema: Schema | None) -> list[tuple[str, Any]]:
        if schema is None:
            return [(ref.new_name, ref.value(envelope, None)) for ref in self._headers if ref.present(envelope)]
        out: list[tuple[str, Any]] = []
        for ref in self._headers:
            header_schema = ref.schema(schema)
            if header_schema is not None:
                out.append((ref.new_name, SchemaAndValue(header_schema, ref.value(envelope, schema))))
        return out

    def _changed(self, record: R, envelope: dict[str, Any], schema: Schema | None, after: Any) -> R:
        row_schema = _row_field(schema, "after") if schema is not None else None
        record = self._row(record, after, row_schema, "false")
        if self._route:
            record = self._routed(record, record.value)
        record = self._add_fields(record, envelope, schema)
        return self._drop_fields(record) if self._drop_header else record

    def _deleted(self, record: R, envelope: dict[str, Any], schema: Schema | None, before: Any) -> R | None:
        if self._mode == "drop":
            return None
        if self._mode == "delete-to-tombstone":
            result = record.replace(value=None, value_schema=None)
        elif self._mode == "tombstone":
            # Not a Kafka tombstone: the value is null but keeps after's schema, as in Debezium.
            result = record.replace(value=None, value_schema=_row_field(schema, "after") if schema else None)
        else:
            result = self._row(record, before, _row_field(schema, "before") if schema else None, "true")
        if self._route:
            result = self._routed(result, before)
        if self._drop_header:
            result = self._drop_fields(result)
        return self._add_fields(result, envelope, schema) if result.value is not None else result

    def _row(self, record: R, row: Any, row_schema: Schema | None, deleted: str) -> R:
        if not isinstance(row, dict):
            raise DataError(f"ExtractNewRecordState: the row must be a struct, found {type(row).__name__}")
        if not self._rewrite:
            return record.replace(value=row, value_schema=row_schema)
        if row_schema is not None:
            row = fill_default(row, row_schema) if self._replace_null else row
            row_schema = self._derived.get((row_schema, (DELETED_FIELD,)), self._with_deleted)
        return record.replace(value={**row, DELETED_FIELD: deleted}, value_schema=row_schema)

    @staticmethod
    def _with_deleted(key: tuple[Schema, tuple[str, ...]]) -> Schema:
        row = key[0]
        return _required_struct(
            row, [*((f.name, f.schema) for f in row.fields), (DELETED_FIELD, OPTIONAL_STRING_SCHEMA)]
        )

    def _routed(self, record: R, row: dict[str, Any]) -> R:
        route = self._route or ""
        if route not in row and record.value_schema is not None:
            raise DataError(f"ExtractNewRecordState: {route} is not a valid field name (route.by.field)")
        topic = row.get(route)
        if topic is not None and not isinstance(topic, str):
            raise DataError(f"ExtractNewRecordState: field {route} must be a string to route by, found {topic!r}")
        return record.replace(topic=topic) if topic and topic.strip() else record

    def _add_fields(self, record: R, envelope: dict[str, Any], schema: Schema | None) -> R:
        row = record.value
        if not isinstance(row, dict):
            raise DataError(f"ExtractNewRecordState: source field insertion needs a struct, found {type(row).__name__}")
        if schema is None:
            added = {ref.new_name: ref.value(envelope, None) for ref in self._fields if ref.present(envelope)}
            return record.replace(value={**row, **added}) if added else record
        # With a schema the row is always rebuilt (and its schema made required), as Debezium does.
        row_schema = record.value_schema
        if row_schema is None or row_schema.type is not Type.STRUCT:
            raise DataError("ExtractNewRecordState: source field insertion needs a struct schema")
        new_schema, refs = self._added.get((row_schema, schema), self._with_added)
        new_row = {f.name: row.get(f.name) for f in row_schema.fields}
        for ref in refs:
            new_row[ref.new_name] = ref.value(envelope, schema)
        return record.replace(value=new_row, value_schema=new_schema)

    def _with_added(self, key: tuple[Schema, Schema]) -> tuple[Schema, tuple[FieldReference, ...]]:
        row, envelope = key
        fields = [(f.name, f.schema) for f in row.fields]
        refs: list[FieldReference] = []
        for ref in self._fields:
            field_schema = ref.schema(envelope)
            if field_schema is not None:
                fields.append((ref.new_name, field_schema))
                refs.append(ref)
        return _required_struct(row, fields), tuple(refs)

    def _drop_fields(self, record: R) -> R:
        listed = next((header_data(v) for k, v in record.headers or () if k == self._drop_header), None)
        if not listed:
            return record
        if not isinstance(listed, (list, tuple)):
            raise DataError(f"ExtractNewRecordState: header {self._drop_header} must hold a list of field names")
        names = frozenset(listed)
        if self._drop_from_key and record.key is not None:
            key, key_schema = self._without(record.key, record.key_schema, names)
            record = record.replace(key=key, key_schema=key_schema)
        value, value_schema = self._without(record.value, record.value_schema, names)
        return record.replace(value=value, value_schema=value_schema)

    def _without(self, data: Any, schema: Schema | None, names: frozenset[str]) -> tuple[Any, Schema | None]:
        """``data`` without the ``names`` fields (only optional ones unless told otherwise), as
        Connect's ReplaceField ``exclude`` leaves it: remaining nulls read as their defaults."""
        if not isinstance(data, dict):
            return data, schema
        if schema is None or schema.type is not Type.STRUCT:
            kept = {k: v for k, v in data.items() if k not in names}
            return (kept, schema) if len(kept) != len(data) else (data, schema)
        drop = tuple(
            f.name for f in schema.fields if f.name in names and (f.schema.optional or not self._drop_compatible)
        )
        if not drop:
            return data, schema
        new_schema = self._derived.get((schema, drop), self._without_schema)
        return fill_default({f.name: data.get(f.name) for f in new_schema.fields}, new_schema), new_schema

    @staticmethod
    def _without_schema(key: tuple[Schema, tuple[str, ...]]) -> Schema:
        schema, drop = key
        return _required_struct(schema, [(f.name, f.schema) for f in schema.fields if f.name not in drop])
