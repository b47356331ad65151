"""Raw JsonConverter envelopes (``schemas.enable=true``) → documents and ids, without decoding.

The Connect user's usual topic: keys and values written by JsonConverter with schemas. Decoding
such a value builds a Python dict of Connect values (``Decimal``, ``datetime``, ``date`` ...) only
for :func:`~.documents.document_bytes` to write it out again. The native reader
(``sluice_native.envelope_documents``, ``native/src/envelope_docs.rs``) reads the envelopes of
a flat struct schema and writes the very same documents: fields in schema order, members the
schema lacks left out, missing and null members as the converter reads them (null, or the
field's default with ``replace.null.with.default``), decimals as the nearest double, timestamps
as ``…+00:00`` text, dates as ``YYYY-MM-DD``, bytes as base64 — the decoded path's output, byte
for byte. Keys of a primitive integer or string schema become ids the same way
(``envelope_ids``): the integer's decimal text, or the string.

Each distinct schema text is planned once, here, from the converter's own reading of it
(:meth:`sluice.converters.connect_arrow.EnvelopeReader.schema`, Connect's ``asConnectSchema``),
and kept. A schema this reader does not take (nested
structs, arrays, maps, a key of another type) and any value it would not read exactly as the
converter does make the whole batch ``None``: the caller then decodes it as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from sluice.connectors.api import Date, Decimal, Schema, Time, Timestamp, Type, WireFormat
from sluice.converters.connect_arrow import EnvelopeReader

try:
    import sluice_native
except ImportError:  # pragma: no cover - without the native module every batch is decoded
    sluice_native = None

log = logging.getLogger(__name__)

_INT_RANGES = {
    Type.INT8: (-(2**7), 2**7 - 1),
    Type.INT16: (-(2**15), 2**15 - 1),
    Type.INT32: (-(2**31), 2**31 - 1),
    Type.INT64: (-(2**63), 2**63 - 1),
}
_PLAIN = {Type.FLOAT32: "float", Type.FLOAT64: "float", Type.BOOLEAN: "boolean", Type.STRING: "string", Type.BYTES: "bytes"}
_LOGICAL = {Date.LOGICAL_NAME: "date", Time.LOGICAL_NAME: "time", Timestamp.LOGICAL_NAME: "timestamp"}
#: Distinct schema texts kept per task (a topic's schema history is short; past this, start over).
MAX_SCHEMAS = 256
#: Schemas met in one batch before it is decoded instead (each costs the native reader a pass).
MAX_SCHEMAS_PER_BATCH = 8

#: A field as the native reader takes it: (name, key, kind, lo, hi, scale, null text).
FieldPlan = tuple[bytes, bytes, str, int, int, int, bytes | None]
#: A key schema as the native reader takes it: (kind, lo, hi, nullable).
KeyPlan = tuple[str, int, int, bool]


def available() -> bool:
    """Whether the native reader is installed (``make setup`` builds it)."""
    return sluice_native is not None and hasattr(sluice_native, "envelope_documents")


class EnvelopeDocuments:
    """Reads a task's raw envelopes into documents and ids, keeping a plan per schema text.

    One per task; the task thread only. ``value_bytes(value)`` writes a field's default as the
    document does (the sink's :func:`~.documents.document_bytes` fallbacks)."""

    def __init__(self, value_bytes: Callable[[Any], bytes]) -> None:
        self._value_bytes = value_bytes
        self._schemas: dict[bool, EnvelopeReader] = {}
        self._documents: dict[tuple[bytes, bool], list[FieldPlan] | None] = {}
        self._ids: dict[tuple[bytes, bool], KeyPlan | None] = {}

    def documents(self, raws: Sequence[bytes | None], wire: WireFormat) -> list[bytes | None] | None:
        """Each envelope's document (``None`` for a tombstone), or ``None``: decode the batch."""
        if wire.kind != "json" or not wire.schemas or wire.decimal_format != "BASE64" or not available():
            return None
        return self._read(sluice_native.envelope_documents, raws, wire, self._documents, self._document_plan)

    def ids(self, raws: Sequence[bytes | None], wire: WireFormat) -> list[str | None] | None:
        """Each key envelope's id (``None`` for a null key), or ``None``: decode the keys."""
        if wire.kind != "json" or not wire.schemas or not available():
            return None
        return self._read(sluice_native.envelope_ids, raws, wire, self._ids, self._key_plan)

    def _read(
        self,
        read: Callable[[list[bytes | None], list[tuple[bytes, Any]]], Any],
        raws: Sequence[bytes | None],
        wire: WireFormat,
        plans: dict[tuple[bytes, bool], Any],
        plan_for: Callable[[Schema, bool], Any],
    ) -> Any:
        replace_null = wire.replace_null_with_default
        known = [(text, plan) for (text, rnd), plan in plans.items() if rnd == replace_null and plan is not None]
        batch = raws if type(raws) is list else list(raws)
        for _ in range(MAX_SCHEMAS_PER_BATCH):
            result = read(batch, known)
            if type(result) is not bytes:
                return result  # the outputs, or None: refused
            if (result, replace_null) in plans:
                return None  # a schema this reader does not take
            if len(plans) >= MAX_SCHEMAS:
                plans.clear()
            schema = self._schema(result, replace_null)
            plan = None if schema is None else plan_for(schema, replace_null)
            plans[(result, replace_null)] = plan
            if plan is None:
                log.debug("Schema %s is read by the decoder", result[:200])
                return None
            known.append((result, plan))
        return None

    def _schema(self, text: bytes, replace_null: bool) -> Schema | None:
        """The Connect schema the converter reads from ``text``, or ``None`` if it refuses it."""
        reader = self._schemas.get(replace_null)
        if reader is None:
            reader = self._schemas[replace_null] = EnvelopeReader(replace_null)
        return reader.schema(text)

    def _document_plan(self, schema: Schema, replace_null: bool) -> list[FieldPlan] | None:
        """The native plan of a value schema: a struct of fields this reader takes, or ``None``."""
        if schema.type is not Type.STRUCT or len({f.name for f in schema.fields}) != len(schema.fields):
            return None
        fields: list[FieldPlan] = []
        for f in schema.fields:
            kind = _field_kind(f.schema)
            if kind is None:
                return None
            if f.schema.default is not None and replace_null:
                try:
                    null: bytes | None = self._value_bytes(f.schema.default)
                except (TypeError, ValueError):
                    return None
            else:
                null = b"null" if f.schema.optional else None
            fields.append((f.name.encode(), orjson.dumps(f.name) + b":", *kind, null))
        return fields

    @staticmethod
    def _key_plan(schema: Schema, replace_null: bool) -> KeyPlan | None:
        """The native plan of a key schema: an integer or a string (what an id is), or ``None``."""
        if schema.name in _LOGICAL or schema.name == Decimal.LOGICAL_NAME:
            return None
        nullable = schema.optional and not (schema.default is not None and replace_null)
        if schema.type in _INT_RANGES:
            lo, hi = _INT_RANGES[schema.type]
            return ("int", lo, hi, nullable)
        if schema.type is Type.STRING:
            return ("string", 0, 0, nullable)
        return None


def _field_kind(schema: Schema) -> tuple[str, int, int, int] | None:
    """``(kind, lo, hi, scale)`` of a field as the converter decodes it (by logical name first, as
    it does), or ``None`` for a field this reader does not take."""
    name = schema.name
    if name == Decimal.LOGICAL_NAME:
        try:
            scale = Decimal.scale(schema)
        except Exception:  # noqa: BLE001 - the decoder reports the bad parameter
            return None
        return ("decimal", 0, 0, scale) if 0 <= scale <= 1000 else None
    if name in _LOGICAL:
        return (_LOGICAL[name], 0, 0, 0)
    if schema.type in _INT_RANGES:
        lo, hi = _INT_RANGES[schema.type]
        return ("int", lo, hi, 0)
    plain = _PLAIN.get(schema.type)
    return None if plain is None else (plain, 0, 0, 0)
