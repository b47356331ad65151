"""Builders of pgoutput protocol-1 messages (as XLogData copy messages) for the decoder tests."""

from __future__ import annotations

import struct
from collections.abc import Sequence

_PG_EPOCH_US = 946_684_800_000_000

Value = bytes | None | str  # "u" marks an unchanged TOAST value


def xlog(lsn: int, payload: bytes) -> bytes:
    return b"w" + struct.pack(">QQQ", lsn, lsn, 0) + payload


def begin(final_lsn: int, commit_unix_us: int, xid: int) -> bytes:
    return xlog(final_lsn, b"B" + struct.pack(">QQI", final_lsn, commit_unix_us - _PG_EPOCH_US, xid))


def commit(commit_lsn: int, end_lsn: int, commit_unix_us: int) -> bytes:
    return xlog(end_lsn, b"C" + struct.pack(">BQQQ", 0, commit_lsn, end_lsn, commit_unix_us - _PG_EPOCH_US))


def relation(relid: int, schema: str, name: str, columns: Sequence[tuple[str, int, int, bool]], identity: bytes = b"d") -> bytes:
    body = b"R" + struct.pack(">I", relid) + schema.encode() + b"\0" + name.encode() + b"\0" + identity
    body += struct.pack(">H", len(columns))
    for col, oid, typmod, is_key in columns:
        body += bytes([1 if is_key else 0]) + col.encode() + b"\0" + struct.pack(">Ii", oid, typmod)
    return xlog(0, body)


def tuple_data(values: Sequence[Value]) -> bytes:
    out = struct.pack(">H", len(values))
    for v in values:
        if v is None:
            out += b"n"
        elif v == "u":
            out += b"u"
        else:
            assert isinstance(v, bytes)
            out += b"t" + struct.pack(">I", len(v)) + v
    return out


def insert(lsn: int, relid: int, values: Sequence[Value]) -> bytes:
    return xlog(lsn, b"I" + struct.pack(">I", relid) + b"N" + tuple_data(values))


def update(lsn: int, relid: int, new: Sequence[Value], old: Sequence[Value] | None = None, old_kind: bytes = b"O") -> bytes:
    body = b"U" + struct.pack(">I", relid)
    if old is not None:
        body += old_kind + tuple_data(old)
    return xlog(lsn, body + b"N" + tuple_data(new))


def delete(lsn: int, relid: int, old: Sequence[Value], old_kind: bytes = b"K") -> bytes:
    return xlog(lsn, b"D" + struct.pack(">I", relid) + old_kind + tuple_data(old))


def message(lsn: int, prefix: str, content: bytes) -> bytes:
    return xlog(lsn, b"M" + struct.pack(">BQ", 0, lsn) + prefix.encode() + b"\0" + struct.pack(">I", len(content)) + content)
