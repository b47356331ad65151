"""Connect schemas → Avro schemas, and the naming conventions both directions share.

The mapping is Confluent's ``AvroData``'s (see :mod:`sluice.converters.avro_data` for the rules);
this module holds the names and parameters both directions agree on, and the writer side of the
schema mapping. Values are converted in :mod:`sluice.converters.avro_encode` and
:mod:`sluice.converters.avro_decode`.
"""

from __future__ import annotations

import re
from typing import Any

from sluice.connectors.api.errors import DataError
from sluice.connectors.api.schema import Date, Decimal, Schema, Time, Timestamp, Type

AVRO_NAMESPACE = "io.confluent.connect.avro"
DEFAULT_SCHEMA_NAME = "ConnectDefault"
UNION_NAME = AVRO_NAMESPACE + ".Union"
ENUM_PARAM = AVRO_NAMESPACE + ".Enum"
MAP_ENTRY = "MapEntry"
DECIMAL_PRECISION_PARAM = "connect.decimal.precision"
DEFAULT_DECIMAL_PRECISION = 64

DEFAULT_NAME_RE = re.compile(re.escape(AVRO_NAMESPACE) + r"\." + DEFAULT_SCHEMA_NAME + r"\d*")
_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PRIMITIVE_AVRO = {
    Type.INT8: "int",
    Type.INT16: "int",
    Type.INT32: "int",
    Type.INT64: "long",
    Type.FLOAT32: "float",
    Type.FLOAT64: "double",
    Type.BOOLEAN: "boolean",
    Type.STRING: "string",
    Type.BYTES: "bytes",
}
INT_LIMITS = {
    Type.INT8: (-(2**7), 2**7 - 1),
    Type.INT16: (-(2**15), 2**15 - 1),
    Type.INT32: (-(2**31), 2**31 - 1),
    Type.INT64: (-(2**63), 2**63 - 1),
}
LOGICAL_TYPES = {
    Decimal.LOGICAL_NAME: "decimal",
    Date.LOGICAL_NAME: "date",
    Time.LOGICAL_NAME: "time-millis",
    Timestamp.LOGICAL_NAME: "timestamp-millis",
}


def scrub_name(name: str) -> str:
    """``name`` with every character Avro refuses in a name replaced by ``_``."""
    scrubbed = _INVALID_NAME_CHARS.sub("_", name)
    return "_" + scrubbed if not scrubbed or scrubbed[0].isdigit() else scrubbed


def strip_logical_types(avro: Any) -> Any:
    """A copy of the Avro schema ``avro`` (parsed JSON) without ``logicalType`` attributes."""
    if isinstance(avro, list):
        return [strip_logical_types(s) for s in avro]
    if not isinstance(avro, dict):
        return avro
    out = {k: v for k, v in avro.items() if k != "logicalType"}
    if "fields" in out:
        out["fields"] = [{**f, "type": strip_logical_types(f["type"])} for f in out["fields"]]
    for key in ("items", "values"):
        if key in out:
            out[key] = strip_logical_types(out[key])
    if isinstance(out.get("type"), (dict, list)):
        out["type"] = strip_logical_types(out["type"])
    return out


class ToAvro:
    """One Connect schema's conversion to Avro: names defined so far, unnamed-struct counter."""

    def __init__(self, meta: bool, scrub: bool, enhanced: bool) -> None:
        self.meta = meta
        self.scrub = scrub
        self.enhanced = enhanced
        self.named: dict[str, Schema] = {}  # full name → the Connect schema defined under it
        self.unnamed: dict[Schema, str] = {}  # unnamed struct (or map entry) → its generated full name

    def name_parts(self, full: str) -> tuple[str | None, str]:
        namespace, _, name = full.rpartition(".")
        if self.scrub:
            name = scrub_name(name)
            namespace = ".".join(scrub_name(part) for part in namespace.split(".")) if namespace else ""
        else:
            for part in full.split("."):
                self.check_name(part, f"schema name {full!r}")
        return namespace or None, name

    def field_name(self, name: str, record: str) -> str:
        if self.scrub:
            return scrub_name(name)
        self.check_name(name, f"field name {name!r} of {record!r}")
        return name

    @staticmethod
    def check_name(part: str, what: str) -> None:
        if not _AVRO_NAME.fullmatch(part):
            raise DataError(
                f"The {what} is not a valid Avro name (letters, digits and '_', not starting with a digit); "
                "set scrub.invalid.names=true on the converter to replace the other characters with '_'"
            )

    def schema(self, schema: Schema) -> Any:
        base = self.base(schema)
        if not schema.optional:
            return base
        # Connect's optional is Avro's union with null; null goes second when a default must match the first branch.
        return [base, "null"] if schema.default is not None else ["null", base]

    def base(self, schema: Schema) -> Any:
        t = schema.type
        if t is Type.STRUCT and schema.name == UNION_NAME:
            return [self.base(f.schema.with_(optional=False)) for f in schema.fields]
        if t in _PRIMITIVE_AVRO:
            avro: Any = {"type": _PRIMITIVE_AVRO[t]}
            if t is Type.STRING and self.enhanced and schema.parameters and ENUM_PARAM in schema.parameters:
                params = schema.parameters
                enum_full = params[ENUM_PARAM]
                namespace, name = self.name_parts(enum_full)
                avro = {
                    "type": "enum",
                    "name": name,
                    "symbols": [v for k, v in params.items() if k.startswith(ENUM_PARAM + ".")],
                }
                if namespace:
                    avro["namespace"] = namespace
            if t is Type.BYTES and schema.name == Decimal.LOGICAL_NAME:
                params = schema.parameters or {}
                avro["scale"] = int(params.get(Decimal.SCALE_FIELD, "0"))
                avro["precision"] = int(params.get(DECIMAL_PRECISION_PARAM, DEFAULT_DECIMAL_PRECISION))
        elif t is Type.ARRAY:
            assert schema.value_schema is not None
            avro = {"type": "array", "items": self.schema(schema.value_schema)}
        elif t is Type.MAP:
            assert schema.key_schema is not None and schema.value_schema is not None
            if schema.key_schema.type is Type.STRING and not schema.key_schema.optional:
                avro = {"type": "map", "values": self.schema(schema.value_schema)}
            else:
                entry_full = schema.name or f"{AVRO_NAMESPACE}.{MAP_ENTRY}"
                avro = {
                    "type": "array",
                    "items": self.record(
                        schema, entry_full, [("key", schema.key_schema), ("value", schema.value_schema)], entry=True
                    ),
                }
        else:  # STRUCT
            avro = self.record(schema, self.struct_name(schema), [(f.name, f.schema) for f in schema.fields])
            if isinstance(avro, str):
                return avro  # a reference to a record defined earlier in this schema
        props = self.meta_props(schema) if self.meta else {}
        if schema.name in LOGICAL_TYPES:
            props["logicalType"] = LOGICAL_TYPES[schema.name]  # type: ignore[index]
        if isinstance(avro, dict):
            avro.update(props)
            if len(avro) == 1:
                return avro["type"]
        return avro

    def struct_name(self, schema: Schema) -> str:
        """A struct's record name: its own, else a generated ``ConnectDefault``, ``ConnectDefault2``, …"""
        full = schema.name
        if full is None:
            full = self.unnamed.get(schema)
            if full is None:
                suffix = len(self.unnamed) + 1
                full = f"{AVRO_NAMESPACE}.{DEFAULT_SCHEMA_NAME}{suffix if suffix > 1 else ''}"
                self.unnamed[schema] = full
        return full

    @staticmethod
    def meta_props(schema: Schema) -> dict[str, Any]:
        """The ``connect.*`` attributes that carry what Avro has no place for."""
        props: dict[str, Any] = {}
        if schema.doc is not None:
            props["connect.doc"] = schema.doc
        if schema.version is not None:
            props["connect.version"] = schema.version
        if schema.parameters:
            props["connect.parameters"] = dict(schema.parameters)
        if schema.default is not None:
            props["connect.default"] = _default_json(schema, schema.default)
        if schema.name is not None:
            props["connect.name"] = schema.name
        t = schema.type
        if t is Type.INT8 or t is Type.INT16:
            props["connect.type"] = t.value
        return props

    def record(self, schema: Schema, full: str, fields: list[tuple[str, Schema]], *, entry: bool = False) -> Any:
        namespace, name = self.name_parts(full)
        ref = f"{namespace}.{name}" if namespace else name
        plain = schema.with_(optional=False, default=None)
        defined = self.named.get(ref)
        if defined is not None:
            if defined != plain:
                raise DataError(f"Two different Connect schemas are both named {full!r}; Avro needs distinct names")
            return ref
        self.named[ref] = plain
        avro: dict[str, Any] = {"type": "record", "name": name}
        if namespace:
            avro["namespace"] = namespace
        avro_fields = []
        for fname, fschema in fields:
            field: dict[str, Any] = {"name": self.field_name(fname, full), "type": self.schema(fschema)}
            if fschema.default is not None:
                field["default"] = _default_json(fschema, fschema.default)
            elif fschema.optional:
                field["default"] = None
            avro_fields.append(field)
        avro["fields"] = avro_fields
        if entry and schema.name is not None:
            avro["connect.internal.type"] = MAP_ENTRY
        return avro


def _default_json(schema: Schema, value: Any) -> Any:
    """A Connect default value as the JSON an Avro default holds (bytes as ISO-8859-1 text)."""
    if value is None:
        return None
    name = schema.name
    if name == Decimal.LOGICAL_NAME:
        return Decimal.to_bytes(value, Decimal.scale(schema)).decode("latin-1")
    if name == Date.LOGICAL_NAME:
        return Date.to_int(value)
    if name == Time.LOGICAL_NAME:
        return Time.to_int(value)
    if name == Timestamp.LOGICAL_NAME:
        return Timestamp.to_int(value)
    t = schema.type
    if t is Type.BYTES:
        return bytes(value).decode("latin-1")
    if t is Type.ARRAY:
        assert schema.value_schema is not None
        return [_default_json(schema.value_schema, v) for v in value]
    if t is Type.MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        if schema.key_schema.type is Type.STRING and not schema.key_schema.optional:
            return {k: _default_json(schema.value_schema, v) for k, v in value.items()}
        return [
            {"key": _default_json(schema.key_schema, k), "value": _default_json(schema.value_schema, v)}
            for k, v in value.items()
        ]
    if t is Type.STRUCT:
        return {f.name: _default_json(f.schema, value.get(f.name)) for f in schema.fields}
    return value
