"""PostgreSQL's text output of a value → the value Debezium's representation of its type holds.

pgoutput's text tuple format and ``COPY … TO STDOUT`` write the same text, so the stream and the
snapshot share these conversions (:mod:`.types` chooses one per column and its handling modes). The
session's settings make the text predictable: UTC, ISO dates, ``bytea_output=hex`` (see
``PostgresCdcConfig.conninfo``). The native encoder covers some of them, recognised by identity
(:mod:`.native`).
"""

from __future__ import annotations

import base64
import datetime as _dt
import decimal
from binascii import unhexlify
from collections.abc import Callable
from typing import Any

_EPOCH_ORDINAL = _dt.date(1970, 1, 1).toordinal()
_EPOCH_NAIVE = _dt.datetime(1970, 1, 1)
_US = _dt.timedelta(microseconds=1)


def text(x: bytes) -> str:
    return x.decode()


def boolean(x: bytes) -> bool:
    return x == b"t"


def bytea(x: bytes) -> bytes:
    return unhexlify(x[2:]) if x[:2] == b"\\x" else bytea_escape(x)


def bytea_escape(x: bytes) -> bytes:
    # bytea_output=escape: octal escapes and doubled backslashes
    out = bytearray()
    i = 0
    while i < len(x):
        c = x[i]
        if c == 92 and x[i + 1 : i + 2] == b"\\":
            out.append(92)
            i += 2
        elif c == 92:
            out.append(int(x[i + 1 : i + 4], 8))
            i += 4
        else:
            out.append(c)
            i += 1
    return bytes(out)


def date_parts(x: bytes) -> _dt.date:
    if len(x) == 10:
        return _dt.date(int(x[0:4]), int(x[5:7]), int(x[8:10]))
    text = x.decode()
    if text == "infinity":
        return _dt.date.max
    if text == "-infinity":
        return _dt.date.min
    if text.endswith(" BC"):  # outside Python's range; clamp like an infinity
        return _dt.date.min
    return _dt.date.fromisoformat(text)


def date_days(x: bytes) -> int:
    if len(x) == 10:
        return _dt.date(int(x[0:4]), int(x[5:7]), int(x[8:10])).toordinal() - _EPOCH_ORDINAL
    return date_parts(x).toordinal() - _EPOCH_ORDINAL


def time_micros(x: bytes) -> int:
    # HH:MM:SS[.ffffff]; 24:00:00 is valid in PostgreSQL
    micros = (int(x[0:2]) * 3600 + int(x[3:5]) * 60 + int(x[6:8])) * 1_000_000
    if len(x) > 9:
        micros += int(x[9:].ljust(6, b"0")[:6])
    return micros


def time_millis(x: bytes) -> int:
    return time_micros(x) // 1000


def time_object(x: bytes) -> _dt.time:
    micros = time_micros(x) % 86_400_000_000
    seconds, us = divmod(micros, 1_000_000)
    return _dt.time(seconds // 3600, seconds // 60 % 60, seconds % 60, us)


def timestamp(x: bytes) -> _dt.datetime:
    text = x.decode()
    try:
        return _dt.datetime.fromisoformat(text)
    except ValueError:
        if text == "infinity":
            return _dt.datetime.max
        return _dt.datetime.min


def timestamp_micros(x: bytes) -> int:
    return (timestamp(x) - _EPOCH_NAIVE) // _US


def timestamp_millis(x: bytes) -> int:
    return (timestamp(x) - _EPOCH_NAIVE) // _US // 1000


def timestamp_connect(x: bytes) -> _dt.datetime:
    return timestamp(x).replace(tzinfo=_dt.UTC)


def zoned_timestamp(digits: int) -> Callable[[bytes], str]:
    """timestamptz text (the session runs in UTC) → ``2024-01-02T03:04:05.123456Z``, the fraction
    padded to the column's precision as Debezium does."""

    def convert(x: bytes) -> str:
        if digits == 6 and len(x) == 29 and x[26:] == b"+00":  # the common case: all six digits, UTC
            text = x.decode()
            return f"{text[:10]}T{text[11:26]}Z"
        text = x.decode()
        if text[-3] in "+-" and text[-2:].isdigit() and len(text) >= 22:
            if text[-3:] != "+00":
                dt = _dt.datetime.fromisoformat(text).astimezone(_dt.UTC)
                return zoned_text(dt, digits)
            body = text[:-3]
            date, _, clock = body.partition(" ")
            whole, _, fraction = clock.partition(".")
            if digits:
                return f"{date}T{whole}.{fraction.ljust(digits, '0')[:digits]}Z"
            return f"{date}T{whole}Z"
        try:
            return zoned_text(_dt.datetime.fromisoformat(text).astimezone(_dt.UTC), digits)
        except ValueError:
            return text  # infinity, BC dates: passed through as PostgreSQL prints them

    return convert


def zoned_text(dt: _dt.datetime, digits: int) -> str:
    base = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if digits:
        return f"{base}.{dt.microsecond:06d}"[: len(base) + 1 + digits] + "Z"
    return base + "Z"


def zoned_time(x: bytes) -> str:
    text = x.decode()
    for i in range(len(text) - 1, 0, -1):
        if text[i] in "+-":
            clock, offset = text[:i], text[i:]
            break
    else:
        return text + "Z"
    sign = -1 if offset[0] == "-" else 1
    parts = [int(p) for p in offset[1:].split(":")] + [0, 0]
    shift = sign * (parts[0] * 3600 + parts[1] * 60 + parts[2]) * 1_000_000
    micros = (time_micros(clock.encode()) - shift) % 86_400_000_000
    seconds, us = divmod(micros, 1_000_000)
    out = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    if us:
        out += f".{us:06d}".rstrip("0")
    return out + "Z"


#: Debezium's average month for PostgreSQL intervals (a year is 12 of them: 365.25 days).
_DAYS_PER_MONTH = 365.25 / 12
_INTERVAL_FIELDS = {"year": 0, "years": 0, "mon": 1, "mons": 1, "day": 2, "days": 2}


def interval_micros(x: bytes) -> int:
    """``1 year 2 mons 3 days 04:05:06.7`` → microseconds, as Debezium's MicroDuration computes them:
    months (a year is 12) count 30.4375 days each, and the sum is taken in floating point in
    Debezium's order and truncated, so the last digit agrees too."""
    fields = [0, 0, 0]  # years, months, days
    hours = minutes = 0
    seconds = 0.0
    parts = x.decode().split()
    i = 0
    while i < len(parts):
        token = parts[i]
        if ":" in token:
            sign = -1 if token.startswith("-") else 1
            clock = token.lstrip("+-").split(":")
            hours, minutes = sign * int(clock[0]), sign * int(clock[1])
            seconds = sign * float(clock[2] if len(clock) > 2 else 0)
            i += 1
        else:
            fields[_INTERVAL_FIELDS[parts[i + 1]]] += int(token)
            i += 2
    days = (fields[0] * 12 + fields[1]) * _DAYS_PER_MONTH + fields[2]
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1e6)


def interval_iso(x: bytes) -> str:
    """``1 year 2 mons 3 days 04:05:06.7`` → ``P1Y2M3DT4H5M6.7S`` (Debezium's io.debezium.time.Interval:
    every field present, the sign on each field, seconds without trailing zeros)."""
    fields = {"year": 0, "mon": 0, "day": 0}
    hours = minutes = 0
    seconds = decimal.Decimal(0)
    parts = x.decode().split()
    i = 0
    while i < len(parts):
        token = parts[i]
        if ":" in token:
            sign = -1 if token.startswith("-") else 1
            clock = token.lstrip("+-").split(":")
            hours, minutes = sign * int(clock[0]), sign * int(clock[1])
            seconds = sign * decimal.Decimal(clock[2] if len(clock) > 2 else 0)
            i += 1
        else:
            fields[parts[i + 1].rstrip("s")] += int(token)
            i += 2
    text = format(seconds.normalize(), "f") if seconds else "0"
    return f"P{fields['year']}Y{fields['mon']}M{fields['day']}DT{hours}H{minutes}M{text}S"


def bytea_base64(x: bytes) -> str:
    return base64.b64encode(bytea(x)).decode()


def bytea_base64_url_safe(x: bytes) -> str:
    return base64.urlsafe_b64encode(bytea(x)).decode()


def bytea_hex(x: bytes) -> str:
    return bytea(x).hex()


#: ``binary.handling.mode`` → the conversion of a bytea column to text.
BINARY_AS_TEXT: dict[str, Callable[[bytes], str]] = {
    "base64": bytea_base64,
    "base64-url-safe": bytea_base64_url_safe,
    "hex": bytea_hex,
}


def numeric(x: bytes) -> decimal.Decimal | None:
    value = decimal.Decimal(x.decode())
    return None if value.is_nan() else value


def variable_decimal(x: bytes) -> dict[str, Any] | None:
    value = decimal.Decimal(x.decode())
    if not value.is_finite():
        return None
    sign, digits, exponent = value.as_tuple()
    scale = -int(exponent)
    unscaled = int("".join(map(str, digits)) or "0") * (-1 if sign else 1)
    if scale < 0:
        unscaled *= 10**-scale
        scale = 0
    return {
        "scale": scale,
        "value": unscaled.to_bytes((unscaled + (unscaled < 0)).bit_length() // 8 + 1, "big", signed=True),
    }


def money(x: bytes) -> decimal.Decimal:
    text = x.decode().replace("$", "").replace(",", "")
    negative = text.startswith("(") or text.startswith("-")
    value = decimal.Decimal(text.strip("()-"))
    return -value if negative else value


def money_scaled(digits: int) -> Callable[[bytes], decimal.Decimal]:
    """money at ``money.fraction.digits`` (rounded half up, as Debezium sets the scale)."""
    quantum = decimal.Decimal(1).scaleb(-digits)

    def convert(x: bytes) -> decimal.Decimal:
        return money(x).quantize(quantum, rounding=decimal.ROUND_HALF_UP)

    return convert


def float_text(x: bytes) -> float:
    return float(x)


# -- array literals --------------------------------------------------------------------------------


def parse_array(x: bytes) -> list[Any]:
    """A one- or more-dimensional array literal (``{1,2,NULL}``, ``{"a b","c\\"d"}``) → nested lists
    of ``bytes`` items (``None`` for NULL). An explicit-bounds prefix (``[0:1]={…}``) is dropped."""
    if x[:1] == b"[":
        x = x[x.index(b"=") + 1 :]
    items, _ = _parse_level(x, 1)
    return items


def _parse_level(x: bytes, pos: int) -> tuple[list[Any], int]:
    out: list[Any] = []
    n = len(x)
    while pos < n:
        c = x[pos]
        if c == 125:  # }
            return out, pos + 1
        if c == 44:  # ,
            pos += 1
            continue
        if c == 123:  # {
            nested, pos = _parse_level(x, pos + 1)
            out.append(nested)
        elif c == 34:  # "
            buf = bytearray()
            pos += 1
            while x[pos] != 34:
                if x[pos] == 92:
                    pos += 1
                buf.append(x[pos])
                pos += 1
            out.append(bytes(buf))
            pos += 1
        else:
            end = pos
            while end < n and x[end] not in (44, 125):
                end += 1
            token = x[pos:end]
            out.append(None if token == b"NULL" else token)
            pos = end
    return out, pos
