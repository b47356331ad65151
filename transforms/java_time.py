"""Java ``SimpleDateFormat`` patterns (``yyyyMMdd``, ``yyyy-MM-dd'T'HH:mm:ss.SSSXXX``) in Python.

Connect's ``TimestampConverter`` and ``TimestampRouter`` take their formats in Java's syntax, and
users copy them from existing connector configs, so Sluice reads the same patterns. A pattern is
compiled once into a list of small formatting functions and a parsing regex; times are in UTC, as
Connect formats them.
"""

from __future__ import annotations

import calendar
import datetime as _dt
import re
from collections.abc import Callable

from sluice.connectors.api.errors import ConfigError, DataError

__all__ = ["JavaDateFormat"]

_MONTHS = list(calendar.month_name)[1:]
_MONTHS_SHORT = list(calendar.month_abbr)[1:]
_DAYS = list(calendar.day_name)
_DAYS_SHORT = list(calendar.day_abbr)

#: Pattern letters and the finest unit (in ms) each one distinguishes, for callers that cache.
_UNIT_MS = {
    "G": 86_400_000, "y": 86_400_000, "Y": 86_400_000, "M": 86_400_000, "L": 86_400_000,
    "w": 86_400_000, "W": 86_400_000, "D": 86_400_000, "d": 86_400_000, "F": 86_400_000,
    "E": 86_400_000, "u": 86_400_000, "a": 3_600_000, "H": 3_600_000, "k": 3_600_000,
    "K": 3_600_000, "h": 3_600_000, "m": 60_000, "s": 1000, "S": 1,
    "z": 86_400_000, "Z": 86_400_000, "X": 86_400_000,
}  # fmt: skip

_Token = tuple[str, int] | str  # (letter, count) or a literal


def _tokenize(pattern: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "'":
            if i + 1 < n and pattern[i + 1] == "'":
                tokens.append("'")
                i += 2
                continue
            end = i + 1
            literal = []
            while True:
                if end >= n:
                    raise ConfigError(f"Unterminated quote in date format {pattern!r}")
                if pattern[end] == "'":
                    if end + 1 < n and pattern[end + 1] == "'":
                        literal.append("'")
                        end += 2
                        continue
                    break
                literal.append(pattern[end])
                end += 1
            tokens.append("".join(literal))
            i = end + 1
        elif ch.isascii() and ch.isalpha():
            if ch not in _UNIT_MS:
                raise ConfigError(f"Illegal pattern character '{ch}' in date format {pattern!r}")
            j = i
            while j < n and pattern[j] == ch:
                j += 1
            tokens.append((ch, j - i))
            i = j
        else:
            tokens.append(ch)
            i += 1
    return tokens


def _offset(dt: _dt.datetime, letter: str, count: int) -> str:
    delta = dt.utcoffset() or _dt.timedelta(0)
    minutes = int(delta.total_seconds()) // 60
    if letter == "X" and minutes == 0:
        return "Z"
    sign = "-" if minutes < 0 else "+"
    hh, mm = divmod(abs(minutes), 60)
    if letter == "X":
        return f"{sign}{hh:02d}" if count == 1 else f"{sign}{hh:02d}{':' if count >= 3 else ''}{mm:02d}"
    return f"{sign}{hh:02d}{mm:02d}"


def _formatter(token: _Token) -> Callable[[_dt.datetime], str]:
    if isinstance(token, str):
        return lambda dt: token
    letter, count = token

    def pad(value: int) -> str:
        return str(value).zfill(count)

    if letter in "yY":
        if count == 2:
            return lambda dt: f"{dt.year % 100:02d}"
        return lambda dt: pad(dt.year)
    if letter in "ML":
        if count >= 4:
            return lambda dt: _MONTHS[dt.month - 1]
        if count == 3:
            return lambda dt: _MONTHS_SHORT[dt.month - 1]
        return lambda dt: pad(dt.month)
    simple: dict[str, Callable[[_dt.datetime], int]] = {
        "d": lambda dt: dt.day,
        "D": lambda dt: dt.timetuple().tm_yday,
        "H": lambda dt: dt.hour,
        "k": lambda dt: dt.hour or 24,
        "K": lambda dt: dt.hour % 12,
        "h": lambda dt: dt.hour % 12 or 12,
        "m": lambda dt: dt.minute,
        "s": lambda dt: dt.second,
        "S": lambda dt: dt.microsecond // 1000,
        "u": lambda dt: dt.isoweekday(),
        "w": lambda dt: dt.isocalendar()[1],
        "W": lambda dt: (dt.day - 1 + dt.replace(day=1).weekday()) // 7 + 1,
        "F": lambda dt: (dt.day - 1) // 7 + 1,
    }
    if letter in simple:
        get = simple[letter]
        return lambda dt: pad(get(dt))
    if letter == "E":
        names = _DAYS if count >= 4 else _DAYS_SHORT
        return lambda dt: names[dt.weekday()]
    if letter == "a":
        return lambda dt: "AM" if dt.hour < 12 else "PM"
    if letter == "G":
        return lambda dt: "AD"
    if letter == "z":
        return lambda dt: dt.tzname() or "UTC"
    return lambda dt: _offset(dt, letter, count)


def _parse_regex(token: _Token) -> str:
    if isinstance(token, str):
        return re.escape(token)
    letter, count = token
    group = f"(?P<{letter}{count}_{{n}}>"
    if letter in "ML" and count >= 3:
        names = _MONTHS if count >= 4 else _MONTHS_SHORT
        return group + "|".join(names) + ")"
    if letter == "E":
        return group + "|".join(_DAYS + _DAYS_SHORT) + ")"
    if letter == "a":
        return group + "AM|PM|am|pm)"
    if letter == "G":
        return group + "AD|BC)"
    if letter == "z":
        return group + "[A-Za-z]+)"
    if letter in "ZX":
        return group + r"Z|[+-]\d{2}(?::?\d{2})?)"
    # Adjacent numbers (yyyyMMdd) only parse with fixed widths; a single letter takes any width.
    return group + (r"\d+)" if count == 1 else rf"\d{{{count}}})")


class JavaDateFormat:
    """A compiled ``SimpleDateFormat`` pattern that formats and parses in UTC."""

    __slots__ = ("pattern", "_formatters", "_regex", "_tokens", "unit_ms")

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self._tokens = _tokenize(pattern)
        self._formatters = [_formatter(t) for t in self._tokens]
        parts = [_parse_regex(t).replace("{n}", str(i)) for i, t in enumerate(self._tokens)]
        self._regex = re.compile("".join(parts))
        #: The finest time unit the pattern shows, so equal outputs can be cached per unit.
        self.unit_ms = min((_UNIT_MS[t[0]] for t in self._tokens if isinstance(t, tuple)), default=86_400_000)

    def format(self, value: _dt.datetime) -> str:
        """``value`` (naive values are taken as UTC) formatted in UTC."""
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.UTC)
        else:
            value = value.astimezone(_dt.UTC)
        return "".join([f(value) for f in self._formatters])

    def parse(self, text: str) -> _dt.datetime:  # noqa: C901 - one branch per letter
        """The UTC instant ``text`` denotes; :class:`DataError` when it does not match the pattern."""
        match = self._regex.fullmatch(text.strip())
        if match is None:
            raise DataError(f"Could not parse timestamp: value ({text}) does not match pattern ({self.pattern})")
        year, month, day, hour, minute, second, micro = 1970, 1, 1, 0, 0, 0, 0
        pm: bool | None = None
        offset = _dt.timedelta(0)
        for name, raw in match.groupdict().items():
            letter, count = name[0], int(name[1:].split("_")[0])
            if letter in "yY":
                year = int(raw)
                if count == 2:
                    year += 2000 if year < 80 else 1900
            elif letter in "ML":
                if count >= 3:
                    names = _MONTHS if count >= 4 else _MONTHS_SHORT
                    month = names.index(raw) + 1
                else:
                    month = int(raw)
            elif letter == "d":
                day = int(raw)
            elif letter == "D":
                start = _dt.date(year, 1, 1) + _dt.timedelta(days=int(raw) - 1)
                month, day = start.month, start.day
            elif letter in "Hk":
                hour = int(raw) % 24
            elif letter in "Kh":
                hour = int(raw) % 12
            elif letter == "m":
                minute = int(raw)
            elif letter == "s":
                second = int(raw)
            elif letter == "S":
                micro = int(raw) * 1000
            elif letter == "a":
                pm = raw.upper() == "PM"
            elif letter in "ZX" and raw != "Z":
                digits = raw[1:].replace(":", "")
                delta = _dt.timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
                offset = -delta if raw[0] == "-" else delta
        if pm is not None and pm:
            hour += 12
        try:
            # Java's lenient calendar rolls milliseconds over; so does adding a timedelta.
            base = _dt.datetime(year, month, day, hour, minute, second, tzinfo=_dt.UTC)
        except ValueError as exc:
            raise DataError(f"Could not parse timestamp: {text!r} with pattern ({self.pattern}): {exc}") from None
        return base + _dt.timedelta(microseconds=micro) - offset
