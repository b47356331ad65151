"""Connect values → what orjson writes, per schema, for :mod:`sluice.converters.json`: the generated
struct writers, the per-type encoders and a schema's JSON form."""

from __future__ import annotations

import binascii
import datetime as _dt
import decimal
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sluice.connectors.api.errors import DataError
from sluice.connectors.api.schema import Date, Decimal, Schema, Time, Timestamp, Type
from sluice.converters.json_text import (
    _INF,
    _NON_FINITE,
    _NON_FINITE_TEXT,
    REQUIRED_NULL_ERROR,
    _Fragment,
    dumps,
    java_decimal_str,
    java_double_str,
    java_float_str,
)

# ---------------------------------------------------------------------------------------------
# Connect value → JSON-able value (what orjson serializes)
# ---------------------------------------------------------------------------------------------

_INT_RANGES = {
    Type.INT8: (-(2**7), 2**7 - 1),
    Type.INT16: (-(2**15), 2**15 - 1),
    Type.INT32: (-(2**31), 2**31 - 1),
    Type.INT64: (-(2**63), 2**63 - 1),
}
_EXACT = decimal.Context(prec=decimal.MAX_PREC, Emax=decimal.MAX_EMAX, Emin=decimal.MIN_EMIN)
_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
_B64 = binascii.b2a_base64
_MAX_ID_CACHE = 4096


def _f64_json(x: Any) -> Any:
    """A FLOAT64 value as orjson should write it."""
    if type(x) is not float:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise DataError(f"Invalid type for FLOAT64: {type(x)}")
        x = float(x)
    if 1e-3 <= x < 1e7 or -1e7 < x <= -1e-3 or x == 0.0:
        return x  # orjson already prints these exactly as Java does
    if x != x or x in (_INF, -_INF):
        return _NON_FINITE[repr(x)]
    return _Fragment(java_double_str(x))


_F32_JSON_CACHE: dict[float, Any] = {}


def _f32_json(x: Any) -> Any:
    # float32 fields usually repeat a modest set of values (they come from float32 sources), and
    # finding the shortest float32 decimal costs microseconds, so results are cached by value.
    cached = _F32_JSON_CACHE.get(x) if type(x) is float and x != 0.0 else None  # 0.0 == -0.0
    if cached is not None:
        return cached
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise DataError(f"Invalid type for FLOAT32: {type(x)}")
    text = java_float_str(float(x))
    result = text if text in _NON_FINITE_TEXT else _Fragment(text)  # Jackson writes these as JSON strings
    if type(x) is float and x != 0.0 and x == x:
        if len(_F32_JSON_CACHE) >= 16384:
            _F32_JSON_CACHE.clear()
        _F32_JSON_CACHE[x] = result
    return result


def _bytes_json(x: Any) -> str:
    if not isinstance(x, (bytes, bytearray, memoryview)):
        raise DataError(f"Invalid type for bytes type: {type(x)}")
    return _B64(x, newline=False).decode("ascii")


def _unscaled(value: decimal.Decimal, scale: int, power: int | None = None) -> int:
    """The unscaled integer of ``value`` at ``scale``; more fractional digits than ``scale`` is an error.

    ``power`` is ``10 ** abs(scale)`` when the caller has it at hand.
    """
    try:
        numerator, denominator = value.as_integer_ratio()  # exact, and faster than scaleb()
    except (ValueError, OverflowError):
        raise DataError(f"Decimal value {value} cannot be represented by a Connect Decimal") from None
    if power is None:
        power = 10 ** abs(scale)
    if scale >= 0:
        unscaled, remainder = divmod(numerator * power, denominator)
    else:
        unscaled, remainder = divmod(numerator, denominator * power)
    if remainder:
        raise DataError(
            "Decimal value has mismatching scale for given Decimal schema. "
            f"Schema has scale {scale}, value has scale {-value.as_tuple().exponent}."  # type: ignore[operator]
        )
    return unscaled


def _decimal_scale(schema: Schema) -> int:
    try:
        return int((schema.parameters or {})[Decimal.SCALE_FIELD])
    except KeyError:
        raise DataError("Invalid Decimal schema: scale parameter not found.") from None
    except ValueError:
        raise DataError("Invalid scale parameter found in Decimal schema") from None


def _decimal_encoder(schema: Schema, numeric: bool) -> Callable[[Any], Any]:
    scale = _decimal_scale(schema)
    power = 10 ** abs(scale)

    def encode(x: Any) -> Any:
        if type(x) is not decimal.Decimal:
            if isinstance(x, bool) or not isinstance(x, (int, decimal.Decimal)):
                raise DataError(f"Invalid type for Decimal, expected Decimal but was {type(x)}")
            x = decimal.Decimal(x)
        n = _unscaled(x, scale, power)
        if numeric:
            return _Fragment(java_decimal_str(n, scale))
        return _B64(n.to_bytes((n + (n < 0)).bit_length() // 8 + 1, "big", signed=True), newline=False).decode("ascii")

    return encode


def _date_json(x: Any) -> int:
    if type(x) is _dt.date:
        return x.toordinal() - _EPOCH_ORDINAL
    if isinstance(x, _dt.datetime):
        utc = x.astimezone(_dt.UTC) if x.tzinfo else x
        if utc.time() != _dt.time(0):
            raise DataError("Kafka Connect Date type should not have any time fields set to non-zero values.")
        return utc.toordinal() - _EPOCH_ORDINAL
    if isinstance(x, _dt.date):
        return x.toordinal() - _EPOCH_ORDINAL
    raise DataError(f"Invalid type for Date, expected datetime.date but was {type(x)}")


def _time_json(x: Any) -> int:
    if not isinstance(x, _dt.time):
        raise DataError(f"Invalid type for Time, expected datetime.time but was {type(x)}")
    millis = ((x.hour * 60 + x.minute) * 60 + x.second) * 1000 + x.microsecond // 1000
    offset = x.utcoffset()
    if offset:
        millis = (millis - offset // _dt.timedelta(milliseconds=1)) % 86_400_000
    return millis


def _timestamp_json(x: Any) -> int:
    if not isinstance(x, _dt.datetime):
        raise DataError(f"Invalid type for Timestamp, expected datetime.datetime but was {type(x)}")
    delta = x - (_EPOCH if x.tzinfo is not None else _EPOCH_NAIVE)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _schemaless_json(x: Any) -> Any:
    """A value without a schema, typed the way Connect infers a schema from a Java object."""
    kind = type(x)
    if kind is str or kind is bool or x is None:
        return x
    if kind is int:
        if not -(2**63) <= x < 2**63:
            raise DataError(f"Integer {x} is out of range for INT64")
        return x
    if kind is float:
        return _f64_json(x)
    if kind is dict or isinstance(x, Mapping):
        if all(type(k) is str for k in x):
            return {k: _schemaless_json(v) for k, v in x.items()}
        # Connect writes maps with any non-string key as an array of [key, value] pairs.
        return [[_schemaless_json(k), _schemaless_json(v)] for k, v in x.items()]
    if kind is list or kind is tuple:
        return [_schemaless_json(v) for v in x]
    if isinstance(x, (bytes, bytearray, memoryview)):
        return _bytes_json(x)
    if isinstance(x, str):  # subclasses (str enums, IntEnum) write as their base value
        return str.__str__(x)
    if isinstance(x, int):
        return _schemaless_json(int(x))
    if isinstance(x, float):
        return _f64_json(float(x))
    raise DataError(f"Python type {kind.__module__}.{kind.__qualname__} does not have corresponding schema type.")


class _Node:
    """A compiled converter for one schema node, plus what a struct needs to inline its fast case.

    ``fn`` handles every input (null included). ``fast`` is the Python type for which the value
    passes through unchanged (``int`` also needs ``lo <= v <= hi``, a FLOAT64 being written also
    needs a magnitude orjson prints as Java does: ``f64``); ``nullable`` says whether ``None``
    passes through too (optional, and no default to substitute).
    """

    __slots__ = ("fn", "fast", "lo", "hi", "f64", "nullable", "raw", "null")

    def __init__(self, fn: Callable[[Any], Any], fast: type | None = None, lo: int = 0, hi: int = 0, f64: bool = False):
        self.fn, self.fast, self.lo, self.hi, self.f64 = fn, fast, lo, hi, f64
        self.nullable = False
        self.raw: Callable[[Any], Any] | None = None  # fn without its null handling, when it has one
        self.null: Callable[[], Any] | None = None

    @classmethod
    def null_safe(cls, convert: Callable[[Any], Any], null: Callable[[], Any], **kw: Any) -> _Node:
        """A node for ``convert``, which never sees ``None`` (``null`` answers for it)."""
        node = cls(_with_null(convert, null), **kw)
        node.raw, node.null = convert, null
        return node

    def check(self, x: str) -> str | None:
        """Python source true when the variable ``x`` passes through unchanged; ``None`` if it never does."""
        if self.f64:
            test = f"type({x}) is float and (1e-3 <= {x} < 1e7 or -1e7 < {x} <= -1e-3 or {x} == 0.0)"
        elif self.fast is int:
            test = f"type({x}) is int and {self.lo} <= {x} <= {self.hi}"
        elif self.fast is not None:
            test = f"type({x}) is {self.fast.__name__}"  # str, bool or float: builtin names
        else:
            return None
        return f"({x} is None or {test})" if self.nullable else f"({test})"


def _identity_loop_ok(items: Any, node: _Node) -> bool:
    """Whether every element of ``items`` passes ``node``'s fast case (so the container is reusable)."""
    fast = node.fast
    if fast is int:
        lo, hi = node.lo, node.hi
        for e in items:
            if type(e) is not int or not lo <= e <= hi:
                return False
        return True
    for e in items:
        if type(e) is not fast:
            return False
    return True


def _generate(
    kind: str, schema: Schema, nodes: Sequence[_Node], null: Callable[[], Any], extra: dict[str, Any]
) -> Callable[[Any], Any]:
    """Generate a struct converter as straight-line Python.

    The fast path serves the usual record: a dict with exactly the schema's keys in schema order.
    It unpacks the values in one step, checks the pass-through fields inline, and returns the dict
    itself when every field passes through (otherwise a new dict that converts only the other
    fields). Anything else takes ``build``: one lookup per field, missing fields as null. Each
    field then costs a type check instead of a function call, which is what makes a 10-field row
    cheap. Field names enter the source only through ``repr``, which always yields a string literal.
    """
    names = [f.name for f in schema.fields]
    env: dict[str, Any] = {"null": null, "NAMES": names, **extra}
    checks = [node.check(f"x{i}") for i, node in enumerate(nodes)]
    lines = ["def convert(v):"]
    if names:
        unpacked = ", ".join(f"x{i}" for i in range(len(names)))
        condition = " and ".join(["[*v] == NAMES"] + [c for c in checks if c])
        lines += [
            f"    if type(v) is dict and len(v) == {len(names)}:",
            f"        {unpacked}, = v.values()",
            f"        if {condition}:",
        ]
        if all(checks):
            lines.append("            return v")
        else:
            parts = []
            for i, (name, node) in enumerate(zip(names, nodes)):
                if checks[i]:
                    parts.append(f"{name!r}: x{i}")
                elif node.raw is not None:  # the null test inline saves the wrapper's call
                    env[f"r{i}"], env[f"n{i}"] = node.raw, node.null
                    parts.append(f"{name!r}: n{i}() if x{i} is None else r{i}(x{i})")
                elif node.nullable:  # an optional struct, array or map: null without a call
                    parts.append(f"{name!r}: None if x{i} is None else f{i}(x{i})")
                else:
                    parts.append(f"{name!r}: f{i}(x{i})")
            lines.append("            return {" + ", ".join(parts) + "}")
    lines += ["    return build(v)", "", "def build(v):"]
    lines += ["    if type(v) is not dict:", "        if v is None:", "            return null()"]
    if kind == "encode":
        lines += ["        v = as_dict(v)", f"    if len(v) != {len(names)}:", "        check_keys(v)"]
    else:
        lines += ["        not_object(v)"]
    lines.append("    get = v.get")
    for i, (name, check) in enumerate(zip(names, checks)):
        env[f"f{i}"] = nodes[i].fn
        lines.append(f"    x{i} = get({name!r})")
        if check:
            lines += [f"    if not {check}:", f"        x{i} = f{i}(x{i})"]
        else:
            lines.append(f"    x{i} = f{i}(x{i})")
    lines.append("    return {" + ", ".join(f"{name!r}: x{i}" for i, name in enumerate(names)) + "}")
    code = compile("\n".join(lines), f"<sluice json {kind} {schema.name or 'struct'}>", "exec")
    exec(code, env)  # noqa: S102 - source built above from repr() literals, indices and type names
    return env["convert"]  # type: ignore[no-any-return]


class _Encoders:
    """Builds value → JSON-able converters for one converter configuration."""

    def __init__(self, numeric_decimals: bool, replace_null_with_default: bool):
        self.numeric = numeric_decimals
        self.replace_null = replace_null_with_default

    def null_handler(self, schema: Schema) -> Callable[[], Any]:
        if schema.default is not None and self.replace_null:
            default = self.node(schema.with_(default=None, optional=False)).fn(schema.default)
            return lambda: default
        if schema.optional:
            return lambda: None

        def required() -> Any:
            raise DataError(REQUIRED_NULL_ERROR)

        return required

    def node(self, schema: Schema) -> _Node:
        """The converter for values of ``schema``."""
        node = self._node(schema, self.null_handler(schema))
        node.nullable = schema.optional and not (schema.default is not None and self.replace_null)
        return node

    def _node(self, schema: Schema, null: Callable[[], Any]) -> _Node:
        name = schema.name
        if name == Decimal.LOGICAL_NAME:
            return _Node.null_safe(_decimal_encoder(schema, self.numeric), null)
        if name == Date.LOGICAL_NAME:
            return _Node.null_safe(_date_json, null)
        if name == Time.LOGICAL_NAME:
            return _Node.null_safe(_time_json, null)
        if name == Timestamp.LOGICAL_NAME:
            return _Node.null_safe(_timestamp_json, null)
        t = schema.type
        if t in _INT_RANGES:
            lo, hi = _INT_RANGES[t]
            return _Node(_int_encoder(t, lo, hi, null), int, lo, hi)
        if t is Type.STRING:
            return _Node(_typed_encoder(str, "STRING", null), str)
        if t is Type.BOOLEAN:
            return _Node(_typed_encoder(bool, "BOOLEAN", null), bool)
        if t is Type.FLOAT64:
            return _Node.null_safe(_f64_json, null, f64=True)
        if t is Type.FLOAT32:
            return _Node.null_safe(_f32_json, null)
        if t is Type.BYTES:
            return _Node.null_safe(_bytes_json, null)
        if t is Type.ARRAY:
            return _Node(self._array(schema, null))
        if t is Type.MAP:
            return _Node(self._map(schema, null))
        return _Node(self._struct(schema, null))

    def _array(self, schema: Schema, null: Callable[[], Any]) -> Callable[[Any], Any]:
        assert schema.value_schema is not None
        item = self.node(schema.value_schema)
        item_fn = item.fn

        def encode(x: Any) -> Any:
            if type(x) is not list and type(x) is not tuple:
                if x is None:
                    return null()
                if isinstance(x, (str, bytes, Mapping)) or not isinstance(x, Sequence):
                    raise DataError(f"Invalid type for ARRAY: {type(x)}")
            if item.fast is not None and _identity_loop_ok(x, item):
                return x
            return [item_fn(e) for e in x]

        return encode

    def _map(self, schema: Schema, null: Callable[[], Any]) -> Callable[[Any], Any]:
        assert schema.key_schema is not None and schema.value_schema is not None
        key_fn = self.node(schema.key_schema).fn
        value = self.node(schema.value_schema)
        value_fn = value.fn
        object_mode = schema.key_schema.type is Type.STRING

        def as_key(k: Any) -> str:
            # Jackson's asText() of the converted key: a null key becomes the text "null".
            if type(k) is str:
                return k
            converted = key_fn(k)
            return "null" if converted is None else str(converted)

        def encode(x: Any) -> Any:
            if type(x) is not dict:
                if x is None:
                    return null()
                if not isinstance(x, Mapping):
                    raise DataError(f"Invalid type for MAP: {type(x)}")
            if not object_mode:
                return [[key_fn(k), value_fn(v)] for k, v in x.items()]
            if type(x) is dict and value.fast is not None and all(type(k) is str for k in x):
                if _identity_loop_ok(x.values(), value):
                    return x
            return {as_key(k): value_fn(v) for k, v in x.items()}

        return encode

    def _struct(self, schema: Schema, null: Callable[[], Any]) -> Callable[[Any], Any]:
        nodes = [self.node(f.schema) for f in schema.fields]
        known = frozenset(f.name for f in schema.fields)

        def as_dict(v: Any) -> dict[str, Any]:
            if isinstance(v, Mapping):
                return dict(v)
            raise DataError(f"Invalid type for STRUCT: {type(v)}")

        def check_keys(v: dict[str, Any]) -> None:
            extra = [k for k in v if k not in known]
            if extra:
                raise DataError(f"{extra[0]!r} is not a valid field name of struct {schema.name or '(unnamed)'}")

        return _generate("encode", schema, nodes, null, {"as_dict": as_dict, "check_keys": check_keys})


def _with_null(convert: Callable[[Any], Any], null: Callable[[], Any]) -> Callable[[Any], Any]:
    def with_null(x: Any) -> Any:
        return null() if x is None else convert(x)

    return with_null


def _int_encoder(t: Type, lo: int, hi: int, null: Callable[[], Any]) -> Callable[[Any], Any]:
    label = t.name

    def encode(x: Any) -> Any:
        if x is None:
            return null()
        if isinstance(x, bool) or not isinstance(x, int):
            raise DataError(f"Invalid type for {label}: {type(x)}")
        x = int(x)  # an IntEnum or other int subclass writes as its value
        if not lo <= x <= hi:
            raise DataError(f"Value {x} is out of range for {label} [{lo}, {hi}]")
        return x

    return encode


def _typed_encoder(kind: type, label: str, null: Callable[[], Any]) -> Callable[[Any], Any]:
    def encode(x: Any) -> Any:
        if x is None:
            return null()
        if isinstance(x, kind):
            return x
        raise DataError(f"Invalid type for {label}: {type(x)}")

    return encode


# ---------------------------------------------------------------------------------------------
# Schema ↔ JSON
# ---------------------------------------------------------------------------------------------

_TYPE_NAMES = {t: t.value for t in Type}
_TYPE_NAMES[Type.FLOAT32] = "float"
_TYPE_NAMES[Type.FLOAT64] = "double"
_TYPES_BY_NAME = {name: t for t, name in _TYPE_NAMES.items()}


def json_schema(schema: Schema, *, decimal_format: str = "BASE64") -> bytes:
    """``schema`` as JsonConverter writes it in the ``{"schema": …, "payload": …}`` envelope
    (Connect's ``asJsonSchema``; ``decimal_format`` is the converter's ``decimal.format``, which
    decides how decimal defaults are written). For code that assembles the envelope itself, e.g. a
    source task serializing its own records (see :attr:`connectors.api.SourceTaskContext.serialization`)."""
    return dumps(_schema_json(schema, _Encoders(decimal_format == "NUMERIC", True)))


def _schema_json(schema: Schema, encoders: _Encoders) -> dict[str, Any]:
    """The JSON object Connect's ``asJsonSchema`` builds, keys in Connect's order."""
    obj: dict[str, Any] = {"type": _TYPE_NAMES[schema.type]}
    if schema.type is Type.ARRAY:
        assert schema.value_schema is not None
        obj["items"] = _schema_json(schema.value_schema, encoders)
    elif schema.type is Type.MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        obj["keys"] = _schema_json(schema.key_schema, encoders)
        obj["values"] = _schema_json(schema.value_schema, encoders)
    elif schema.type is Type.STRUCT:
        obj["fields"] = [{**_schema_json(f.schema, encoders), "field": f.name} for f in schema.fields]
    obj["optional"] = schema.optional
    if schema.name is not None:
        obj["name"] = schema.name
    if schema.version is not None:
        obj["version"] = schema.version
    if schema.doc is not None:
        obj["doc"] = schema.doc
    if schema.parameters is not None:
        obj["parameters"] = dict(schema.parameters)
    if schema.default is not None:
        obj["default"] = encoders.node(schema).fn(schema.default)
    return obj
