"""How fast Python reads a MariaDB binlog: the measurement behind the binlog CDC source's reader.

Run: ``python -m benchmarks.binlog_reader``. It starts a private MariaDB (Debian's ``mariadbd``)
with the binary log the source reads (:data:`tests.services.mariadb.BINLOG_SETTINGS`: ROW format,
FULL images and metadata), or uses ``SLUICE_BENCH_MARIADB_PORT`` (root, no password, on
127.0.0.1) when set. ``SLUICE_BENCH_BINLOG_ROWS`` (100,000) rows of a 10-column table (the kind a
user has: bigint key, int, varchar, decimal, double, datetime, date, tinyint, text, nullable int)
are inserted in transactions of 1,000 rows, then the binlog holding them is read three ways, each
from its first position to its end (non-blocking), in this process:

1. **raw packets**: the replication protocol alone (PyMySQL's packet reads over the same
   ``COM_BINLOG_DUMP``): the limit any Python reader that uses PyMySQL's socket has;
2. **mysql-replication**: ``BinLogStreamReader`` decoding every row event (``event.rows``: the
   values as Python objects, what the source converts to Debezium's values);
3. **mysql-replication, rows only**: the same with ``only_events`` limited to row events (the
   library still decodes table maps and rotations).

Prints rows/s and CPU seconds per 100,000 rows for each, and the CPU of (2) and (3) as a multiple of (1)'s.
No assertions: a benchmark measures.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from typing import Any

import pymysql
from pymysql.constants.COMMAND import COM_BINLOG_DUMP

ROWS = int(os.environ.get("SLUICE_BENCH_BINLOG_ROWS", "100000"))
TXN_ROWS = 1000
DATABASE = "bench_binlog"


def _server() -> tuple[int, Callable[[], None]]:
    port = os.environ.get("SLUICE_BENCH_MARIADB_PORT")
    if port:
        return int(port), lambda: None
    from tests.services.mariadb import MariaDbServer  # the test launcher, as the other benchmarks use it

    server = MariaDbServer(kill_with_parent=True, binlog=True).start()
    assert server.port is not None
    return server.port, server.stop


def _connect(port: int, **kwargs: Any) -> pymysql.connections.Connection[Any]:
    return pymysql.connect(host="127.0.0.1", port=port, user="root", autocommit=True, local_infile=False, **kwargs)


def _fill(port: int) -> tuple[str, int, int]:
    """Create the table and insert the rows; ``(binlog file, start position, end position)``."""
    conn = _connect(port)
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        cur.execute(f"CREATE DATABASE {DATABASE}")
        cur.execute(
            f"CREATE TABLE {DATABASE}.orders (id BIGINT PRIMARY KEY, qty INT NOT NULL, name VARCHAR(64), "
            "price DECIMAL(10,2), ratio DOUBLE, created DATETIME(3), day DATE, flag TINYINT, note TEXT, extra INT)"
        )
        cur.execute("FLUSH BINARY LOGS")  # a binlog of its own: the readers start at its beginning
        cur.execute("SHOW MASTER STATUS")
        file, start = cur.fetchone()[:2]
        row = "(%s, %s, %s, 12.34, 0.5, '2024-03-01 10:11:12.345', '2024-03-01', 1, 'some note text', NULL)"
        for first in range(0, ROWS, TXN_ROWS):
            n = min(TXN_ROWS, ROWS - first)
            args: list[Any] = []
            for i in range(first, first + n):
                args += [i, i % 97, f"name-{i}"]
            cur.execute("BEGIN")
            cur.execute(f"INSERT INTO {DATABASE}.orders VALUES " + ",".join([row] * n), args)
            cur.execute("COMMIT")
        cur.execute("SHOW MASTER STATUS")
        end = cur.fetchone()[1]
    conn.close()
    return file, start, end


def _raw(port: int, file: str, end: int) -> tuple[int, float, float]:
    """Read the binlog's packets without decoding them: ``(packets, wall s, CPU s)``."""
    conn = _connect(port)
    with conn.cursor() as cur:
        cur.execute("SET @master_binlog_checksum = @@global.binlog_checksum")
        cur.execute("SET @mariadb_slave_capability = 4")
    name = file.encode()
    packet = struct.pack("<i", len(name) + 11) + bytes([COM_BINLOG_DUMP]) + struct.pack("<IHI", 4, 1, 4242) + name
    t0, c0 = time.perf_counter(), time.process_time()
    conn._write_bytes(packet)  # the replication protocol has no public API in PyMySQL
    conn._next_seq_id = 1
    packets = 0
    while True:
        pkt = conn._read_packet()
        if pkt.is_eof_packet():
            break
        packets += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    conn.close()
    return packets, wall, cpu


def _library(port: int, file: str, end: int, rows_only: bool) -> tuple[int, float, float]:
    """``BinLogStreamReader`` over the binlog, every row's values decoded: ``(rows, wall s, CPU s)``."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    only = [WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent] if rows_only else None
    settings = {"host": "127.0.0.1", "port": port, "user": "root", "passwd": "", "local_infile": False}
    t0, c0 = time.perf_counter(), time.process_time()
    stream = BinLogStreamReader(
        settings,
        server_id=4243,
        log_file=file,
        log_pos=4,
        resume_stream=True,
        blocking=False,
        only_events=only,
        only_schemas=[DATABASE],
        enable_logging=False,
    )
    rows = 0
    for event in stream:
        if isinstance(event, WriteRowsEvent):
            for row in event.rows:
                values = row["values"]
                rows += 1 if values is not None else 0
        if stream.log_pos is not None and stream.log_pos >= end and stream.log_file == file:
            break
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    stream.close()
    return rows, wall, cpu


def main() -> None:
    port, stop = _server()
    try:
        t0 = time.perf_counter()
        file, start, end = _fill(port)
        print(f"binlog {file}: {ROWS:,} rows in {ROWS // TXN_ROWS} transactions, {end - start:,} bytes, "
              f"inserted in {time.perf_counter() - t0:.1f}s")  # fmt: skip
        packets, raw_wall, raw_cpu = _raw(port, file, end)
        per = 100_000 / ROWS
        print(f"raw packets:                 {packets:,} packets, {ROWS / raw_wall:>10,.0f} rows/s, "
              f"{raw_cpu * per:6.2f} CPU s per 100k rows")  # fmt: skip
        for rows_only in (False, True):
            rows, wall, cpu = _library(port, file, end, rows_only)
            label = "mysql-replication (rows only)" if rows_only else "mysql-replication"
            print(f"{label:29s}{rows:,} rows,    {rows / wall:>10,.0f} rows/s, {cpu * per:6.2f} CPU s per 100k rows, "
                  f"{cpu / max(raw_cpu, 1e-9):,.0f}x the raw limit's CPU")  # fmt: skip
    finally:
        stop()


if __name__ == "__main__":
    main()
