"""The binlog stream, read with the ``mysql-replication`` package (PyMySQL underneath).

:class:`BinlogReader` connects as a replica (``COM_BINLOG_DUMP`` at a file and position, with
``database.server.id``) through :func:`~.connection.opener` (the least-privilege connection rules
apply to the library's connections too), and asks the server for a heartbeat event whenever the
binlog is quiet for ``poll.interval.ms``, so a poll's blocking read returns in time.

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

from pymysqlreplication import BinLogStreamReader

from sluice.connectors.source.binlog_cdc.config import BinlogCdcConfig
from sluice.connectors.source.binlog_cdc.connection import connection_args, opener

log = logging.getLogger(__name__)


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
        if kwargs.get("database") is None:  # the stream's connection (the library's control one names a database)
            if self._stream_connected:
                raise StreamLost("the binlog connection was lost")
            self._stream_connected = True
        return self._open_connection(**kwargs)

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
