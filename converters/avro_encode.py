"""Connect values → the Avro datums fastavro (or the native writer) writes.

Encoders are built once per schema; the functions they return run per record, so each is a
closure over what it needs (a struct's encoder is generated straight-line Python).
"""

from __future__ import annotations

import datetime as _dt
import decimal as _decimal
from collections.abc import Callable, Mapping
from typing import Any

from sluice.connectors.api.errors import DataError
from sluice.connectors.api.schema import Date, Decimal, Schema, Time, Timestamp, Type
from sluice.converters.avro_schema import ENUM_PARAM, INT_LIMITS, LOGICAL_TYPES, UNION_NAME, scrub_name

Encoder = Callable[[Any], Any]
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_MILLISECOND = _dt.timedelta(milliseconds=1)


def _bad_type(schema: Schema, value: Any, where: str) -> DataError:
    kind = schema.name if schema.name in LOGICAL_TYPES else schema.type.value
    return DataError(f"Invalid value for {where}: a {type(value).__name__} where the schema says {kind}")


def _logical_encoder(schema: Schema, where: str) -> Encoder | None:
    """The encoder of a Decimal, Date, Time or Timestamp schema; ``None`` for any other schema."""
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
    return None


def _primitive_encoder(schema: Schema, where: str) -> Encoder | None:  # noqa: C901 - one branch per type
    logical = _logical_encoder(schema, where)
    if logical is not None:
        return logical
    t = schema.type
    if t in INT_LIMITS:
        low, high = INT_LIMITS[t]

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


def encoder(schema: Schema, where: str = "value", scrub: bool = False) -> Encoder:
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
    Date.LOGICAL_NAME: ("int", *INT_LIMITS[Type.INT32]),
    Time.LOGICAL_NAME: ("int", *INT_LIMITS[Type.INT32]),
    Timestamp.LOGICAL_NAME: ("int", *INT_LIMITS[Type.INT64]),
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
            lo, hi = INT_LIMITS.get(fs.type, (0, 0))
            convert = encoder(fs, f"value.{f.name}") if fs.default is not None else None
        plan.append((f.name, kind, null, lo, hi, convert))
    return plan
