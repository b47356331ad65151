"""Connect schemas and values ↔ Avro schemas and datums, as Confluent's ``AvroData`` maps them.

The Avro schema a Connect schema becomes is the one Confluent's ``AvroConverter`` registers, so a
subject shared with Java workers keeps one history and consumers written against those schemas
read Sluice's records unchanged:

* ``int8``/``int16`` are Avro ``int`` with ``"connect.type"``; ``int32``, ``int64``, ``float32``,
  ``float64``, ``boolean``, ``string``, ``bytes`` are their Avro namesakes.
* Decimal is ``bytes`` with ``logicalType: decimal``, its scale, and precision from the
  ``connect.decimal.precision`` parameter (64 without it); Date is ``int``/``date``, Time
  ``int``/``time-millis``, Timestamp ``long``/``timestamp-millis``.
* A struct is a record named after the schema (``a.b.C`` → namespace ``a.b``, name ``C``); an
  unnamed one is ``io.confluent.connect.avro.ConnectDefault`` (then ``ConnectDefault2``, … for
  further distinct unnamed structs in the same schema). A map with non-string keys is an array of
  ``MapEntry`` records with ``key`` and ``value``.
* An optional schema is a union with ``null`` first, or second when it has a default; an optional
  field defaults to ``null``.
* With ``connect.meta.data`` (the default), ``connect.name``, ``connect.version``, ``connect.doc``,
  ``connect.parameters`` and ``connect.default`` carry what Avro has no place for, so reading
  gives back the Connect schema that was written.

Reading accepts any Avro schema: enums become strings (their symbols in parameters), ``fixed``
becomes bytes, ``null``-plus-one unions become optional schemas and other unions become
``io.confluent.connect.avro.Union`` structs with one field per branch.

Logical values are converted by Connect's own rules (:mod:`sluice.connectors.api.schema`), and the Avro
schema handed to fastavro has its logical types stripped: the bytes are the same, and fastavro
then neither second-guesses nor converts them.
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal as _decimal
import re
from collections.abc import Callable, Mapping
from typing import Any

from sluice.connectors.api.errors import DataError
from sluice.connectors.api.schema import Date, Decimal, Schema, Time, Timestamp, Type

__all__ = [
    "AVRO_NAMESPACE",
    "AvroData",
    "DEFAULT_SCHEMA_NAME",
    "UNION_NAME",
    "strip_logical_types",
]

AVRO_NAMESPACE = "io.confluent.connect.avro"
DEFAULT_SCHEMA_NAME = "ConnectDefault"
UNION_NAME = AVRO_NAMESPACE + ".Union"
ENUM_PARAM = AVRO_NAMESPACE + ".Enum"
MAP_ENTRY = "MapEntry"
DECIMAL_PRECISION_PARAM = "connect.decimal.precision"
DEFAULT_DECIMAL_PRECISION = 64

_DEFAULT_NAME_RE = re.compile(re.escape(AVRO_NAMESPACE) + r"\." + DEFAULT_SCHEMA_NAME + r"\d*")
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
_INT_LIMITS = {
    Type.INT8: (-(2**7), 2**7 - 1),
    Type.INT16: (-(2**15), 2**15 - 1),
    Type.INT32: (-(2**31), 2**31 - 1),
    Type.INT64: (-(2**63), 2**63 - 1),
}
_LOGICAL = {
    Decimal.LOGICAL_NAME: "decimal",
    Date.LOGICAL_NAME: "date",
    Time.LOGICAL_NAME: "time-millis",
    Timestamp.LOGICAL_NAME: "timestamp-millis",
}

Encoder = Callable[[Any], Any]
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_MILLISECOND = _dt.timedelta(milliseconds=1)


def _bad_type(schema: Schema, value: Any, where: str) -> DataError:
    kind = schema.name if schema.name in _LOGICAL else schema.type.value
    return DataError(f"Invalid value for {where}: a {type(value).__name__} where the schema says {kind}")


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


class _ToAvro:
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

    def base(self, schema: Schema) -> Any:  # noqa: C901 - one branch per Connect type
        t = schema.type
        props: dict[str, Any] = {}
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
            full = schema.name
            if full is None:
                full = self.unnamed.get(schema)
                if full is None:
                    suffix = len(self.unnamed) + 1
                    full = f"{AVRO_NAMESPACE}.{DEFAULT_SCHEMA_NAME}{suffix if suffix > 1 else ''}"
                    self.unnamed[schema] = full
            avro = self.record(schema, full, [(f.name, f.schema) for f in schema.fields])
            if isinstance(avro, str):
                return avro  # a reference to a record defined earlier in this schema
        if self.meta:
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
            if t is Type.INT8 or t is Type.INT16:
                props["connect.type"] = t.value
        if schema.name in _LOGICAL:
            props["logicalType"] = _LOGICAL[schema.name]  # type: ignore[index]
        if isinstance(avro, dict):
            avro.update(props)
            if len(avro) == 1:
                return avro["type"]
        return avro

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


# -- Connect values → Avro datums ---------------------------------------------------------------


def _primitive_encoder(schema: Schema, where: str) -> Encoder | None:  # noqa: C901 - one branch per type
    name = schema.name
    if name == Decimal.LOGICAL_NAME:
        scale = Decimal.scale(schema)

        def decimal_(v: Any) -> bytes:
            if not isinstance(v, _decimal.Decimal):
                raise _bad_type(schema, v, where)
            return Decimal.to_bytes(v, scale)

        return decimal_
    if name == Date.LOGICAL_NAME:

        def date_(v: Any) -> int:
            if type(v) is _dt.date:
                return v.toordinal() - _EPOCH_ORDINAL
            if not isinstance(v, _dt.date):
                raise _bad_type(schema, v, where)
            return Date.to_int(v)

        return date_
    if name == Time.LOGICAL_NAME:

        def time_(v: Any) -> int:
            if not isinstance(v, _dt.time):
                raise _bad_type(schema, v, where)
            return Time.to_int(v)

        return time_
    if name == Timestamp.LOGICAL_NAME:

        def timestamp_(v: Any) -> int:
            if type(v) is _dt.datetime and v.tzinfo is not None:
                return (v - _EPOCH) // _MILLISECOND
            if not isinstance(v, _dt.datetime):
                raise _bad_type(schema, v, where)
            return Timestamp.to_int(v)

        return timestamp_
    t = schema.type
    if t in _INT_LIMITS:
        low, high = _INT_LIMITS[t]

        def integer(v: Any) -> int:
            if type(v) is not int and (not isinstance(v, int) or isinstance(v, bool)):
                raise _bad_type(schema, v, where)
            if not low <= v <= high:
                raise DataError(f"Invalid value for {where}: {v} is out of range for {t.value}")
            return v

        return integer
    if t is Type.FLOAT32 or t is Type.FLOAT64:

        def floating(v: Any) -> float:
            if type(v) is float:
                return v
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise _bad_type(schema, v, where)
            return float(v)

        return floating
    if t is Type.BOOLEAN:

        def boolean(v: Any) -> bool:
            if v is True or v is False:
                return v
            raise _bad_type(schema, v, where)

        return boolean
    if t is Type.STRING:

        def string(v: Any) -> str:
            if type(v) is str or isinstance(v, str):
                return v
            raise _bad_type(schema, v, where)

        return string

    def bytes_(v: Any) -> bytes:
        if type(v) is bytes:
            return v
        if isinstance(v, (bytearray, memoryview)):
            return bytes(v)
        raise _bad_type(schema, v, where)

    return bytes_


def _nullable(schema: Schema, encode: Encoder, where: str) -> Encoder:
    """``encode`` plus Connect's rules for null: the default if there is one, else only if optional."""
    default = schema.default
    if default is not None:
        encoded_default = encode(default)
        return lambda v: encoded_default if v is None else encode(v)
    if schema.optional:
        return lambda v: None if v is None else encode(v)

    def required(v: Any) -> Any:
        if v is None:
            raise DataError(f"Invalid value for {where}: null used for a required {schema.type.value} field")
        return encode(v)

    return required


def encoder(schema: Schema, where: str = "value", scrub: bool = False) -> Encoder:  # noqa: C901 - one branch per type
    """A function from a Connect value of ``schema`` to the datum fastavro writes for it (null included).

    ``scrub`` renames struct fields as :func:`scrub_name` does, to match a scrubbed Avro schema.
    """
    t = schema.type
    if t.is_primitive:
        inner: Encoder | None = _primitive_encoder(schema, where)
    elif t is Type.ARRAY:
        assert schema.value_schema is not None
        item = encoder(schema.value_schema, where + "[]", scrub)

        def array(v: Any) -> list[Any]:
            if not isinstance(v, (list, tuple)):
                raise _bad_type(schema, v, where)
            return [item(x) for x in v]

        inner = array
    elif t is Type.MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        key = encoder(schema.key_schema, where + " key", scrub)
        val = encoder(schema.value_schema, where + "[]", scrub)
        if schema.key_schema.type is Type.STRING and not schema.key_schema.optional:

            def string_map(v: Any) -> dict[str, Any]:
                if not isinstance(v, Mapping):
                    raise _bad_type(schema, v, where)
                return {key(k): val(x) for k, x in v.items()}

            inner = string_map
        else:

            def entries(v: Any) -> list[dict[str, Any]]:
                if not isinstance(v, Mapping):
                    raise _bad_type(schema, v, where)
                return [{"key": key(k), "value": val(x)} for k, x in v.items()]

            inner = entries
    elif schema.name == UNION_NAME:
        branches = [
            (f.name, encoder(f.schema.with_(optional=False), f"{where}.{f.name}", scrub)) for f in schema.fields
        ]

        def union(v: Any) -> Any:
            if not isinstance(v, Mapping):
                raise _bad_type(schema, v, where)
            for fname, enc in branches:
                x = v.get(fname)
                if x is not None:
                    return enc(x)
            raise DataError(f"Invalid value for {where}: a union struct with no field set")

        inner = union
    else:
        inner = _struct_encoder(schema, where, scrub)
    assert inner is not None
    return _nullable(schema, inner, where)


# What a field value must be to pass through untouched; anything else goes to its full encoder,
# which converts it, applies the default, or raises the error that names the field.
_PASS_CHECKS = {
    Type.INT8: "type({x}) is not int or not -128 <= {x} <= 127",
    Type.INT16: "type({x}) is not int or not -32768 <= {x} <= 32767",
    Type.INT32: "type({x}) is not int or not -2147483648 <= {x} <= 2147483647",
    Type.INT64: "type({x}) is not int or not -9223372036854775808 <= {x} <= 9223372036854775807",
    Type.FLOAT32: "type({x}) is not float",
    Type.FLOAT64: "type({x}) is not float",
    Type.BOOLEAN: "{x} is not True and {x} is not False",
    Type.STRING: "type({x}) is not str",
    Type.BYTES: "type({x}) is not bytes",
}


def _struct_encoder(schema: Schema, where: str, scrub: bool) -> Encoder:
    """A struct's encoder, generated as straight-line Python.

    A field whose value already is what Avro writes (an in-range int, a str, …) costs one inline
    check; other fields call their own encoder. Field values are read with ``dict.get``, so a
    missing field is null; a field the schema does not have is an error.
    """
    fields = schema.fields
    known = frozenset(f.name for f in fields)
    env: dict[str, Any] = {"known": known, "Mapping": Mapping, "dict": dict, "type": type, "str": str}
    lines = ["def struct(v):", "    if type(v) is not dict and not isinstance(v, Mapping):", "        return slow(v)"]
    lines.append(f"    if len(v) > {len(fields)} or not v.keys() <= known:")
    lines.append("        return slow(v)")
    lines.append("    get = v.get")
    out = []
    for i, f in enumerate(fields):
        x = f"x{i}"
        env[f"f{i}"] = encoder(f.schema, f"{where}.{f.name}", scrub)
        env[f"n{i}"] = f.name
        check = _PASS_CHECKS.get(f.schema.type)
        lines.append(f"    {x} = get(n{i})")
        if check is not None and f.schema.name is None and f.schema.default is None:
            lines.append(f"    if {check.format(x=x)}:")
            lines.append(f"        {x} = f{i}({x})")
        else:
            lines.append(f"    {x} = f{i}({x})")
        env[f"o{i}"] = scrub_name(f.name) if scrub else f.name
        out.append(f"o{i}: {x}")
    lines.append("    return {" + ", ".join(out) + "}")

    def slow(v: Any) -> Any:
        if not isinstance(v, Mapping):
            raise _bad_type(schema, v, where)
        extra = sorted(set(v) - known)
        raise DataError(f"Invalid value for {where}: fields {extra} are not in the struct schema")

    env["slow"] = slow
    exec(compile("\n".join(lines), f"<avro struct encoder {schema.name or where}>", "exec"), env)  # noqa: S102 - generated from field names kept in env, never spliced into the code
    generated: Encoder = env["struct"]
    return generated


# -- Avro schemas and datums → Connect ---------------------------------------------------------

Decoder = Callable[[Any], Any]


class _ToConnect:
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

    def convert(  # noqa: C901 - one branch per Avro type
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
        logical = avro.get("logicalType")
        dec: Decoder | None = None
        name: str | None = None
        version: int | None = None
        params: dict[str, str] = {}
        key_schema = value_schema = None
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
        elif kind == "enum":
            full, _ = self.full_name(avro, namespace)
            t = Type.STRING
            params[ENUM_PARAM] = full
            params.update((f"{ENUM_PARAM}.{s}", s) for s in avro["symbols"])
            if "connect.name" not in avro:
                name = full
        elif kind == "array":
            items = avro["items"]
            entry = self._map_entry(items, namespace)
            if entry is not None:
                (key_schema, kdec), (value_schema, vdec) = entry
                t = Type.MAP

                def entries(v: list[Any]) -> dict[Any, Any]:
                    return {
                        (e["key"] if kdec is None else kdec(e["key"])): (
                            e["value"] if vdec is None else vdec(e["value"])
                        )
                        for e in v
                    }

                dec = entries
            else:
                value_schema, idec = self.convert(items, namespace)
                t = Type.ARRAY
                if idec is not None:
                    dec = lambda v, f=idec: [None if x is None else f(x) for x in v]  # noqa: E731
        elif kind == "map":
            value_schema, vdec = self.convert(avro["values"], namespace)
            key_schema = Schema(Type.STRING)
            t = Type.MAP
            if vdec is not None:
                dec = lambda v, f=vdec: {k: None if x is None else f(x) for k, x in v.items()}  # noqa: E731
        elif kind in ("record", "error"):
            return self.record(avro, namespace, optional, default, has_default)
        elif kind == "null":
            raise DataError("A standalone Avro null schema has no Connect equivalent")
        else:
            raise DataError(f"Unsupported Avro type {kind!r}")
        return self.finish(
            avro, t, name, version, params, key_schema, value_schema, optional, default, has_default
        ), dec

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
        if name is not None and _DEFAULT_NAME_RE.fullmatch(name):
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
        if name is not None and _DEFAULT_NAME_RE.fullmatch(name):
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


def _default_value(schema: Schema, value: Any) -> Any:  # noqa: C901 - one branch per type
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


class AvroData:
    """Converts schemas and values between Connect and Avro with Confluent's conventions.

    ``connect_meta_data`` writes (and reads) the ``connect.*`` attributes; ``scrub_invalid_names``
    replaces characters Avro refuses in record and field names; ``enhanced_schema_support`` writes
    strings that came from an Avro enum back as that enum.
    """

    def __init__(
        self,
        *,
        connect_meta_data: bool = True,
        scrub_invalid_names: bool = False,
        enhanced_schema_support: bool = False,
    ) -> None:
        self.connect_meta_data = connect_meta_data
        self.scrub_invalid_names = scrub_invalid_names
        self.enhanced_schema_support = enhanced_schema_support

    def avro_schema(self, schema: Schema) -> Any:
        """The Avro schema (as JSON data) that ``schema`` is written with."""
        return _ToAvro(self.connect_meta_data, self.scrub_invalid_names, self.enhanced_schema_support).schema(schema)

    def encoder(self, schema: Schema) -> Encoder:
        """A function from a Connect value of ``schema`` to its Avro datum; raises :class:`DataError`."""
        return encoder(schema, scrub=self.scrub_invalid_names)

    def connect_schema(self, avro: Any) -> tuple[Schema, Decoder | None]:
        """The Connect schema an Avro schema (JSON data) reads as, and a datum → value function
        (``None`` when datums already are Connect values)."""
        return _ToConnect(self.connect_meta_data).convert(avro, None)


_NATIVE_KINDS = {
    Type.INT8: "int",
    Type.INT16: "int",
    Type.INT32: "int",
    Type.INT64: "int",
    Type.FLOAT32: "float",
    Type.FLOAT64: "double",
    Type.BOOLEAN: "boolean",
    Type.STRING: "string",
    Type.BYTES: "bytes",
}
_NATIVE_LOGICAL = {
    Decimal.LOGICAL_NAME: ("bytes", 0, 0),
    Date.LOGICAL_NAME: ("int", *_INT_LIMITS[Type.INT32]),
    Time.LOGICAL_NAME: ("int", *_INT_LIMITS[Type.INT32]),
    Timestamp.LOGICAL_NAME: ("int", *_INT_LIMITS[Type.INT64]),
}


def native_plan(
    schema: Schema, *, enhanced: bool = False
) -> list[tuple[str, str, str, int, int, Encoder | None]] | None:
    """The field plan of ``sluice_native.AvroRecordWriter`` for ``schema``, or ``None`` when it is
    not a required struct of primitive fields (what the native writer covers).

    Each field is ``(name, kind, null, lo, hi, convert)``: the Avro encoding, where null sits in
    its union (``no``/``first``/``second``), the range of an int, and the Python function that
    turns a logical value (or a null with a default) into what Avro writes.
    """
    if schema.type is not Type.STRUCT or schema.optional or schema.name == UNION_NAME:
        return None
    plan: list[tuple[str, str, str, int, int, Encoder | None]] = []
    for f in schema.fields:
        fs = f.schema
        if not fs.type.is_primitive:
            return None
        if enhanced and fs.type is Type.STRING and fs.parameters and ENUM_PARAM in fs.parameters:
            return None  # written as an Avro enum, not a string
        null = ("second" if fs.default is not None else "first") if fs.optional else "no"
        logical = _NATIVE_LOGICAL.get(fs.name or "")
        if logical is not None:
            kind, lo, hi = logical
            convert: Encoder | None = encoder(fs, f"value.{f.name}")
        else:
            kind = _NATIVE_KINDS[fs.type]
            lo, hi = _INT_LIMITS.get(fs.type, (0, 0))
            convert = encoder(fs, f"value.{f.name}") if fs.default is not None else None
        plan.append((f.name, kind, null, lo, hi, convert))
    return plan


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
    _, namespace = _ToConnect.full_name(avro, None)
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
        _, decode = _ToConnect(connect_meta_data).convert(t, namespace)
        plan.append((f["name"], kind, null, base == "int", decode))
    return plan
