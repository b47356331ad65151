"""``include.query``: the key, the replication request that asks MariaDB for its statements, and the
check of the server variable that logs them."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from sluice.connectors.source.binlog_cdc.config import BINLOG_CDC_UNIMPLEMENTED_KEYS, BinlogCdcConfig
from sluice.connectors.source.binlog_cdc.preflight import statement_logging_off
from sluice.connectors.source.binlog_cdc.reader import ask_for_annotations

BASE = {"database.user": "cdc", "topic.prefix": "shop", "schema.history.internal.kafka.topic": "h",
        "schema.history.internal.kafka.bootstrap.servers": "kafka:9092"}  # fmt: skip


def test_include_query_is_a_key_of_its_own_and_off_by_default() -> None:
    assert BinlogCdcConfig.parse(BASE).include_query is False
    assert BinlogCdcConfig.parse({**BASE, "include.query": "true"}).include_query is True
    assert "include.query" not in BINLOG_CDC_UNIMPLEMENTED_KEYS


def _dump_request(flags: int, file: str = "mariadb-bin.000007", pos: int = 1234, server_id: int = 5401) -> bytes:
    """``COM_BINLOG_DUMP`` as the replication library writes it: length and sequence id, the command,
    position, flags, server id, file name."""
    body = bytes([0x12]) + struct.pack("<IHI", pos, flags, server_id) + file.encode()
    return struct.pack("<i", len(body)) + body


class _Wire:
    """What a connection writes."""

    def __init__(self) -> None:
        self.written: list[bytes] = []

    def _write_bytes(self, data: bytes) -> None:
        self.written.append(data)


@pytest.mark.parametrize("flags", [0, 1])  # blocking, and BINLOG_DUMP_NON_BLOCK
def test_the_dump_request_asks_for_annotate_rows_events_and_keeps_the_rest(flags: int) -> None:
    wire = _Wire()
    ask_for_annotations(wire)
    wire._write_bytes(_dump_request(flags))
    assert wire.written == [_dump_request(flags | 0x02)]


def test_other_packets_pass_unchanged() -> None:
    wire = _Wire()
    ask_for_annotations(wire)
    query = b"\x1c\x00\x00\x00\x03SET @mariadb_slave_capability=4"
    register = b"\x12\x00\x00\x00\x15" + bytes(17)  # COM_REGISTER_SLAVE: its length is 0x12
    continued = _dump_request(0)[:3] + b"\x01" + _dump_request(0)[4:]  # a later packet of a sequence
    for packet in (query, register, continued, b"\x01\x00\x00\x00\x12"):
        wire._write_bytes(packet)
    assert wire.written == [query, register, continued, b"\x01\x00\x00\x00\x12"]


class _Cursor:
    """A cursor over ``SHOW GLOBAL VARIABLES`` rows."""

    def __init__(self, rows: list[tuple[str, str]]) -> None:
        self.rows = rows
        self.statements: list[str] = []

    def execute(self, statement: str) -> None:
        self.statements.append(statement)

    def fetchall(self) -> list[tuple[str, str]]:
        return self.rows


@pytest.mark.parametrize(
    ("rows", "off"),
    [
        ([("version", "10.11.6-MariaDB-log"), ("binlog_annotate_row_events", "ON")], None),
        ([("version", "10.11.6-MariaDB-log"), ("binlog_annotate_row_events", "OFF")], "binlog_annotate_row_events"),
        ([("version", "8.0.36"), ("binlog_rows_query_log_events", "ON")], None),
        ([("version", "8.4.0"), ("binlog_rows_query_log_events", "OFF")], "binlog_rows_query_log_events"),
        ([("version", "5.5.62-log")], "binlog_rows_query_log_events"),  # too old to log statements at all
    ],
)
def test_the_variable_that_logs_statements_is_named_when_off(rows: list[tuple[str, str]], off: str | None) -> None:
    cursor: Any = _Cursor(rows)
    assert statement_logging_off(cursor) == off
    assert len(cursor.statements) == 1  # one query, at start
