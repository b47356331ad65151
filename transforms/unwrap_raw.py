"""ExtractNewRecordState on raw values: JsonConverter envelopes of Debezium change events
(``schemas.enable=true``, decimals as base64) rewritten, as bytes, into the rows they describe.

A sink task that reads raw values (``SinkTask.value_format``, e.g. the JDBC sink's fast path) keeps
them through the transform: each record's payload is parsed with orjson and its new value written
as ``{"schema": <row schema>, "payload": <row>}``. The record-by-record path (``unwrap.py``) is the
reference. Each distinct envelope schema text is read once into a :class:`_Plan` holding the texts
of the row schemas made from it (``after`` with the added fields, ``__deleted`` in the rewrite
modes, a delete's ``before``); the rows' field schemas are the envelope's JSON, copied, so the
converter reads every value of the new bytes as it read it in the envelope.

Whatever this module would do differently from the record path makes it give up on the whole
batch (:meth:`RawEnvelopes.rewrite` returns ``None``; the records are then decoded and transformed
one by one): an envelope schema the record path would refuse or read as schemaless, a Decimal
written as a JSON number orjson reads as a double (a fraction, or an integer beyond 64 bits: the
converter reads those exactly), a value that is not an envelope of exactly ``schema`` and
``payload``. Only what is written is read: a malformed ``source`` block that no added field reads
passes unnoticed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

from sluice.transforms.unwrap_fields import FieldReference

__all__ = ["DELETED_FIELD", "RawEnvelopes"]

DELETED_FIELD = "__deleted"

_HEAD = b'{"schema":'
_MID = b',"payload":'
_DECIMAL = "org.apache.kafka.connect.data.Decimal"
#: What Connect's ``SchemaUtil.copySchemaBasics`` keeps besides the type, in asJsonSchema's order.
_BASICS = ("name", "version", "doc", "parameters")
_PRIMITIVES = frozenset({"int8", "int16", "int32", "int64", "float", "double", "boolean", "string", "bytes"})
_DELETED_SCHEMA = {"type": "string", "optional": True, "field": DELETED_FIELD}
_CACHED_PLANS = 64
_loads = orjson.loads
_dumps = orjson.dumps
_JSONDecodeError = orjson.JSONDecodeError

#: What :meth:`RawEnvelopes.rewrite` makes of a record it drops.
_DROP: Any = object()
#: The default of a required field the converter does not read a null as: a null there fails.
_REQUIRED: Any = object()


class _GiveUp(Exception):
    """The batch is left to the record-by-record path."""


class _Added(NamedTuple):
    """One ``add.fields`` entry as read from one envelope schema (``FieldReference.value``)."""

    name: str
    #: The envelope field holding it (``None``: the envelope itself) …
    struct: str | None
    #: … and whether the envelope schema has that field (without it the value is null).
    hosted: bool
    field: str
    #: Read from ``struct`` (else from the envelope's top).
    in_parent: bool
    #: The JSON the converter reads a null as (its schema's default, with replace.null.with.default).
    default: Any
    #: A Decimal: a JSON number orjson reads as a double (the converter exactly) gives up.
    decimal: bool

    def value(self, payload: dict[str, Any]) -> Any:
        parent: Any = payload
        if self.struct is not None:
            parent = payload.get(self.struct) if self.hosted else None
        if type(parent) is not dict:
            return None
        found = parent.get(self.field) if self.in_parent else payload.get(self.field)
        return self.default if found is None else found


class _Row(NamedTuple):
    """How a row of the envelope (``after``, or a rewritten delete's ``before``) becomes a value."""

    #: The new value's bytes up to its payload.
    prefix: bytes
    #: ``(field, default JSON)`` written in place of a null (rewrite modes, replace.null.with.default).
    defaults: tuple[tuple[str, Any], ...]
    #: Whether a row holds no Decimal written as a JSON float (``None``: it has no Decimals).
    exact: Callable[[Any], bool] | None


class _Plan(NamedTuple):
    """What the records of one envelope schema become; a row that is ``None`` makes the record
    path fail, so a record that needs it gives the batch up."""

    envelope: bool
    has_after: bool
    has_before: bool
    changed: _Row | None
    deleted: _Row | None
    #: A delete's bytes in the ``tombstone`` mode: a null payload under after's schema.
    tombstone: bytes | None
    added: tuple[_Added, ...]


_PASS = _Plan(False, False, False, None, None, None, ())


class RawEnvelopes:
    """ExtractNewRecordState's record path, done on JsonConverter envelopes (see the module).

    ``mode`` is ``delete.tombstone.handling.mode``, ``fields`` the parsed ``add.fields``,
    ``replace_null`` the transform's ``replace.null.with.default``. One instance per transform;
    the task thread only.
    """

    def __init__(self, mode: str, fields: tuple[FieldReference, ...], replace_null: bool) -> None:
        self._mode = mode
        self._rewrite = mode in ("rewrite", "rewrite-with-tombstone")
        self._keep_tombstones = mode == "rewrite-with-tombstone"
        self._fields = fields
        self._fill = self._rewrite and replace_null
        self._converter_replaces: bool | None = None
        self._plans: dict[bytes, _Plan] = {}
        self._last_head: bytes | None = None
        self._last_plan = _PASS

    def rewrite(
        self, raws: list[bytes | None], replace_null_with_default: bool
    ) -> tuple[list[bytes | None], list[int] | None] | None:
        """The new raw values and the indices of the records kept (``None``: all), or ``None``
        when the batch must take the record path. ``replace_null_with_default`` is the
        converter's setting (how it reads a null with a default)."""
        if replace_null_with_default is not self._converter_replaces:
            self._converter_replaces = replace_null_with_default
            self._plans.clear()
            self._last_head = None
        out: list[bytes | None] = []
        kept: list[int] = []
        one = self._one
        try:
            for i, raw in enumerate(raws):
                new = one(raw)
                if new is not _DROP:
                    out.append(new)
                    kept.append(i)
        except _GiveUp:
            return None
        return out, None if len(kept) == len(raws) else kept

    def _one(self, raw: bytes | None) -> Any:
        if raw is None:
            return raw if self._keep_tombstones else _DROP
        plan, payload = self._read(raw)
        if payload is None:  # a null value, read as a tombstone
            return raw if self._keep_tombstones else _DROP
        if not plan.envelope:
            return raw
        if type(payload) is not dict:
            raise _GiveUp
        after = payload.get("after") if plan.has_after else None
        if after is not None:
            return self._row(plan.changed, after, payload, plan.added, "false")
        before = payload.get("before") if plan.has_before else None
        if before is None:
            return _DROP  # a truncate
        mode = self._mode
        if mode == "drop":
            return _DROP
        if mode == "delete-to-tombstone":
            return None
        if mode == "tombstone":
            if plan.tombstone is None:
                raise _GiveUp
            return plan.tombstone
        return self._row(plan.deleted, before, payload, plan.added, "true")

    def _row(
        self, plan: _Row | None, row: Any, payload: dict[str, Any], added: tuple[_Added, ...], deleted: str
    ) -> bytes:
        if plan is None or type(row) is not dict or (plan.exact is not None and not plan.exact(row)):
            raise _GiveUp
        if self._rewrite:
            row = dict(row)
            for name, default in plan.defaults:
                if row.get(name) is None:
                    if default is _REQUIRED:
                        raise _GiveUp  # the converter refuses the null
                    row[name] = default
            row[DELETED_FIELD] = deleted
        elif added:
            row = dict(row)
        for field in added:
            value = row[field.name] = field.value(payload)
            if field.decimal and type(value) is float:
                raise _GiveUp
        return plan.prefix + _dumps(row) + b"}"

    # -- reading envelopes ------------------------------------------------------------------------

    def _read(self, raw: bytes) -> tuple[_Plan, Any]:
        """The plan of ``raw``'s schema and its parsed payload. Most values begin with the bytes of
        the one before up to its payload, a schema text already planned: only the payload is parsed."""
        if type(raw) is not bytes:
            raw = bytes(raw)
        head = self._last_head
        if head is not None and raw.startswith(head) and raw.endswith(b"}"):
            try:
                return self._last_plan, _loads(raw[len(head) : -1])
            except _JSONDecodeError:
                pass  # not one value up to the closing brace: read the whole
        if raw.startswith(_HEAD) and raw.endswith(b"}"):
            cut = raw.find(_MID, len(_HEAD))
            plan = self._plans.get(raw[len(_HEAD) : cut]) if cut > 0 else None
            if plan is not None:
                try:
                    payload = _loads(raw[cut + len(_MID) : -1])
                except _JSONDecodeError:
                    pass
                else:
                    self._last_head, self._last_plan = raw[: cut + len(_MID)], plan
                    return plan, payload
        return self._read_whole(raw)

    def _read_whole(self, raw: bytes) -> tuple[_Plan, Any]:
        """:meth:`_read` parsing everything; the schema's text is remembered when it is the one
        JSON value between the envelope's opening and ``,"payload":`` (a complete JSON value is
        never a prefix of another one, so that text is the schema's)."""
        try:
            doc = _loads(raw)
        except _JSONDecodeError:
            raise _GiveUp from None
        if type(doc) is not dict or len(doc) != 2 or "schema" not in doc or "payload" not in doc:
            raise _GiveUp
        plan = self._plan(doc["schema"])
        cut = raw.find(_MID, len(_HEAD)) if raw.startswith(_HEAD) else -1
        if cut > 0:
            text = raw[len(_HEAD) : cut]
            try:
                _loads(text)
            except _JSONDecodeError:
                return plan, doc["payload"]
            if len(self._plans) >= _CACHED_PLANS:
                del self._plans[next(iter(self._plans))]
            self._plans[text] = plan
            self._last_head, self._last_plan = raw[: cut + len(_MID)], plan
        return plan, doc["payload"]

    # -- plans ------------------------------------------------------------------------------------

    def _plan(self, schema: Any) -> _Plan:
        """What the records of an envelope schema (its parsed JSON) become."""
        if type(schema) is not dict or schema.get("default") is not None or _float_defaults(schema):
            raise _GiveUp  # schemaless, or read otherwise than the rows copied from it would be
        name = schema.get("name")
        if schema.get("type") != "struct" or not isinstance(name, str) or not name.endswith(".Envelope"):
            return _PASS
        fields = _fields(schema)
        after, before = fields.get("after"), fields.get("before")
        if any(row is not None and row.get("default") is not None for row in (after, before)):
            raise _GiveUp  # a null row would read as its default
        found = self._added(fields)
        added, extras = found if found is not None else ((), None)
        deleted = [_DELETED_SCHEMA] if self._rewrite else []
        tombstone = None
        if after is not None and after.get("type") == "struct" and after.get("optional") is True:
            tombstone = _HEAD + _dumps({k: v for k, v in after.items() if k != "field"}) + _MID + b"null}"
        return _Plan(
            envelope=True,
            has_after=after is not None,
            has_before=before is not None,
            changed=None if extras is None else self._row_plan(after, [*deleted, *extras]),
            deleted=None if extras is None or not self._rewrite else self._row_plan(before, [*deleted, *extras]),
            tombstone=tombstone,
            added=added,
        )

    def _added(self, envelope: dict[str, dict[str, Any]]) -> tuple[tuple[_Added, ...], list[dict[str, Any]]] | None:
        """The ``add.fields`` an envelope schema has and their field schemas (``FieldReference.schema``:
        the field's basics, made optional); ``None`` when one is not a primitive (left to the record path)."""
        added: list[_Added] = []
        schemas: list[dict[str, Any]] = []
        for ref in self._fields:
            hosting = envelope if ref.struct is None else envelope.get(ref.struct)
            if ref.struct is not None and hosting is not None:
                if hosting.get("default") is not None:
                    return None  # a null block would read as its default
                hosting = _fields(hosting) if hosting.get("type") == "struct" else None
            found = hosting.get(ref.field) if hosting is not None else None
            in_parent = found is not None
            if found is None:
                found = envelope.get(ref.field)
                if found is None:
                    continue
            if found.get("type") not in _PRIMITIVES:
                return None
            schema: dict[str, Any] = {"type": found["type"], "optional": True}
            schema.update((k, found[k]) for k in _BASICS if found.get(k) is not None)
            schema["field"] = ref.new_name
            schemas.append(schema)
            default = found.get("default") if self._converter_replaces else None
            hosted = ref.struct is None or ref.struct in envelope
            decimal = found.get("name") == _DECIMAL
            added.append(_Added(ref.new_name, ref.struct, hosted, ref.field, in_parent, default, decimal))
        return tuple(added), schemas

    def _row_plan(self, row: dict[str, Any] | None, extras: list[dict[str, Any]]) -> _Row | None:
        """A row's value schema as the record path builds it (``_required_struct``: the row's basics,
        required, its fields then ``extras``); ``None`` where the record path fails."""
        if row is None or row.get("type") != "struct":
            return None
        fields = list(_fields(row).values())
        names = [f["field"] for f in (*fields, *extras)]
        if len(set(names)) != len(names):
            return None  # a duplicate field name
        schema: dict[str, Any] = {"type": "struct", "fields": [*fields, *extras], "optional": False}
        schema.update((k, row[k]) for k in _BASICS if row.get(k) is not None)
        defaults = tuple(
            (f["field"], f["default"] if f.get("optional") is True or self._converter_replaces else _REQUIRED)
            for f in fields
            if self._fill and f.get("default") is not None
        )
        return _Row(_HEAD + _dumps(schema) + _MID, defaults, _float_check(row))


def _fields(struct: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A struct schema's fields by name; anything else than a list of named field schemas gives up."""
    fields = struct.get("fields")
    if type(fields) is not list or not all(type(f) is dict and type(f.get("field")) is str for f in fields):
        raise _GiveUp
    return {f["field"]: f for f in fields}


def _float_defaults(schema: Any) -> bool:
    """Whether a schema has a Decimal default written as a JSON float (read exactly by the converter)."""
    if type(schema) is not dict:
        return False
    if schema.get("name") == _DECIMAL and type(schema.get("default")) is float:
        return True
    nested = [*(schema.get("fields") or ()), schema.get("items"), schema.get("keys"), schema.get("values")]
    return any(_float_defaults(s) for s in nested)


def _not_float(value: Any) -> bool:
    return type(value) is not float


def _never(value: Any) -> bool:
    return False


def _float_check(schema: Any) -> Callable[[Any], bool] | None:
    """For a schema that holds Decimals, a check that a value holds none written as a JSON float
    (orjson reads those as doubles, the converter exactly); ``None`` for a schema without."""
    if type(schema) is not dict:
        return None
    if schema.get("name") == _DECIMAL:
        return _not_float
    kind = schema.get("type")
    if kind == "struct":
        fields = schema.get("fields") or ()
        checks = [(f.get("field"), c) for f in fields if type(f) is dict and (c := _float_check(f)) is not None]
        if not checks:
            return None
        decimals = tuple(name for name, check in checks if check is _not_float)  # a row's own fields
        nested = tuple((name, check) for name, check in checks if check is not _not_float)

        def struct(value: Any) -> bool:
            if type(value) is not dict:
                return True
            for name in decimals:
                if type(value.get(name)) is float:
                    return False
            return all(check(value.get(name)) for name, check in nested)

        return struct
    if kind == "array":
        items = _float_check(schema.get("items"))
        if items is None:
            return None
        return lambda value: type(value) is not list or all(map(items, value))
    if kind == "map" and (_float_check(schema.get("keys")) or _float_check(schema.get("values"))):
        return _never  # maps of Decimals are left to the record path
    return None
