"""A PostgreSQL transaction sent without waiting for its outcome.

Most of a batch write is the server's work: parsing the COPY data, updating indexes, committing.
Waiting for it inline makes that work and the runtime's own (consume, JSON decode of the next
batch) take turns. Instead the whole transaction goes out as one simple-protocol query,
``BEGIN; COPY … FROM STDIN; [INSERT … SELECT … ON CONFLICT …;] COMMIT``, the COPY data follows,
and the call returns; the results are read when the task next needs the connection (the next
``put``, ``flush`` or ``pre_commit``), by which time the server has usually finished. No thread
is involved, so nothing competes for the GIL.

Uses psycopg 3's libpq wrapper (``Connection.pgconn``) and its public generator functions, the
way psycopg's own ``Copy`` object does.
"""

from __future__ import annotations

from typing import Any

_CHUNK = 128 * 1024  # psycopg's advice: put_copy_data with bounded buffers


class InFlight:
    """The outcome of a sent transaction, to be read with :meth:`collect`."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def collect(self) -> None:
        """Read every result; on failure roll back and raise the server's error as psycopg's exception."""
        from psycopg import errors, generators, pq

        raw = self.raw
        pgconn = raw.pgconn
        error: Any = None
        while True:
            results = raw.wait(generators.fetch_many(pgconn))
            if not results:
                break
            for result in results:
                if result.status == pq.ExecStatus.FATAL_ERROR and error is None:
                    error = errors.error_from_result(result, encoding=_encoding(raw))
        if error is not None or pgconn.transaction_status != pq.TransactionStatus.IDLE:
            _rollback(raw)
            raise error if error is not None else RuntimeError("the sent transaction did not commit")


def send_copy_transaction(raw: Any, copy_sql: str, data: bytes, after: str = "") -> InFlight | None:
    """Send ``BEGIN; <copy_sql>; <after>; COMMIT`` and ``data`` for the COPY; do not wait.

    Returns ``None`` (nothing sent, connection idle again) if the server refused the COPY at once;
    the caller then writes the same rows the ordinary way, which raises the error properly.
    """
    from psycopg import generators, pq

    pgconn = raw.pgconn
    if pgconn.transaction_status != pq.TransactionStatus.IDLE:
        return None  # psycopg or SQLAlchemy has a transaction open: not ours to commit
    query = f"BEGIN; {copy_sql}; {after + '; ' if after else ''}COMMIT".encode(_encoding(raw))
    pgconn.send_query(query)
    raw.wait(generators.send(pgconn))
    results = raw.wait(generators.fetch_many(pgconn))
    if not results or results[-1].status != pq.ExecStatus.COPY_IN:
        # Read to the end, so the connection is free again, and roll back.
        while raw.wait(generators.fetch_many(pgconn)):
            pass
        _rollback(raw)
        return None
    view = memoryview(data)
    for start in range(0, len(view), _CHUNK):
        raw.wait(generators.copy_to(pgconn, view[start : start + _CHUNK], flush=False))
    while pgconn.put_copy_end(None) == 0:
        raw.wait(generators.send(pgconn))
    raw.wait(generators.send(pgconn))
    return InFlight(raw)


def _rollback(raw: Any) -> None:
    from psycopg import pq

    if raw.pgconn.transaction_status in (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR):
        raw.pgconn.exec_(b"ROLLBACK")


def _encoding(raw: Any) -> str:
    return str(getattr(raw.pgconn, "_encoding", None) or "utf-8")
