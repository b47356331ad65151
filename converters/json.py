"""Kafka Connect's ``JsonConverter``, byte for byte.

The bytes equal those of ``org.apache.kafka.connect.json.JsonConverter`` 4.1 (Jackson 2.19) for the
same schema, value and settings; ``tests/unit/converters/vectors/json_converter.jsonl`` holds the
real converter's output and the unit tests compare against it. What "identical" takes:

* Jackson's compact output and field order: the envelope is ``{"schema":…,"payload":…}``; a schema
  is ``type``, then ``items`` / ``keys``, ``values`` / ``fields``, then ``optional``, ``name``,
  ``version``, ``doc``, ``parameters``, ``default``; a struct field's schema ends with ``"field"``.
* Numbers as Java prints them. orjson's float output already equals ``Double.toString`` for
  ``1e-3 <= |x| < 1e7`` and zero, so those floats pass through untouched; the rest are rewritten
  to Java's ``1.0E20`` form and embedded as :class:`orjson.Fragment`. Non-finite numbers become the
  strings ``"NaN"``/``"Infinity"``, as Jackson writes them. float32 values print as the shortest
  decimal that reads back as the same *float* (``Float.toString``). Decimals print like
  ``BigDecimal.toString`` (NUMERIC) or as base64 of the two's-complement unscaled value (BASE64).
* Jackson's string escapes: control characters other than ``\\b \\t \\n \\f \\r`` use upper-case
  hex (``\\u001B``) and characters outside the BMP are written as escaped surrogate pairs
  (``\\uD83D\\uDE00``); orjson writes lower-case hex and raw UTF-8, so its output is patched, which
  costs two byte scans on the hot path and a regex only when such characters occur.

Java's ``Double.toString`` changed in JDK 19 (JDK-4511638): JDK 17 prints more digits than needed
for some values (integral doubles from 2**54 up, integral floats from 2**25 up, a few others). This
module follows JDK 19+, which matches Connect on Java 21 and later, and Connect on JDK 17 for all
other values; both forms read back as the same number.

Speed: a schema's JSON bytes and a conversion function are built once per schema (kept in LRU
caches sized by ``schemas.cache.size``, with an identity front cache so a repeated schema object
costs one dict lookup). Struct converters are generated as straight-line Python: a record whose
fields already are what orjson should write (strings, in-range ints, booleans, plain doubles)
is checked inline and handed to orjson as it is, so a field costs a type check, not a function
call or a copy. The envelope is assembled from bytes, and reading a known schema's envelope
parses only the payload.
"""

from __future__ import annotations

import binascii
import datetime as _dt
import decimal
import json as _stdjson
import math
import re
import struct
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import Any, ClassVar, Literal

import msgspec
import orjson
import pydantic

from connectors.api.config import PluginConfig
from connectors.api.converter import Converter, HeaderConverter
from connectors.api.errors import DataError
from connectors.api.records import Headers
from connectors.api.schema import Date, Decimal, Field, Schema, SchemaAndValue, Time, Timestamp, Type

__all__ = ["JsonConverter", "JsonConverterConfig", "java_double_str", "java_float_str", "java_decimal_str"]

ENVELOPE_ERROR = (
    'JsonConverter with schemas.enable requires "schema" and "payload" fields and may not contain additional '
    "fields. If you are trying to deserialize plain JSON data, set schemas.enable=false in your converter "
    "configuration."
)
REQUIRED_NULL_ERROR = "Conversion error: null value for field that is required and has no default value"


class JsonConverterConfig(PluginConfig):
    """Settings of :class:`JsonConverter`: the keys of Connect's ``JsonConverterConfig``."""

    schemas_enable: bool = pydantic.Field(True, description="Wrap each value in a schema/payload envelope.")
    schemas_cache_size: int = pydantic.Field(1000, description="Schemas cached per direction by one converter.")
    decimal_format: Literal["BASE64", "NUMERIC"] = pydantic.Field(
        "BASE64", description="Write Decimal values as base64 bytes or as JSON numbers (case-insensitive)."
    )
    replace_null_with_default: bool = pydantic.Field(
        True, description="Write (and read) a null field that has a default as its default value."
    )
    converter_type: Literal["key", "value", "header"] | None = pydantic.Field(
        None, description="Set by the runtime: what the converter is used for."
    )

    @pydantic.field_validator("decimal_format", mode="before")
    @classmethod
    def _case_insensitive(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


# ---------------------------------------------------------------------------------------------
# Java number formatting
# ---------------------------------------------------------------------------------------------

_INF = math.inf
_MIN_NORMAL = 2.2250738585072014e-308
_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")
_Fragment = orjson.Fragment
_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_NON_FINITE_TEXT = frozenset(_NON_FINITE.values())


def _digits_and_point(text: str) -> tuple[str, int]:
    """``'1.5e-07'`` / ``'12345678.9'`` → significant digits and decimal point (value = 0.DIGITS × 10**point)."""
    mantissa, _, exponent = text.lstrip("-").partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    point = len(whole) + (int(exponent) if exponent else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    return stripped.rstrip("0") or "0", point


def _java_render(negative: bool, digits: str, point: int) -> str:
    """Java's layout: plain with at least one fraction digit for 1e-3 <= |v| < 1e7, else ``d.dddE±n``."""
    sign = "-" if negative else ""
    if -2 <= point <= 7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        return f"{sign}{digits[:point].ljust(point, '0')}.{digits[point:] or '0'}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{point - 1}"


def java_double_str(x: float) -> str:
    """``Double.toString(x)`` as JDK 19+ prints it (shortest repr that reads back as ``x``)."""
    if x != x or x in (_INF, -_INF):
        return _NON_FINITE[repr(x)]
    if x == 0.0:
        return repr(x)
    digits, point = _digits_and_point(orjson.dumps(x).decode())
    if len(digits) == 1 and -_MIN_NORMAL < x < _MIN_NORMAL:
        # JDK 19+ picks the closest decimal of length 1 or 2 (Double.MIN_VALUE is 4.9E-324, not 5e-324).
        two = f"{abs(x):.1e}"
        if float(two) == abs(x):
            digits, point = _digits_and_point(two)
    return _java_render(x < 0, digits, point)


def _to_float32(x: float) -> float:
    try:
        return float(_F32.unpack(_F32.pack(x))[0])
    except OverflowError:
        raise DataError(f"Value {x!r} is out of range for FLOAT32") from None


def _round_f32(x: float) -> float:
    """``(float) x`` in Java: the nearest float32, infinite when out of range."""
    try:
        return float(_F32.unpack(_F32.pack(x))[0])
    except OverflowError:
        return math.copysign(_INF, x)


def _f32_bits(x: float) -> int:
    return int(_U32.unpack(_F32.pack(x))[0])


def _f32_from_bits(bits: int) -> float:
    return float(_F32.unpack(_U32.pack(bits))[0])


def _f32_digits_exact(f: float) -> tuple[str, int]:
    """Shortest (JDK 19+) digits of the positive float32 ``f`` by exact rational arithmetic."""
    bits = _f32_bits(f)
    exact = Fraction(f)
    up = Fraction(_f32_from_bits(bits + 1)) if bits + 1 < 0x7F800000 else 2 * exact - Fraction(_f32_from_bits(bits - 1))
    down = Fraction(_f32_from_bits(bits - 1)) if bits > 0 else -exact
    low, high = (exact + down) / 2, (exact + up) / 2
    closed = bits % 2 == 0  # round-half-even: the interval ends belong to an even significand

    def rounds_to_f(d: Fraction) -> bool:
        return (low <= d <= high) if closed else (low < d < high)

    e10 = math.floor(math.log10(f))
    while Fraction(10) ** e10 > exact:
        e10 -= 1
    while Fraction(10) ** (e10 + 1) <= exact:
        e10 += 1
    for length in range(2, 11):  # length 2 covers JDK 19's "closest of length 1 or 2" rule
        unit = Fraction(10) ** (e10 - length + 1)
        floor = exact.numerator * unit.denominator // (exact.denominator * unit.numerator)
        candidates = [c for c in (floor, floor + 1) if rounds_to_f(c * unit)]
        if candidates:
            best = min(candidates, key=lambda c: (abs(c * unit - exact), c % 2))
            text = str(best)
            return text.rstrip("0") or "0", e10 + 1 + len(text) - length
    raise AssertionError(f"no shortest decimal for float32 {f!r}")  # unreachable: 9 digits always suffice


def _accepts(text: str, f: float) -> bool:
    """Whether the decimal ``text`` rounds to the float32 ``f`` (cheap double check, exact on ties)."""
    v = float(text)
    if v == f:
        return True
    if _round_f32(v) != f:
        return False
    # v rounds to f, but if v is exactly a float32 midpoint the decimal may lie on the other side.
    twin = 2 * v - f
    if _round_f32(twin) != twin:
        return True
    d, m = decimal.Decimal(text), decimal.Decimal(v)
    if d == m:
        return _f32_bits(f) % 2 == 0
    return (d < m) == (f < v)


@lru_cache(maxsize=8192)
def _f32_text(f: float) -> str:
    negative = f < 0
    f = abs(f)
    bits = _f32_bits(f)
    if bits & 0x7FFFFF == 0 and bits >= 0x01000000:
        # A power of two has a narrower gap below it, so the nearest short decimal is not always the one.
        digits, point = _f32_digits_exact(f)
    else:
        for length in range(2, 10):
            text = f"{f:.{length - 1}e}"
            if _accepts(text, f):
                digits, point = _digits_and_point(text)
                break
        else:  # pragma: no cover - 9 significant digits always identify a float32
            digits, point = _f32_digits_exact(f)
    return _java_render(negative, digits, point)


def java_float_str(x: float) -> str:
    """``Float.toString((float) x)`` as JDK 19+ prints it."""
    f = _to_float32(x)
    if f != f or f in (_INF, -_INF):
        return _NON_FINITE[repr(f)]
    if f == 0.0:
        return repr(f)
    return _f32_text(f)


def java_decimal_str(unscaled: int, scale: int) -> str:
    """``new BigDecimal(unscaled, scale).toString()``."""
    digits = str(abs(unscaled))
    adjusted = len(digits) - 1 - scale
    if scale >= 0 and adjusted >= -6:
        if scale == 0:
            text = digits
        elif len(digits) > scale:
            text = f"{digits[:-scale]}.{digits[-scale:]}"
        else:
            text = f"0.{'0' * (scale - len(digits))}{digits}"
    else:
        text = f"{digits[0]}{'.' + digits[1:] if len(digits) > 1 else ''}E{'+' if adjusted >= 0 else ''}{adjusted}"
    return "-" + text if unscaled < 0 else text


# ---------------------------------------------------------------------------------------------
# Jackson's string escapes
# ---------------------------------------------------------------------------------------------

# An escape is a backslash preceded by an even number of backslashes.
_LOWER_HEX_ESCAPE = re.compile(rb"(?<!\\)((?:\\\\)*)\\u00([01][0-9a-f])")
_ASTRAL_UTF8 = re.compile(rb"[\xf0-\xf4][\x80-\xbf]{3}")


def _upper_escape(match: re.Match[bytes]) -> bytes:
    return match.group(1) + b"\\u00" + match.group(2).upper()


def _escape_astral(match: re.Match[bytes]) -> bytes:
    code = ord(match.group().decode("utf-8")) - 0x10000
    return b"\\u%04X\\u%04X" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF))


def _jackson_escapes(out: bytes) -> bytes:
    """Rewrite orjson's string escapes the way Jackson writes them (see the module docstring)."""
    if b"\\u00" in out:
        out = _LOWER_HEX_ESCAPE.sub(_upper_escape, out)
    if not out.isascii():
        out = _ASTRAL_UTF8.sub(_escape_astral, out)
    return out


def _serialization_error(exc: Exception) -> DataError:
    return DataError(f"Converting Kafka Connect data to byte[] failed due to serialization error: {exc}")


def _dumps(obj: Any) -> bytes:
    try:
        out = orjson.dumps(obj)
    except orjson.JSONEncodeError as exc:
        raise _serialization_error(exc) from exc
    if 92 in out or not out.isascii():  # 92 is "\\"; an int probe is a memchr, ~10x a bytes probe
        out = _jackson_escapes(out)
    return out


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


def _node_type(j: Any) -> str:
    """Jackson's node type name for a parsed JSON value (for error messages)."""
    if j is None:
        return "NULL"
    if isinstance(j, bool):
        return "BOOLEAN"
    if isinstance(j, (int, float, decimal.Decimal)):
        return "NUMBER"
    if isinstance(j, str):
        return "STRING"
    return "ARRAY" if isinstance(j, list) else "OBJECT"


class _Decoders:
    """Builds parsed JSON → Connect value converters and parses JSON schemas."""

    def __init__(self, replace_null_with_default: bool):
        self.replace_null = replace_null_with_default

    def null_handler(self, schema: Schema) -> Callable[[], Any]:
        if schema.default is not None and self.replace_null:
            default = schema.default
            return lambda: default
        if schema.optional:
            return lambda: None
        message = f"Invalid null value for required {schema.type.name} field"

        def required() -> Any:
            raise DataError(message)

        return required

    def schema(self, j: Any) -> Schema:
        """Connect's ``asConnectSchema``: a JSON schema object → :class:`Schema`."""
        if not isinstance(j, dict):
            raise DataError(f"Schema must be a JSON object, but found {_node_type(j)}")
        type_name = j.get("type")
        if not isinstance(type_name, str):
            raise DataError("Schema must contain 'type' field")
        t = _TYPES_BY_NAME.get(type_name)
        if t is None:
            raise DataError(f"Unknown schema type: {type_name}")
        parts: dict[str, Any] = {}
        if t is Type.ARRAY:
            items = j.get("items")
            if items is None:
                raise DataError("Array schema did not specify the element type")
            parts["value_schema"] = self.schema(items)
        elif t is Type.MAP:
            if "keys" not in j:
                raise DataError("Map schema did not specify the key type")
            if "values" not in j:
                raise DataError("Map schema did not specify the value type")
            parts["key_schema"], parts["value_schema"] = self.schema(j["keys"]), self.schema(j["values"])
        elif t is Type.STRUCT:
            fields = j.get("fields")
            if not isinstance(fields, list):
                raise DataError('Struct schema\'s "fields" argument is not an array.')
            built = []
            for index, fj in enumerate(fields):
                fname = fj.get("field") if isinstance(fj, dict) else None
                if not isinstance(fname, str):
                    raise DataError("Struct schema's field name not specified properly")
                built.append(Field(fname, index, self.schema(fj)))
            parts["fields"] = tuple(built)
        params = j.get("parameters")
        if isinstance(params, dict):
            if not all(isinstance(v, str) for v in params.values()):
                raise DataError("Schema parameters must have string values.")
            parts["parameters"] = params
        version = j.get("version")
        schema = Schema(
            t,
            optional=j.get("optional") is True,
            name=j["name"] if isinstance(j.get("name"), str) else None,
            version=version if type(version) is int else None,
            doc=j["doc"] if isinstance(j.get("doc"), str) else None,
            **parts,
        )
        if "default" in j:
            default = self.node(schema).fn(j["default"])
            if default is not None:
                schema = schema.with_(default=default)
        return schema

    def node(self, schema: Schema) -> _Node:
        """The converter for parsed JSON of ``schema``."""
        node = self._node(schema, self.null_handler(schema))
        node.nullable = schema.optional and not (schema.default is not None and self.replace_null)
        return node

    def _node(self, schema: Schema, null: Callable[[], Any]) -> _Node:
        name, t = schema.name, schema.type
        if name == Decimal.LOGICAL_NAME:
            return _Node.null_safe(_decimal_decoder(_decimal_scale(schema)), null)
        if name == Date.LOGICAL_NAME:
            return _Node.null_safe(_date_value, null)
        if name == Time.LOGICAL_NAME:
            return _Node.null_safe(_time_value, null)
        if name == Timestamp.LOGICAL_NAME:
            return _Node.null_safe(_timestamp_value, null)
        if t in _INT_RANGES:
            lo, hi = _INT_RANGES[t]
            return _Node(_int_decoder(t, lo, hi, null), int, lo, hi)
        if t is Type.FLOAT32 or t is Type.FLOAT64:
            return _Node.null_safe(_float_value(t.name), null, fast=float)
        if t is Type.STRING:
            return _Node(_json_typed(str, "STRING", null), str)
        if t is Type.BOOLEAN:
            return _Node(_json_typed(bool, "BOOLEAN", null), bool)
        if t is Type.BYTES:
            return _Node.null_safe(_bytes_value, null)
        if t is Type.ARRAY:
            return _Node(self._array(schema, null))
        if t is Type.MAP:
            return _Node(self._map(schema, null))
        nodes = [self.node(f.schema) for f in schema.fields]
        return _Node(_generate("decode", schema, nodes, null, {"not_object": _not_object}))

    def _array(self, schema: Schema, null: Callable[[], Any]) -> Callable[[Any], Any]:
        assert schema.value_schema is not None
        item = self.node(schema.value_schema)
        item_fn = item.fn

        def decode(j: Any) -> Any:
            if type(j) is not list:
                if j is None:
                    return null()
                raise DataError(f"Arrays should be encoded as JSON arrays, but found {_node_type(j)}")
            if item.fast is not None and _identity_loop_ok(j, item):
                return j
            return [item_fn(e) for e in j]

        return decode

    def _map(self, schema: Schema, null: Callable[[], Any]) -> Callable[[Any], Any]:
        assert schema.key_schema is not None and schema.value_schema is not None
        key_fn = self.node(schema.key_schema).fn
        value = self.node(schema.value_schema)
        value_fn = value.fn
        object_mode = schema.key_schema.type is Type.STRING

        def decode(j: Any) -> Any:
            if j is None:
                return null()
            if object_mode:
                if type(j) is not dict:
                    raise DataError(
                        f"Maps with string fields should be encoded as JSON objects, but found {_node_type(j)}"
                    )
                if value.fast is not None and _identity_loop_ok(j.values(), value):
                    return j
                return {k: value_fn(v) for k, v in j.items()}
            if type(j) is not list:
                raise DataError(
                    f"Maps with non-string fields should be encoded as JSON array of tuples, but found {_node_type(j)}"
                )
            result = {}
            for entry in j:
                if type(entry) is not list:
                    raise DataError(f"Found invalid map entry instead of array tuple: {_node_type(entry)}")
                if len(entry) != 2:
                    raise DataError(f"Found invalid map entry, expected length 2 but found :{len(entry)}")
                result[key_fn(entry[0])] = value_fn(entry[1])
            return result

        return decode


class _NeedExactNumbers(Exception):
    """A Decimal arrived as a JSON number that orjson parsed into a float: parse again exactly."""


def _not_object(j: Any) -> None:
    raise DataError(f"Structs should be encoded as JSON objects, but found {_node_type(j)}")


def _integral(j: Any) -> int | None:
    """A JSON number with no fractional part (``1.0``) as an int, else ``None``."""
    if type(j) is float and j.is_integer():
        return int(j)
    if type(j) is decimal.Decimal and j.is_finite() and j == j.to_integral_value():
        return int(j)
    return None


def _int_decoder(t: Type, lo: int, hi: int, null: Callable[[], Any]) -> Callable[[Any], Any]:
    label = t.name

    def decode(j: Any) -> Any:
        if j is None:
            return null()
        if type(j) is not int:
            integral = _integral(j)
            if integral is None:
                raise DataError(f"Expected a JSON integer for {label}: {_node_type(j)}")
            j = integral
        if not lo <= j <= hi:
            raise DataError(f"Value {j} is out of range for {label} [{lo}, {hi}]")
        return j

    return decode


def _json_typed(kind: type, label: str, null: Callable[[], Any]) -> Callable[[Any], Any]:
    def decode(j: Any) -> Any:
        if j is None:
            return null()
        if type(j) is kind:
            return j
        raise DataError(f"Expected a JSON {'string' if kind is str else 'boolean'} for {label}: {_node_type(j)}")

    return decode


_NAMED_FLOATS = {"NaN": math.nan, "Infinity": _INF, "-Infinity": -_INF}


def _float_value(label: str) -> Callable[[Any], float]:
    def decode(j: Any) -> float:
        if type(j) is float:
            return j
        if isinstance(j, (int, decimal.Decimal)) and not isinstance(j, bool):
            return float(j)
        if isinstance(j, str) and j in _NAMED_FLOATS:  # how Jackson writes non-finite numbers
            return _NAMED_FLOATS[j]
        raise DataError(f"Expected a JSON number for {label}: {_node_type(j)}")

    return decode


def _bytes_value(j: Any) -> bytes:
    if type(j) is not str:
        raise DataError(f"Expected a base64 JSON string for BYTES: {_node_type(j)}")
    try:
        return binascii.a2b_base64(j, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise DataError(f"Invalid bytes field: {exc}") from exc


def _decimal_decoder(scale: int) -> Callable[[Any], decimal.Decimal]:
    def decode(j: Any) -> decimal.Decimal:
        kind = type(j)
        if kind is str:
            try:
                unscaled = int.from_bytes(binascii.a2b_base64(j, strict_mode=True), "big", signed=True)
            except (binascii.Error, ValueError) as exc:
                raise DataError(f"Invalid bytes for Decimal field: {exc}") from exc
            return decimal.Decimal(unscaled).scaleb(-scale, _EXACT)
        if kind is int or kind is decimal.Decimal:
            return decimal.Decimal(j)
        if kind is float:
            raise _NeedExactNumbers
        raise DataError(
            f"Invalid type for Decimal, underlying representation should be numeric or bytes but was {_node_type(j)}"
        )

    return decode


def _date_value(j: Any) -> _dt.date:
    if type(j) is not int or not -(2**31) <= j < 2**31:
        raise DataError(f"Invalid type for Date, underlying representation should be integer but was {_node_type(j)}")
    try:
        return _dt.date.fromordinal(_EPOCH_ORDINAL + j)
    except (ValueError, OverflowError):
        raise DataError(f"Date value {j} is outside the range of datetime.date") from None


def _time_value(j: Any) -> _dt.time:
    if type(j) is not int:
        raise DataError(f"Invalid type for Time, underlying representation should be integer but was {_node_type(j)}")
    if not 0 <= j < 86_400_000:
        raise DataError("Time values must use number of milliseconds greater than 0 and less than 86400000")
    seconds, millis = divmod(j, 1000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return _dt.time(hour, minute, second, millis * 1000)


def _timestamp_value(j: Any) -> _dt.datetime:
    if type(j) is not int:
        raise DataError(
            f"Invalid type for Timestamp, underlying representation should be integral but was {_node_type(j)}"
        )
    try:
        return _EPOCH + _dt.timedelta(0, 0, j * 1000)  # positional microseconds: ~1.5x faster than milliseconds=
    except OverflowError:
        raise DataError(f"Timestamp value {j} is outside the range of datetime.datetime") from None


def _reject_constant(token: str) -> Any:
    raise ValueError(f"Non-standard token '{token}'")


# ---------------------------------------------------------------------------------------------
# The converter
# ---------------------------------------------------------------------------------------------

_NULL = SchemaAndValue(None, None)
_new_sv = tuple.__new__  # skips NamedTuple's Python-level __new__ on the hot path
_MISSING: Any = object()


class JsonConverter(Converter, HeaderConverter):
    """Kafka Connect's ``JsonConverter``: the same bytes, with or without the schema envelope.

    Works for keys, values and headers. Configure it with :meth:`configure` (the
    ``key.converter.*`` / ``value.converter.*`` / ``header.converter.*`` keys); until then it uses
    the defaults (``schemas.enable=true``, ``decimal.format=BASE64``). Called from the task thread;
    an instance is not meant to be shared between threads.
    """

    Config: ClassVar[type[PluginConfig]] = JsonConverterConfig
    version: ClassVar[str] = "0.1.0"
    aliases: ClassVar[tuple[str, ...]] = ("org.apache.kafka.connect.json.JsonConverter",)

    def __init__(self) -> None:
        self._apply(JsonConverterConfig.model_validate({}))

    def configure(self, config: Mapping[str, Any], is_key: bool = False) -> None:
        """Apply the converter settings; unknown keys raise :class:`~connectors.api.errors.ConfigError`."""
        self._apply(JsonConverterConfig.parse(config))

    def _apply(self, config: JsonConverterConfig) -> None:
        self.config = config
        self._envelope = config.schemas_enable
        self._cache_size = max(1, config.schemas_cache_size)
        self._encoders = _Encoders(config.decimal_format == "NUMERIC", config.replace_null_with_default)
        self._decoders = _Decoders(config.replace_null_with_default)
        self._writers: OrderedDict[Schema | None, Callable[[Any], bytes | None]] = OrderedDict()
        self._writers_by_id: dict[int, tuple[Schema | None, Callable[[Any], bytes | None]]] = {}
        self._schema_bytes: OrderedDict[Schema, bytes] = OrderedDict()
        self._readers: OrderedDict[bytes, tuple[Schema, Callable[[Any], Any], bytes]] = OrderedDict()
        self._last_prefix: bytes | None = None
        self._last_schema: Schema | None = None
        self._last_reader: Callable[[Any], Any] = _identity

    # -- Connect data → bytes ------------------------------------------------------------------

    def from_connect_data(
        self, topic: str, schema: Schema | None, value: Any, headers: Headers | None = None
    ) -> bytes | None:
        """Serialize ``value``; ``schema`` and ``value`` both ``None`` is a tombstone (``None``)."""
        hit = self._writers_by_id.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1](value)
        return self._writer(schema)(value)

    def from_connect_batch(
        self, topic: str, schemas: Sequence[Schema | None], values: Sequence[Any]
    ) -> list[bytes | None]:
        """Serialize many values; consecutive records with the same schema object share one lookup."""
        out: list[bytes | None] = []
        append = out.append
        last: Any = _MISSING
        write: Callable[[Any], bytes | None] = _identity
        for schema, value in zip(schemas, values):
            if schema is not last:
                write, last = self._writer(schema), schema
            append(write(value))
        return out

    def as_json_schema(self, schema: Schema) -> bytes:
        """The schema's JSON exactly as it appears in the envelope (Connect's ``asJsonSchema``)."""
        cached = self._schema_bytes.get(schema)
        if cached is None:
            cached = _dumps(_schema_json(schema, self._encoders))
            self._remember(self._schema_bytes, schema, cached)
        else:
            self._schema_bytes.move_to_end(schema)
        return cached

    def _remember(self, cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
        cache[key] = value
        if len(cache) > self._cache_size:
            cache.popitem(last=False)

    def _writer(self, schema: Schema | None) -> Callable[[Any], bytes | None]:
        write = self._writers.get(schema)
        if write is None:
            write = self._build_writer(schema)
            self._remember(self._writers, schema, write)
        else:
            self._writers.move_to_end(schema)
        by_id = self._writers_by_id
        if len(by_id) >= _MAX_ID_CACHE:
            by_id.clear()
        by_id[id(schema)] = (schema, write)  # keeps the schema alive, so its id() cannot be reused
        return write

    def _build_writer(self, schema: Schema | None) -> Callable[[Any], bytes | None]:
        # The writers below inline _dumps (orjson.dumps, then Jackson's escapes only when the output
        # holds a backslash or non-ASCII) because a call costs as much as the checks themselves.
        dumps, escapes, join, failed = orjson.dumps, _jackson_escapes, b"".join, orjson.JSONEncodeError
        if schema is None:
            head = b'{"schema":null,"payload":' if self._envelope else b""

            def write_schemaless(value: Any) -> bytes | None:
                if value is None:
                    return None  # a tombstone
                try:
                    payload = dumps(value if type(value) is str else _schemaless_json(value))
                except failed as exc:
                    raise _serialization_error(exc) from exc
                if 92 in payload or not payload.isascii():
                    payload = escapes(payload)
                return join((head, payload, b"}")) if head else b"%b" % payload

            return write_schemaless

        node = self._encoders.node(schema)
        convert, fast = node.fn, node.fast
        if node.f64 or fast is int:
            fast = None  # the generic path below handles range checks and Java's float layout
        if not self._envelope:

            def write_plain(value: Any) -> bytes:
                try:
                    payload = dumps(value if type(value) is fast else convert(value))
                except failed as exc:
                    raise _serialization_error(exc) from exc
                if 92 in payload or not payload.isascii():
                    return escapes(payload)
                # "%b" copies orjson's output into a right-sized object: orjson returns bytes shrunk
                # from a 1 KiB buffer, and keeping thousands of those alive costs ~1.5 µs each in
                # fresh-memory page faults, against ~50 ns for the copy.
                return b"%b" % payload

            return write_plain

        head = b'{"schema":' + self.as_json_schema(schema) + b',"payload":'

        def write_envelope(value: Any) -> bytes:
            try:
                payload = dumps(value if type(value) is fast else convert(value))
            except failed as exc:
                raise _serialization_error(exc) from exc
            if 92 in payload or not payload.isascii():
                payload = escapes(payload)
            return join((head, payload, b"}"))  # one allocation; head + payload + b"}" copies twice

        return write_envelope

    # -- bytes → Connect data ------------------------------------------------------------------

    def to_connect_data(self, topic: str, data: bytes | None, headers: Headers | None = None) -> SchemaAndValue:
        """Deserialize ``data``; malformed input raises :class:`DataError` saying what was expected."""
        return self._read(data)

    def to_connect_batch(self, topic: str, datas: Sequence[bytes | None]) -> tuple[list[Schema | None], list[Any]]:
        """Deserialize many values of one topic into ``(schemas, values)``."""
        if not self._envelope:
            loads = orjson.loads
            try:
                return [None] * len(datas), [None if d is None else loads(d) for d in datas]
            except orjson.JSONDecodeError:
                pass  # find the bad one and report it the usual way
        results = list(map(self._read, datas))
        return [r[0] for r in results], [r[1] for r in results]

    def check_batch(self, topic: str, datas: Sequence[bytes | None]) -> str | None:
        """``"json"`` when every value is one complete JSON document (or null), checked in one pass
        over the batch without building any object; schemaless only (an envelope needs its schema
        read anyway).

        The values are joined into one JSON array and validated with msgspec's ``Raw`` decoder,
        about a quarter of the cost of parsing them. Each element must span exactly its own value
        (same length, so no value spilled into its neighbour and none had stray whitespace, which
        Jackson would read differently when empty) and the whole must be valid UTF-8.
        """
        if self._envelope:
            return None
        parts = [b"null" if d is None else d for d in datas]
        blob = b"".join((b"[", b",".join(parts), b"]"))
        try:
            elements = _RAW_ARRAY.decode(blob)
            blob.decode("utf-8")
        except (msgspec.DecodeError, UnicodeDecodeError):
            return None
        if len(elements) != len(parts) or list(map(len, elements)) != list(map(len, parts)):
            return None
        return "json"

    def as_connect_schema(self, json_schema: Mapping[str, Any]) -> Schema:
        """Connect's ``asConnectSchema``: a parsed JSON schema object → :class:`Schema` (cached)."""
        return self._reader_for(dict(json_schema))[0]

    def _read(self, data: bytes | None) -> SchemaAndValue:
        if data is None:
            return _NULL
        if not self._envelope:
            try:
                return _new_sv(SchemaAndValue, (None, orjson.loads(data)))
            except orjson.JSONDecodeError as exc:
                return self._unparseable(data, exc)
        if type(data) is not bytes:
            data = bytes(data)
        prefix = self._last_prefix
        # Fast path: the envelope starts with the bytes of the last schema seen, so only the
        # payload needs parsing and the schema needs no lookup.
        if prefix is not None and data.startswith(prefix) and data.endswith(b"}"):
            try:
                payload = orjson.loads(data[len(prefix) : -1])  # a bytes slice parses faster than a memoryview
                return _new_sv(SchemaAndValue, (self._last_schema, self._last_reader(payload)))
            except (orjson.JSONDecodeError, _NeedExactNumbers):
                pass  # not what it looked like, or needs exact numbers: take the general path
        return self._read_envelope(data)

    def _read_envelope(self, data: bytes) -> SchemaAndValue:
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            return self._unparseable(data, exc)
        if type(doc) is not dict or len(doc) != 2 or "schema" not in doc or "payload" not in doc:
            raise DataError(ENVELOPE_ERROR)
        schema_json = doc["schema"]
        if schema_json is None:
            return SchemaAndValue(None, doc["payload"])
        schema, read, prefix = self._reader_for(schema_json, data)
        if data.startswith(prefix):
            self._last_prefix, self._last_schema, self._last_reader = prefix, schema, read
        try:
            value = read(doc["payload"])
        except _NeedExactNumbers:
            value = read(self._exact(data)["payload"])
        return SchemaAndValue(schema, value)

    def _reader_for(self, schema_json: Any, data: bytes | None = None) -> tuple[Schema, Callable[[Any], Any], bytes]:
        key = orjson.dumps(schema_json, default=str)  # str() covers Decimals from an exact parse
        entry = self._readers.get(key)
        if entry is None:
            try:
                schema = self._decoders.schema(schema_json)
            except _NeedExactNumbers:
                # A NUMERIC Decimal default: orjson made it a float, so read the schema exactly.
                if data is None:
                    raise DataError(
                        "A Decimal default in this schema was parsed as a float; parse the JSON with "
                        "parse_float=decimal.Decimal"
                    ) from None
                schema = self._decoders.schema(self._exact(data)["schema"])
            prefix = b'{"schema":' + self.as_json_schema(schema) + b',"payload":'
            entry = (schema, self._decoders.node(schema).fn, prefix)
            self._remember(self._readers, key, entry)
        else:
            self._readers.move_to_end(key)
        return entry

    @staticmethod
    def _exact(data: bytes) -> Any:
        """Parse again keeping every non-integral number as an exact :class:`decimal.Decimal`."""
        try:
            return _stdjson.loads(data, parse_float=decimal.Decimal, parse_constant=_reject_constant)
        except ValueError as exc:
            raise DataError(
                f"Converting byte[] to Kafka Connect data failed due to serialization error: {exc}"
            ) from exc

    def _unparseable(self, data: Any, exc: Exception) -> SchemaAndValue:
        if not bytes(data).strip():
            # Jackson reads empty input as a missing node: no value, or not an envelope.
            if self._envelope:
                raise DataError(ENVELOPE_ERROR) from None
            return _NULL
        raise DataError(f"Converting byte[] to Kafka Connect data failed due to serialization error: {exc}") from exc

    # -- headers -------------------------------------------------------------------------------

    def from_connect_header(self, topic: str, key: str, schema: Schema | None, value: Any) -> bytes | None:
        """Serialize a header value exactly as a record value."""
        return self.from_connect_data(topic, schema, value)

    def to_connect_header(self, topic: str, key: str, data: bytes | None) -> SchemaAndValue:
        """Deserialize a header value exactly as a record value."""
        return self.to_connect_data(topic, data)


def _identity(value: Any) -> Any:
    return value


#: Validates a JSON array and returns each element's bytes, building no Python object per value.
_RAW_ARRAY = msgspec.json.Decoder(list[msgspec.Raw])
