"""``COPY … TO STDOUT`` text: reading it from libpq, splitting it into rows."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import Connection, pq


def lines(text: bytes) -> list[bytes]:
    """The rows of a ``COPY … TO STDOUT`` text, one per line."""
    lines = text.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def copy_out(conn: Connection[Any], statement: bytes) -> bytes:
    """Run ``COPY … TO STDOUT`` and return its text."""
    conn.pgconn.send_query(statement)
    return copy_result(conn)


def copy_result(conn: Connection[Any]) -> bytes:
    """The text of the ``COPY … TO STDOUT`` sent on ``conn``. libpq hands out one row per call;
    going through libpq's wrapper directly costs a fraction of psycopg's per-row generator."""
    pgconn = conn.pgconn
    result = pgconn.get_result()
    while result is not None and result.status == pq.ExecStatus.TUPLES_OK:  # a statement before the COPY
        result = pgconn.get_result()
    if result is None or result.status != pq.ExecStatus.COPY_OUT:
        message = (result.error_message if result is not None else pgconn.error_message).decode(errors="replace")
        while pgconn.get_result() is not None:
            pass
        raise psycopg.DatabaseError(f"snapshot query failed: {message.strip()}")
    chunks: list[Any] = []  # memoryviews; join copies them once
    add = chunks.append
    get = pgconn.get_copy_data
    while True:
        nbytes, data = get(0)
        if nbytes < 0:
            break
        add(data)
    failed = None
    while (result := pgconn.get_result()) is not None:
        if result.status == pq.ExecStatus.FATAL_ERROR:
            failed = result.error_message.decode(errors="replace")
    if failed:
        raise psycopg.DatabaseError(f"snapshot query failed: {failed.strip()}")
    return b"".join(chunks)
