"""How Java writes JSON text: ``Double.toString``/``Float.toString``/``BigDecimal`` numbers and
Jackson's string escapes, for :mod:`sluice.converters.json` (see its docstring for why each matters)."""

from __future__ import annotations

import decimal
import math
import re
import struct
from fractions import Fraction
from functools import lru_cache
from typing import Any

import orjson

from sluice.connectors.api.errors import DataError

ENVELOPE_ERROR = (
    'JsonConverter with schemas.enable requires "schema" and "payload" fields and may not contain additional '
    "fields. If you are trying to deserialize plain JSON data, set schemas.enable=false in your converter "
    "configuration."
)
REQUIRED_NULL_ERROR = "Conversion error: null value for field that is required and has no default value"


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


def dumps(obj: Any) -> bytes:
    """``obj`` (JSON-able: str, int, float, bool, None, lists and dicts of them) as compact JSON
    with Jackson's string escapes: what Connect's ``JsonConverter`` writes for it. For code that
    assembles JsonConverter bytes itself, e.g. a source task serializing its own records (see
    :attr:`connectors.api.SourceTaskContext.serialization`)."""
    try:
        out = orjson.dumps(obj)
    except orjson.JSONEncodeError as exc:
        raise _serialization_error(exc) from exc
    if 92 in out or not out.isascii():  # 92 is "\\"; an int probe is a memchr, ~10x a bytes probe
        out = _jackson_escapes(out)
    return out


