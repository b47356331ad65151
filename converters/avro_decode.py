"""Avro schemas and datums → Connect schemas and values.

Any Avro schema reads: enums become strings, ``fixed`` becomes bytes, ``null``-plus-one unions
become optional schemas and other unions ``io.confluent.connect.avro.Union`` structs.
"""

from __future__ import annotations

import base64
import decimal as _decimal
from collections.abc import Callable, Mapping
from typing import Any

from sluice.connectors.api.errors import DataError
from sluice.connectors.api.schema import Date, Decimal, Schema, Time, Timestamp, Type
from sluice.converters.avro_schema import (
    AVRO_NAMESPACE,
    DECIMAL_PRECISION_PARAM,
    DEFAULT_DECIMAL_PRECISION,
    DEFAULT_NAME_RE,
    ENUM_PARAM,
    MAP_ENTRY,
    UNION_NAME,
)

Decoder = Callable[[Any], Any]


class ToConnect:
    """One Avro schema's conversion to Connect, with the named types seen so far."""

    def __init__(self, meta: bool) -> None:
        self.meta = meta
        self.named: dict[str, tuple[Schema, Decoder | None]] = {}
        self.building: set[str] = set()

    @staticmethod
    def full_name(avro: Mapping[str, Any], namespace: str | None) -> tuple[str, str | None]:
        name = avro["name"]
        if "." in name:
            return name, name.rpartition(".")[0]
        ns = avro.get("namespace", namespace) or None
        return (f"{ns}.{name}" if ns else name), ns

    def convert(
        self,
        avro: Any,
        namespace: str | None,
        *,
        optional: bool = False,
        default: Any = None,
        has_default: bool = False,
    ) -> tuple[Schema, Decoder | None]:
        if isinstance(avro, str):
            if avro in self.named or (namespace and f"{namespace}.{avro}" in self.named):
                ref = avro if avro in self.named else f"{namespace}.{avro}"
                if ref in self.building:
                    raise DataError(f"Recursive Avro type {ref!r} has no Connect equivalent")
                schema, named_dec = self.named[ref]
                return (schema.with_(optional=True) if optional else schema), named_dec
            avro = {"type": avro}
        if isinstance(avro, list):
            return self.union(avro, namespace, default, has_default)
        kind = avro.get("type")
        if isinstance(kind, (dict, list)):
            return self.convert(kind, namespace, optional=optional, default=default, has_default=has_default)
        if kind in ("record", "error"):
            return self.record(avro, namespace, optional, default, has_default)
        if kind == "null":
            raise DataError("A standalone Avro null schema has no Connect equivalent")
        name: str | None = None
        version: int | None = None
        params: dict[str, str] = {}
        key_schema: Schema | None = None
        value_schema: Schema | None = None
        dec: Decoder | None = None
        if kind == "array":
            t, key_schema, value_schema, dec = self.array(avro["items"], namespace)
        elif kind == "map":
            value_schema, vdec = self.convert(avro["values"], namespace)
            key_schema = Schema(Type.STRING)
            t = Type.MAP
            if vdec is not None:
                dec = lambda v, f=vdec: {k: None if x is None else f(x) for k, x in v.items()}  # noqa: E731
        elif kind == "enum":
            full, _ = self.full_name(avro, namespace)
            t = Type.STRING
            params[ENUM_PARAM] = full
            params.update((f"{ENUM_PARAM}.{s}", s) for s in avro["symbols"])
            if "connect.name" not in avro:
                name = full
        else:
            t, name, version, params, dec = self.scalar(avro, kind)
        return self.finish(
            avro, t, name, version, params, key_schema, value_schema, optional, default, has_default
        ), dec

    @staticmethod
    def scalar(  # noqa: C901 - one branch per Avro type
        avro: Mapping[str, Any], kind: Any
    ) -> tuple[Type, str | None, int | None, dict[str, str], Decoder | None]:
        """A primitive or logical Avro type: its Connect type, name, version, parameters and decoder."""
        logical = avro.get("logicalType")
        dec: Decoder | None = None
        name: str | None = None
        version: int | None = None
        params: dict[str, str] = {}
        if kind == "boolean":
            t = Type.BOOLEAN
        elif kind == "int":
            connect_type = avro.get("connect.type")
            if logical == "date":
                t, name, version = Type.INT32, Date.LOGICAL_NAME, 1
                dec = Date.from_int
            elif logical == "time-millis":
                t, name, version = Type.INT32, Time.LOGICAL_NAME, 1
                dec = Time.from_int
            elif connect_type in ("int8", "int16"):
                t = Type(connect_type)
            else:
                t = Type.INT32
        elif kind == "long":
            if logical == "timestamp-millis":
                t, name, version = Type.INT64, Timestamp.LOGICAL_NAME, 1
                dec = Timestamp.from_int
            else:
                t = Type.INT64
        elif kind == "float":
            t = Type.FLOAT32
        elif kind == "double":
            t = Type.FLOAT64
        elif kind == "string":
            t = Type.STRING
        elif kind in ("bytes", "fixed"):
            t = Type.BYTES
            if kind == "fixed":
                params["connect.fixed.size"] = str(avro["size"])
            if logical == "decimal":
                scale = avro.get("scale", 0)
                precision = avro.get("precision")
                if not isinstance(scale, int):
                    raise DataError("An Avro decimal's scale must be an integer")
                t, name, version = Type.BYTES, Decimal.LOGICAL_NAME, 1
                params = {Decimal.SCALE_FIELD: str(scale)}
                if isinstance(precision, int) and precision != DEFAULT_DECIMAL_PRECISION:
                    params[DECIMAL_PRECISION_PARAM] = str(precision)

                def decimal_(v: bytes, scale: int = scale) -> _decimal.Decimal:
                    return Decimal.from_bytes(v, scale)

                dec = decimal_
        else:
            raise DataError(f"Unsupported Avro type {kind!r}")
        return t, name, version, params, dec

    def array(self, items: Any, namespace: str | None) -> tuple[Type, Schema | None, Schema, Decoder | None]:
        """An Avro array: a Connect array, or a map when its items are ``MapEntry`` records."""
        dec: Decoder | None = None
        key_schema: Schema | None = None
        entry = self._map_entry(items, namespace)
        if entry is not None:
            (key_schema, kdec), (value_schema, vdec) = entry
            t = Type.MAP

            def entries(v: list[Any]) -> dict[Any, Any]:
                return {
                    (e["key"] if kdec is None else kdec(e["key"])): (e["value"] if vdec is None else vdec(e["value"]))
                    for e in v
                }

            dec = entries
        else:
            value_schema, idec = self.convert(items, namespace)
            t = Type.ARRAY
            if idec is not None:
                dec = lambda v, f=idec: [None if x is None else f(x) for x in v]  # noqa: E731
        return t, key_schema, value_schema, dec

    def _map_entry(
        self, items: Any, namespace: str | None
    ) -> tuple[tuple[Schema, Decoder | None], tuple[Schema, Decoder | None]] | None:
        if not isinstance(items, Mapping) or items.get("type") != "record":
            return None
        full, ns = self.full_name(items, namespace)
        if full != f"{AVRO_NAMESPACE}.{MAP_ENTRY}" and items.get("connect.internal.type") != MAP_ENTRY:
            return None
        fields = {f["name"]: f for f in items.get("fields", ())}
        if set(fields) != {"key", "value"}:
            raise DataError("A map encoded as an array of key-value records needs exactly the fields key and value")
        return self.convert(fields["key"]["type"], ns), self.convert(fields["value"]["type"], ns)

    def finish(
        self,
        avro: Mapping[str, Any],
        t: Type,
        name: str | None,
        version: int | None,
        params: dict[str, str],
        key_schema: Schema | None,
        value_schema: Schema | None,
        optional: bool,
        default: Any,
        has_default: bool,
    ) -> Schema:
        doc = None
        if self.meta:
            doc = avro.get("connect.doc")
            meta_version = avro.get("connect.version")
            if isinstance(meta_version, int):
                version = meta_version
            extra = avro.get("connect.parameters")
            if isinstance(extra, Mapping):
                params.update((str(k), str(v)) for k, v in extra.items())
            connect_name = avro.get("connect.name")
            if isinstance(connect_name, str):
                name = connect_name
        if name is not None and DEFAULT_NAME_RE.fullmatch(name):
            name = None
        schema = Schema(
            t,
            optional=optional,
            name=name,
            version=version,
            doc=doc,
            parameters=params or None,
            key_schema=key_schema,
            value_schema=value_schema,
        )
        if not has_default and self.meta and "connect.default" in avro:
            default, has_default = avro["connect.default"], True
        if has_default and default is not None:
            schema = schema.with_(default=_default_value(schema, default))
        return schema

    def record(
        self, avro: Mapping[str, Any], namespace: str | None, optional: bool, default: Any, has_default: bool
    ) -> tuple[Schema, Decoder | None]:
        full, ns = self.full_name(avro, namespace)
        self.building.add(full)
        built: list[tuple[str, Schema]] = []
        decoders: list[tuple[str, Decoder]] = []
        for f in avro.get("fields", ()):
            fschema, fdec = self.convert(f["type"], ns, default=f.get("default"), has_default="default" in f)
            built.append((f["name"], fschema))
            if fdec is not None:
                decoders.append((f["name"], fdec))
        self.building.discard(full)
        name: str | None = full
        version = None
        params: dict[str, str] = {}
        doc = None
        if avro.get("doc") is not None and self.meta:
            params[AVRO_NAMESPACE + ".record.doc"] = avro["doc"]
        if self.meta:
            connect_name = avro.get("connect.name")
            if isinstance(connect_name, str):
                name = connect_name
            if isinstance(avro.get("connect.version"), int):
                version = avro["connect.version"]
            doc = avro.get("connect.doc")
            if isinstance(avro.get("connect.parameters"), Mapping):
                params.update((str(k), str(v)) for k, v in avro["connect.parameters"].items())
        if name is not None and DEFAULT_NAME_RE.fullmatch(name):
            name = None
        schema = Schema.struct(built, name=name, version=version, doc=doc, parameters=params or None, optional=optional)
        dec: Decoder | None = None
        if decoders:

            def struct(v: dict[str, Any]) -> dict[str, Any]:
                for fname, f in decoders:
                    x = v[fname]
                    if x is not None:
                        v[fname] = f(x)
                return v

            dec = struct
        self.named[full] = (schema.with_(optional=False), dec)
        if has_default and default is not None:
            schema = schema.with_(default=_default_value(schema, default))
        return schema, dec

    def union(
        self, branches: list[Any], namespace: str | None, default: Any, has_default: bool
    ) -> tuple[Schema, Decoder | None]:
        non_null = [b for b in branches if b != "null" and not (isinstance(b, Mapping) and b.get("type") == "null")]
        if len(non_null) == 1 and len(branches) == 2:
            return self.convert(non_null[0], namespace, optional=True, default=default, has_default=has_default)
        members: list[tuple[str, Schema, Decoder | None, str]] = []
        for b in non_null:
            schema, dec = self.convert(b, namespace, optional=True)
            label, kind = _union_label(b, namespace)
            if any(m[0] == label for m in members):
                raise DataError(f"Two branches of an Avro union map to the same Connect field {label!r}")
            members.append((label, schema, dec, kind))
        schema = Schema.struct([(m[0], m[1]) for m in members], name=UNION_NAME, optional=len(non_null) < len(branches))
        by_kind: dict[str, list[tuple[str, Decoder | None]]] = {}
        for label, _, dec, kind in members:
            by_kind.setdefault(kind, []).append((label, dec))
        records = {label: dec for label, _, dec, kind in members if kind == "record"}

        def union(v: Any) -> dict[str, Any]:
            if isinstance(v, tuple):  # (record name, record) when the union holds several records
                full, value = v
                short = full.rpartition(".")[2]
                for label in (full, short):
                    if label in records:
                        f = records[label]
                        return {label: value if f is None else f(value)}
                raise DataError(f"A union value of record type {full!r} matches no branch")
            kind = _python_kind(v)
            for label, dec in by_kind.get(kind, ()):
                return {label: v if dec is None else dec(v)}
            raise DataError(f"A union value of Python type {type(v).__name__} matches no branch")

        return schema, union


def _union_label(avro: Any, namespace: str | None) -> tuple[str, str]:
    """The Connect field name of a union branch and the kind of Python value fastavro reads for it."""
    if isinstance(avro, str) and avro in _KIND_OF:
        return avro, _KIND_OF[avro]
    if isinstance(avro, str):
        return avro.rpartition(".")[2], "record"
    kind = avro.get("type")
    if kind in ("record", "enum", "fixed", "error"):
        label = avro["name"].rpartition(".")[2]
        return label, {"enum": "str", "fixed": "bytes"}.get(kind, "record")
    if isinstance(kind, str) and kind in _KIND_OF:
        return kind, _KIND_OF[kind]
    return str(kind), str(kind)


_KIND_OF = {
    "boolean": "bool",
    "int": "int",
    "long": "int",
    "float": "float",
    "double": "float",
    "string": "str",
    "bytes": "bytes",
    "array": "list",
    "map": "record",
}


def _python_kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, (bytes, bytearray)):
        return "bytes"
    if isinstance(v, list):
        return "list"
    return "record"


def _default_value(schema: Schema, value: Any) -> Any:
    """An Avro default (JSON) as the Connect value of ``schema``."""
    if value is None:
        return None
    name = schema.name
    if name == Decimal.LOGICAL_NAME:
        raw = value.encode("latin-1") if isinstance(value, str) else bytes(value)
        return Decimal.from_bytes(raw, Decimal.scale(schema))
    if name == Date.LOGICAL_NAME:
        return Date.from_int(int(value))
    if name == Time.LOGICAL_NAME:
        return Time.from_int(int(value))
    if name == Timestamp.LOGICAL_NAME:
        return Timestamp.from_int(int(value))
    t = schema.type
    if t is Type.BYTES:
        return value.encode("latin-1") if isinstance(value, str) else base64.b64decode(value)
    if t in (Type.FLOAT32, Type.FLOAT64):
        return float(value)
    if t is Type.ARRAY:
        assert schema.value_schema is not None
        return [_default_value(schema.value_schema, v) for v in value]
    if t is Type.MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        if isinstance(value, list):
            return {
                _default_value(schema.key_schema, e["key"]): _default_value(schema.value_schema, e["value"])
                for e in value
            }
        return {k: _default_value(schema.value_schema, v) for k, v in value.items()}
    if t is Type.STRUCT:
        if schema.name == UNION_NAME:
            first = schema.fields[0]
            return {first.name: _default_value(first.schema, value)}
        return {f.name: _default_value(f.schema, value.get(f.name)) for f in schema.fields}
    return value


_NATIVE_READ_KINDS = {
    "int": "int",
    "long": "int",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}


def native_read_plan(
    avro: Any, *, connect_meta_data: bool = True
) -> list[tuple[str, str, str, bool, Decoder | None]] | None:
    """The field plan of ``sluice_native.AvroRecordReader`` for the writer's schema ``avro`` (JSON
    data), or ``None`` when it is not a record of primitive fields, each maybe in a union with null.

    Each field is ``(name, kind, null, int32, convert)``; ``convert`` turns a logical type's Avro
    value into its Connect value, exactly as :meth:`AvroData.connect_schema`'s decoder does.
    """
    if not isinstance(avro, Mapping) or avro.get("type") != "record":
        return None
    _, namespace = ToConnect.full_name(avro, None)
    plan: list[tuple[str, str, str, bool, Decoder | None]] = []
    for f in avro.get("fields", ()):
        t = f["type"]
        null = "no"
        if isinstance(t, list):
            if len(t) != 2 or "null" not in t or t[0] == t[1]:
                return None
            null = "first" if t[0] == "null" else "second"
            t = t[1] if null == "first" else t[0]
        base = t.get("type") if isinstance(t, Mapping) else t
        kind = _NATIVE_READ_KINDS.get(base) if isinstance(base, str) else None
        if kind is None:
            return None
        _, decode = ToConnect(connect_meta_data).convert(t, namespace)
        plan.append((f["name"], kind, null, base == "int", decode))
    return plan
