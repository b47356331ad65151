"""Log sequence numbers in PostgreSQL's ``16/B374D848`` spelling, which the config model, the
connector's offset checks and the task share."""

from __future__ import annotations


def parse_lsn(text: str) -> int:
    """``16/B374D848`` (PostgreSQL's spelling) or a plain integer → the LSN as an integer."""
    text = text.strip()
    if "/" in text:
        high, _, low = text.partition("/")
        return (int(high, 16) << 32) | int(low, 16)
    return int(text)


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"
