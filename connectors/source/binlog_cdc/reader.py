"""The binlog stream, read with the ``mysql-replication`` package (PyMySQL underneath).

:class:`BinlogReader` connects as a replica (``COM_BINLOG_DUMP`` at a file and position, with
``database.server.id``) through :func:`~.connection.opener` (the least-privilege connection rules
apply to the library's connections too), and asks the server for a heartbeat event whenever the
binlog is quiet for ``poll.interval.ms``, so a poll's blocking read returns in time.

With ``include.query`` the reader also asks a MariaDB server for its annotate rows events (the
statement behind each row event), which MariaDB sends only to a replica that sets
``BINLOG_SEND_ANNOTATE_ROWS_EVENT`` in its ``COM_BINLOG_DUMP`` request. The library sets that flag
only when it reconnects by GTID (``is_mariadb``, ``annotate_rows_event``), never at a file and
position as this reader connects, so :func:`ask_for_annotations` sets it in the request the
library writes. MySQL needs no flag: it sends its rows query events whenever it logs them.

The server keeps one binlog connection per replica server id: when another connection registers
with ``database.server.id`` (a second connector, a replica), the server ends this one with an error
saying so (:func:`lost_to_same_server_id`; measured on MariaDB 10.11: error 4052, "A slave with the
same server_uuid/server_id is already connected"), and the task fails instead of reconnecting, which
would only take the stream back from the other connection, and so on forever.

The library would reconnect by itself after a lost connection, from where it started rather than
where the task stands; the reader refuses that second connection (:class:`StreamLost`) so the task
reconnects from its own position, skipping what it delivered (:mod:`.positions`).

Measured (``benchmarks/binlog_reader.py``, 100,000 rows of 10 columns): the library decodes about
25,000 rows/s per core, some 35 µs of CPU per row, most of it per column in Python. The decoder
therefore leaves the row images to the native row decoder (:mod:`.native_rows`) where it can: the
library parses the rest of each event, and the reader's interface (events in stream order) stays.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader

from sluice.connectors.source.binlog_cdc.config import BinlogCdcConfig
from sluice.connectors.source.binlog_cdc.connection import connection_args, opener

log = logging.getLogger(__name__)

#: The replication command that starts the stream at a file and position, and its flag asking
#: MariaDB for annotate rows events.
_COM_BINLOG_DUMP = 0x12
_SEND_ANNOTATE_ROWS = 0x02

#: The server's errors to a replica connection whose server id a newer connection took: MariaDB's
#: ER_SLAVE_SAME_ID; MySQL's ER_MASTER_FATAL_ERROR_READING_BINLOG (1236), told apart by its text.
_SAME_SERVER_ID = 4052
_FATAL_READING_BINLOG = 1236
_SAME_SERVER_ID_TEXT = "same server_uuid/server_id"


def lost_to_same_server_id(exc: BaseException) -> bool:
    """Whether the server ended the binlog stream because another connection registered with the
    same server id (rather than for a restart or a network failure)."""
    if not isinstance(exc, pymysql.Error) or len(exc.args) < 2:
        return False
    code, message = exc.args[0], str(exc.args[1])
    return code == _SAME_SERVER_ID or (code == _FATAL_READING_BINLOG and _SAME_SERVER_ID_TEXT in message)


def ask_for_annotations(conn: Any) -> None:
    """Set ``BINLOG_SEND_ANNOTATE_ROWS_EVENT`` in the ``COM_BINLOG_DUMP`` request the library will
    write on ``conn``, an open (authenticated) PyMySQL connection to a MariaDB server."""
    write = conn._write_bytes

    def write_bytes(data: bytes) -> None:
        # A command packet: a 3-byte length, sequence id 0, the command; COM_BINLOG_DUMP goes on
        # with the position (4 bytes) and the flags (2 bytes, little-endian).
        if len(data) >= 11 and data[3] == 0 and data[4] == _COM_BINLOG_DUMP:
            flags = int.from_bytes(data[9:11], "little") | _SEND_ANNOTATE_ROWS
            data = data[:9] + flags.to_bytes(2, "little") + data[11:]
        write(data)

    conn._write_bytes = write_bytes


class StreamLost(ConnectionError):
    """The binlog connection broke; the task reconnects from its own position."""


class BinlogReader:
    """One binlog connection at a time. Thread: the task thread (:meth:`close` from any)."""

    def __init__(self, config: BinlogCdcConfig) -> None:
        self.config = config
        self.heartbeat_s = max(0.05, config.poll_interval_ms / 1000)
        self._stream: BinLogStreamReader | None = None
        self._open_connection = opener(config)
        self._stream_connected = False

    @property
    def is_open(self) -> bool:
        return self._stream is not None

    def open(self, file: str, position: int) -> None:
        """Start reading at ``file``/``position`` (the connection opens with the first read)."""
        self.close()
        settings = connection_args(self.config)
        # A silent network failure surfaces as a read timeout (then StreamLost); the server's
        # heartbeats keep a healthy, quiet stream well inside it.
        settings["read_timeout"] = max(30, int(self.heartbeat_s * 10))
        self._stream_connected = False
        self._stream = BinLogStreamReader(
            settings,
            server_id=self.config.server_id,
            log_file=file,
            log_pos=position,
            resume_stream=True,
            blocking=True,
            filter_non_implemented_events=False,  # every event counts for the restart position
            slave_heartbeat=self.heartbeat_s,
            pymysql_wrapper=self._connect,
            enable_logging=False,
        )
        log.info("Reading the binlog from %s:%d as server id %d", file, position, self.config.server_id)

    def _connect(self, **kwargs: Any) -> Any:
        if "db" in kwargs:  # PyMySQL's old name, which the library still uses
            kwargs["database"] = kwargs.pop("db")
        stream = kwargs.get("database") is None  # the library's control connection names a database
        if stream:
            if self._stream_connected:
                raise StreamLost("the binlog connection was lost")
            self._stream_connected = True
        conn = self._open_connection(**kwargs)
        if stream and self.config.include_query and "mariadb" in conn.get_server_info().lower():
            ask_for_annotations(conn)
        return conn

    def read(self, handle: Callable[[Any], None], enough: Callable[[], bool], deadline: float) -> None:
        """Hand events to ``handle`` until ``enough()`` or ``deadline`` (``time.monotonic()``); a quiet
        binlog returns after a server heartbeat. Raises :class:`StreamLost` and PyMySQL's errors."""
        stream = self._stream
        assert stream is not None
        while True:
            event = stream.fetchone()
            if event is None:
                raise StreamLost("the server ended the binlog stream")
            handle(event)
            if enough() or time.monotonic() >= deadline:
                return

    def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - closing a broken connection may fail in many ways
                pass
