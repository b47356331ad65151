"""The native row decoder against the Python path, on the same binlog events of a real MariaDB.

Every rows event of the every-type table (and of a table of edge values: negative TIMEs with each
number of fractional digits, DECIMALs of 65 digits, BIT(64), zero dates and datetimes in required
columns, BINARY padding, extreme floats, MINIMAL row images) is decoded both ways — by
``sluice_native.BinlogRowsDecoder`` and by ``mysql-replication`` then :meth:`Table.row` — and the
values of every row must be identical, type for type.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from sluice.connectors.source.binlog_cdc import native_rows
from sluice.connectors.source.binlog_cdc.config import BinlogCdcConfig
from sluice.connectors.source.binlog_cdc.reader import BinlogReader
from sluice.connectors.source.binlog_cdc.source_block import source_schema
from sluice.connectors.source.binlog_cdc.tables import Table, collection_filter, describe
from sluice.connectors.source.binlog_cdc.types import TypeModes
from tests.integration.test_binlog_cdc import ROW_1, TYPES_TABLE
from tests.services.mariadb import MariaDbServer
from tests.unavailable import unavailable

pytestmark = pytest.mark.integration

EDGES_TABLE = """
CREATE TABLE edges (
  id INT PRIMARY KEY,
  tm0 TIME, tm1 TIME(1), tm2 TIME(2), tm3 TIME(3), tm4 TIME(4), tm5 TIME(5), tm6 TIME(6),
  big DECIMAL(65,30), frac DECIMAL(5,5), whole DECIMAL(20,0) NOT NULL DEFAULT 0,
  b64 BIT(64), b9 BIT(9) NOT NULL DEFAULT b'0',
  dtm1 DATETIME(1), dtm3 DATETIME(3), dtm5 DATETIME(5) NOT NULL DEFAULT '2000-01-01', ts6 TIMESTAMP(6) NULL,
  zd DATE NOT NULL DEFAULT '2000-01-01', zdt DATETIME NOT NULL DEFAULT '2000-01-01',
  bin BINARY(8) NOT NULL DEFAULT '', f FLOAT NOT NULL DEFAULT 0, fmd FLOAT(7,3), ub BIGINT UNSIGNED,
  e ENUM('x','y') NOT NULL DEFAULT 'x', st SET('p','q','r') NOT NULL DEFAULT '', t TEXT NOT NULL DEFAULT ''
)
"""

EDGE_ROWS = (
    "SET SESSION sql_mode = ''",  # zero dates and datetimes allowed
    "INSERT INTO edges (id, tm0, tm1, tm2, tm3, tm4, tm5, tm6) VALUES"
    " (1, '-00:00:01', '-00:00:00.1', '-00:00:00.01', '-00:00:00.001', '-00:00:00.0001', '-00:00:00.00001',"
    "  '-00:00:00.000001'),"
    " (2, '-838:59:59', '-12:00:00.9', '-1:02:03.45', '-0:00:01.999', '-0:59:59.5001', '-100:00:00.00009',"
    "  '-838:59:58.999999'),"
    " (3, '838:59:59', '12:00:00.9', '1:02:03.45', '0:00:01.999', '0:59:59.5001', '100:00:00.00009', '00:00:00')",
    "INSERT INTO edges (id, big, frac, whole, b64, b9, dtm1, dtm3, dtm5, ts6, zd, zdt, bin, f, fmd, ub, e, st, t)"
    " VALUES (4, '-12345678901234567890123456789012345.123456789012345678901234567891', '-0.00001',"
    "  99999999999999999999, b'1000000000000000000000000000000000000000000000000000000000000001', b'100000001',"
    "  '1000-01-01 00:00:00.1', '9999-12-31 23:59:59.999', '0000-00-00 00:00:00', '1970-01-01 00:00:01.000001',"
    "  '0000-00-00', '0000-00-00 00:00:00', x'01', 3.40282e38, -1234.567, 9223372036854775808, 'y', 'p,q,r', ''),"
    " (5, '0.000000000000000000000000000001', '0.12345', 0, b'0', b'0', '1969-07-20 20:17:40.5',"
    "  '1899-12-31 23:59:59.001', '2024-02-29 12:00:00.12345', '2038-01-19 03:14:07.999999', '2024-02-29',"
    "  '1970-01-01 00:00:00', x'0102030405060708', 1.17549e-38, 0.001, 0, 'x', '', 'ünïcödé ✓')",
    "UPDATE edges SET tm6 = '-00:00:00.5', big = 0, st = 'q' WHERE id IN (1, 4)",
    # MINIMAL images: an update's before image holds the key only, its after image the changed column.
    "SET SESSION binlog_row_image = 'MINIMAL'",
    "UPDATE edges SET t = 'minimal' WHERE id = 5",
    "DELETE FROM edges WHERE id IN (2, 3)",
    "SET SESSION binlog_row_image = 'FULL'",
    "DELETE FROM edges WHERE id = 5",
)

TYPES_ROWS = (
    ROW_1,
    "INSERT INTO types (id) VALUES (2)",
    "UPDATE types SET vc = 'changed', st = '', e = NULL WHERE id = 1",
    "DELETE FROM types WHERE id = 2",
)


def _sql(server: MariaDbServer, database: str, *statements: str) -> Any:
    conn = server.connect(database)
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            return cur.fetchall()
    finally:
        conn.close()


def _python_images(table: Table, event: Any) -> list[Any]:
    """The event's rows the way the decoder decodes them without the native path."""
    if isinstance(event, UpdateRowsEvent):
        return [
            (
                table.row(r["before_values"], r.get("before_none_sources")),
                table.row(r["after_values"], r.get("after_none_sources")),
            )
            for r in event.rows
        ]
    return [table.row(r["values"], r.get("none_sources")) for r in event.rows]


def _typed(images: list[Any]) -> list[Any]:
    """Values with their types, so that ``1 == 1.0 == True`` cannot hide a difference."""

    def row(values: dict[str, Any]) -> list[Any]:
        return [(name, type(v).__name__, repr(v)) for name, v in values.items()]

    return [tuple(row(v) for v in image) if isinstance(image, tuple) else row(image) for image in images]


def test_native_rows_equal_the_python_path(mariadb: MariaDbServer, mariadb_db: str) -> None:
    if not native_rows.available():
        unavailable("sluice_native has no BinlogRowsDecoder (build native/: make setup)")
    database = mariadb_db.rsplit("/", 1)[-1]
    _sql(mariadb, database, TYPES_TABLE, EDGES_TABLE)
    file, position = _sql(mariadb, database, "SHOW MASTER STATUS")[0][:2]
    _sql(mariadb, database, *TYPES_ROWS)
    _sql(mariadb, database, *EDGE_ROWS)
    (end_file, end_position) = _sql(mariadb, database, "SHOW MASTER STATUS")[0][:2]

    conn = mariadb.connect(database)
    modes = TypeModes()
    table_filter = collection_filter([], [], [], [], [], [])
    schema = source_schema("mariadb")
    try:
        with conn.cursor() as cur:
            tables: dict[str, Table] = {}
            for name in ("types", "edges"):
                table = describe(
                    cur, database, name, topic_prefix="p", source_schema=schema, modes=modes, table_filter=table_filter
                )
                assert table is not None
                tables[name] = table
    finally:
        conn.close()
    config = BinlogCdcConfig.parse(
        {"database.hostname": "127.0.0.1", "database.port": str(mariadb.port), "database.user": "root",
         "topic.prefix": "p", "snapshot.mode": "no_data", "poll.interval.ms": "100",
         "schema.history.internal": "io.debezium.relational.history.MemorySchemaHistory"}
    )  # fmt: skip
    reader = BinlogReader(config)
    compared: dict[str, int] = {"types": 0, "edges": 0}
    decoders: dict[int, Any] = {}
    done = False

    def handle(event: Any) -> None:
        nonlocal done
        if getattr(event, "packet", None) is not None and int(event.packet.log_pos) >= end_position:
            done = True
        if isinstance(event, TableMapEvent) and event.schema == database:
            decoders[event.table_id] = native_rows.decoder_for(tables[event.table], event.columns)
        if not isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)) or event.schema != database:
            return
        table = tables[event.table]
        decoder = decoders[event.table_id]
        assert decoder is not None, f"table {event.table} has no native decoder"
        native = native_rows.decode(decoder, event)
        assert native is not None, f"a rows event of {event.table} was not decoded natively"
        python = _python_images(table, event)
        assert _typed(native) == _typed(python)
        compared[event.table] += len(native)

    reader.open(file, position)
    try:
        deadline = time.monotonic() + 10
        while not done and time.monotonic() < deadline:
            reader.read(handle, lambda: done, min(deadline, time.monotonic() + 1))
    finally:
        reader.close()
    assert file == end_file
    # types: 2 inserts, an update, a delete; edges: 5 inserts, 2 updates, the MINIMAL one, 3 deletes.
    assert compared == {"types": 4, "edges": 11}
