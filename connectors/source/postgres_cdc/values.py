"""Parsers of the CDC source's config values that its config model and its task share.

Log sequence numbers in PostgreSQL's ``16/B374D848`` spelling and Debezium's
``message.key.columns``.
"""

from __future__ import annotations

import re


def parse_lsn(text: str) -> int:
    """``16/B374D848`` (PostgreSQL's spelling) or a plain integer → the LSN as an integer."""
    text = text.strip()
    if "/" in text:
        high, _, low = text.partition("/")
        return (int(high, 16) << 32) | int(low, 16)
    return int(text)


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_message_key_columns(text: str) -> list[tuple[re.Pattern[str], str, list[str]]]:
    """``message.key.columns`` → ``(table regex, its text, column regexes)`` per entry.

    Debezium's format: ``<schema>.<table>:<column>[,<column>…]`` entries separated by ``;``; the
    table and the columns are regular expressions matched case-insensitively against the whole
    ``schema.table`` and column name."""
    entries = []
    for raw in text.split(";"):
        entry = raw.strip()
        if not entry:
            continue
        table, sep, columns = entry.partition(":")
        names = [c.strip() for c in columns.split(",") if c.strip()]
        if not sep or not table.strip() or not names or ":" in columns:
            raise ValueError(f"entry {entry!r} is not <schema>.<table>:<column>[,<column>...]")
        try:
            pattern = re.compile(table.strip(), re.IGNORECASE)
            for name in names:
                re.compile(name, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"entry {entry!r} has an invalid regular expression: {exc}") from None
        entries.append((pattern, table.strip(), names))
    return entries
