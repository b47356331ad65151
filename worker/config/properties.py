"""Java ``.properties`` files, the format Kafka Connect's worker and connector configs use."""

from __future__ import annotations

import re
from pathlib import Path

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATOR = re.compile(r"(?<!\\)(?:\s*[=:]\s*|\s+)")


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and i + 5 < len(text):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append(_ESCAPES.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    """Parse the text of a ``.properties`` file: ``key=value``, ``key: value`` or ``key value``
    lines, ``#``/``!`` comments, backslash line continuations and escapes."""
    result: dict[str, str] = {}
    logical: list[str] = []
    for raw in text.splitlines():
        line = raw.lstrip() if not logical else raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        # An odd number of trailing backslashes continues the line.
        stripped = line.rstrip("\r\n")
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(stripped[:-1])
            continue
        logical.append(stripped)
        entry = "".join(logical)
        logical = []
        match = _SEPARATOR.search(entry)
        if match is None:
            key, value = entry, ""
        else:
            key, value = entry[: match.start()], entry[match.end() :]
        result[_unescape(key)] = _unescape(value)
    if logical:
        entry = "".join(logical)
        match = _SEPARATOR.search(entry)
        key, value = (entry, "") if match is None else (entry[: match.start()], entry[match.end() :])
        result[_unescape(key)] = _unescape(value)
    return result


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a ``.properties`` file."""
    return parse_properties(Path(path).read_text(encoding="utf-8"))
