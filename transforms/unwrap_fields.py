"""Envelope field references of ExtractNewRecordState's ``add.fields`` and ``add.headers``.

A reference names a field of a Debezium change event: ``op``, ``ts_ms`` (the envelope's own),
``table``, ``lsn`` (the ``source`` struct's), ``id``, ``total_order`` (the ``transaction`` struct's),
or an explicit ``struct.field``; ``field:NEW`` renames it. What Debezium 3.6 does, and so what a
reference here does: a field missing from the named struct is looked up at the top of the envelope
(where another SMT may have put it), a field missing from both adds nothing, values are read
without defaults, and the added schema is the field's schema made optional, without its default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sluice.connectors.api.errors import ConfigError
from sluice.connectors.api.schema import Schema, Type

__all__ = ["FieldReference", "parse_references", "schema_basics"]

_TRANSACTION_FIELDS = frozenset({"id", "total_order", "data_collection_order"})
_ENVELOPE_FIELDS = frozenset({"op", "ts_ms", "ts_us", "ts_ns"})
_UPDATE_DESCRIPTION = "updateDescription"  # MongoDB's envelope


def schema_basics(schema: Schema, *, optional: bool) -> Schema:
    """Connect's ``SchemaUtil.copySchemaBasics``: type, name, version, doc and parameters (and the
    element schemas of arrays and maps), with neither the fields of a struct nor the default."""
    return Schema(
        schema.type,
        optional=optional,
        name=schema.name,
        version=schema.version,
        doc=schema.doc,
        parameters=schema.parameters,
        key_schema=schema.key_schema,
        value_schema=schema.value_schema,
    )


@dataclass(frozen=True)
class FieldReference:
    """One entry of ``add.fields``/``add.headers``: where to read and the name to add it under."""

    struct: str | None
    field: str
    new_name: str

    @classmethod
    def parse(cls, prefix: str, spec: str) -> FieldReference:
        """``[struct.]field[:new]`` with the list's prefix; a bare field's struct follows Debezium."""
        parts = spec.split(":")
        if len(parts) > 2:
            raise ValueError(f"Unexpected field name: {spec}")
        path = parts[0].split(".")
        field = path[0] if len(path) == 1 else path[1]
        struct = _struct_of(field) if len(path) == 1 else path[0]
        if len(parts) == 2:
            return cls(struct, field, prefix + parts[1])
        return cls(struct, field, prefix + (field if len(path) == 1 else f"{struct}_{field}"))

    def schema(self, envelope: Schema) -> Schema | None:
        """The schema the added field or header gets, ``None`` when the envelope has no such field."""
        # An envelope without the hosting struct makes Debezium fail; here the field is just absent.
        hosting = envelope if self.struct is None else envelope.field(self.struct)
        parent = hosting if isinstance(hosting, Schema) else None if hosting is None else hosting.schema
        found = parent.field(self.field) if parent is not None and parent.type is Type.STRUCT else None
        if found is None:
            found = envelope.field(self.field)
        return None if found is None else schema_basics(found.schema, optional=True)

    def value(self, envelope: dict[str, Any], envelope_schema: Schema | None) -> Any:
        """The referenced value (without defaults); ``None`` when its struct is null."""
        parent = envelope if self.struct is None else envelope.get(self.struct)
        if not isinstance(parent, dict):
            return None
        if envelope_schema is None:
            in_parent = self.field in parent
        else:
            hosting = envelope_schema if self.struct is None else envelope_schema.field(self.struct)
            parent_schema = hosting if isinstance(hosting, Schema) else None if hosting is None else hosting.schema
            in_parent = (
                parent_schema is not None
                and parent_schema.type is Type.STRUCT
                and parent_schema.field(self.field) is not None
            )
        return parent.get(self.field) if in_parent else envelope.get(self.field)

    def present(self, envelope: dict[str, Any]) -> bool:
        """Without a schema: whether the event has the field where :meth:`value` looks."""
        parent = envelope if self.struct is None else envelope.get(self.struct)
        return (isinstance(parent, dict) and self.field in parent) or self.field in envelope


def _struct_of(field: str) -> str | None:
    if field in _TRANSACTION_FIELDS:
        return "transaction"
    if field in _ENVELOPE_FIELDS:
        return None
    if field == _UPDATE_DESCRIPTION:
        return _UPDATE_DESCRIPTION
    return "source"


def parse_references(prefix: str, specs: tuple[str, ...], key: str) -> tuple[FieldReference, ...]:
    """Every entry of one list setting; a malformed entry is a :class:`ConfigError` on ``key``."""
    try:
        return tuple(FieldReference.parse(prefix, spec.strip()) for spec in specs if spec.strip())
    except ValueError as exc:
        raise ConfigError(f"Invalid value for configuration {key}: {exc}", key=key) from exc
