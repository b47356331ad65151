"""The streaming replication protocol over a psycopg 3 (libpq) connection.

psycopg 3 has no replication API, but a ``replication=database`` connection accepts
``START_REPLICATION``, which leaves libpq in COPY BOTH mode; from there libpq's own
``PQgetCopyData`` / ``PQputCopyData`` (psycopg's ``pgconn`` wrapper) carry the stream. This is
about twice as fast as polling ``pg_logical_slot_peek_binary_changes`` (which re-decodes from the
slot's restart point on every call) and lets the server decode on another core while we convert.
The surface used is small and documented by libpq, and it stays behind this one class.

What bounds the stream is the server side: the walsender sends (and flushes) every message on
its own, and PostgreSQL's C client ``pg_recvlogical`` writing to ``/dev/null`` receives no more
than this class does (both 280-330k changes/s on the 2-core development box, the walsender at
~95 % of a core), while ``pg_logical_slot_get_binary_changes`` decodes 810-880k/s with no network
in between. ``benchmarks/cdc_source.py`` measures all three in one run.
"""

from __future__ import annotations

import re
import select
import struct
import time
from typing import Any

import psycopg
from psycopg import pq

_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in Unix microseconds
_STATUS = struct.Struct(">cQQQqB")


class ReplicationLost(Exception):
    """The replication connection ended (server restart, network…)."""


class SlotInUse(ReplicationLost):
    """``START_REPLICATION`` was refused because another connection holds the slot (SQLSTATE 55006,
    "replication slot … is active for PID …")."""

    def __init__(self, message: str, slot: str, pid: int | None) -> None:
        super().__init__(message)
        self.slot = slot
        self.pid = pid


_OBJECT_IN_USE = b"55006"
_ACTIVE_PID = re.compile(r"active for PID (\d+)")


class ReplicationStream:
    """``START_REPLICATION SLOT <slot> LOGICAL`` with pgoutput, read message by message.

    Thread: everything runs on the task thread, except :meth:`close`, which may come from a control
    thread (it only cancels and closes the socket, making a blocked read fail promptly).
    """

    def __init__(self, conninfo: dict[str, Any], slot: str, publication: str) -> None:
        self._conninfo = conninfo
        self._slot = slot
        self._publication = publication
        self._conn: psycopg.Connection[Any] | None = None
        self._pgconn: Any = None
        self.received_lsn = 0

    def open(self, start_lsn: int = 0) -> None:
        """Connect and start streaming from ``start_lsn`` (0: the slot's confirmed position)."""
        self._conn = psycopg.connect(**self._conninfo, autocommit=True)
        pgconn = self._conn.pgconn
        publication = self._publication.replace("'", "''")
        slot = self._slot.replace('"', '""')
        command = (
            f'START_REPLICATION SLOT "{slot}" LOGICAL {start_lsn >> 32:X}/{start_lsn & 0xFFFFFFFF:X} '
            f"(proto_version '1', publication_names '{publication}', messages 'true')"
        )
        pgconn.send_query(command.encode())
        result = pgconn.get_result()
        if result is None or result.status != pq.ExecStatus.COPY_BOTH:
            message = pgconn.error_message.decode(errors="replace").strip() if result is not None else ""
            if result is not None and result.error_message:
                message = result.error_message.decode(errors="replace").strip()
            in_use = result is not None and result.error_field(pq.DiagnosticField.SQLSTATE) == _OBJECT_IN_USE
            self.close()
            if in_use:
                pid = _ACTIVE_PID.search(message)
                raise SlotInUse(message, self._slot, int(pid.group(1)) if pid else None)
            raise ReplicationLost(f"START_REPLICATION failed: {message or 'no result'}")
        self._pgconn = pgconn

    @property
    def is_open(self) -> bool:
        return self._pgconn is not None

    @property
    def backend_pid(self) -> int:
        """The server process (walsender) serving this stream; 0 when closed."""
        return int(self._pgconn.backend_pid) if self._pgconn is not None else 0

    def buffered_reader(self) -> Any:
        """libpq's ``get_copy_data`` for this connection, for the read loop's fast path: called with
        1 it returns ``(nbytes, message)`` for a message already received and ``nbytes <= 0`` when
        there is none (then :meth:`read` waits, reports the end of the stream or the error)."""
        if self._pgconn is None:
            raise ReplicationLost("not connected")
        return self._pgconn.get_copy_data

    def read(self, timeout: float) -> Any:
        """The next CopyData message (a memoryview), or ``None`` if none arrived within ``timeout``."""
        pgconn = self._pgconn
        if pgconn is None:
            raise ReplicationLost("not connected")
        try:
            nbytes, data = pgconn.get_copy_data(1)
            if nbytes > 0:
                return data
            if nbytes == 0:
                pgconn.consume_input()
                nbytes, data = pgconn.get_copy_data(1)
                if nbytes > 0:
                    return data
            if nbytes == 0 and timeout > 0:
                readable, _, _ = select.select([pgconn.socket], [], [], timeout)
                if readable:
                    pgconn.consume_input()
                    nbytes, data = pgconn.get_copy_data(1)
                    if nbytes > 0:
                        return data
            if nbytes == 0:
                return None
        except (psycopg.Error, OSError, ValueError) as exc:
            self.close()
            raise ReplicationLost(str(exc) or type(exc).__name__) from exc
        message = pgconn.error_message.decode(errors="replace").strip()
        self.close()
        raise ReplicationLost(message or "the server ended the replication stream")

    def send_status(self, write_lsn: int, flush_lsn: int, reply: bool = False) -> None:
        """A standby status update: the server moves the slot's ``confirmed_flush_lsn`` to ``flush_lsn``."""
        pgconn = self._pgconn
        if pgconn is None:
            return
        now = int(time.time() * 1_000_000) - _PG_EPOCH_US
        message = _STATUS.pack(b"r", write_lsn, flush_lsn, flush_lsn, now, 1 if reply else 0)
        try:
            pgconn.put_copy_data(message)
            pgconn.flush()
        except (psycopg.Error, OSError) as exc:
            self.close()
            raise ReplicationLost(str(exc)) from exc

    def close(self) -> None:
        conn, self._conn, self._pgconn = self._conn, None, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection may fail in many ways
                pass


def pg_timestamp_to_unix_us(pg_us: int) -> int:
    """PostgreSQL's timestamps (µs since 2000-01-01) → µs since the Unix epoch."""
    return pg_us + _PG_EPOCH_US
