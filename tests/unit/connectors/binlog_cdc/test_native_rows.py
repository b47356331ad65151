"""The native row decoder on row images built by hand: the values a Debezium user reads, and the
tables it leaves to the Python path (the differential test against ``mysql-replication`` on a real
server is ``tests/integration/test_binlog_cdc_native.py``)."""

from __future__ import annotations

import decimal
import struct
from types import SimpleNamespace
from typing import Any

import pytest
from pymysqlreplication.constants import FIELD_TYPE

from sluice.connectors.source.binlog_cdc import native_rows
from sluice.connectors.source.binlog_cdc.source_block import source_schema
from sluice.connectors.source.binlog_cdc.tables import Column, Table
from sluice.connectors.source.binlog_cdc.types import ColumnInfo, TypeModes, column_type
from tests.unavailable import unavailable

if not native_rows.available():
    unavailable("sluice_native has no BinlogRowsDecoder (build native/: make setup)", allow_module_level=True)


def _map_column(name: str, kind: int, **meta: Any) -> Any:
    base = {
        "name": name,
        "type": kind,
        "unsigned": False,
        "character_set_name": None,
        "enum_values": None,
        "set_values": None,
    }
    return SimpleNamespace(**{**base, **meta})


MAP = [
    _map_column("id", FIELD_TYPE.LONG),
    _map_column("name", FIELD_TYPE.VARCHAR, max_length=40, character_set_name="utf8mb4"),
    _map_column("tm", FIELD_TYPE.TIME2, fsp=6),
    _map_column("amount", FIELD_TYPE.NEWDECIMAL, precision=10, decimals=3),
    _map_column("d", FIELD_TYPE.DATE),
    _map_column("s", FIELD_TYPE.SET, size=1, set_values=["a", "b", "c"]),
    _map_column("n", FIELD_TYPE.LONG),
]
INFOS = [
    ColumnInfo("id", "int", "int(11)", False),
    ColumnInfo("name", "varchar", "varchar(10)", True),
    ColumnInfo("tm", "time", "time(6)", True, datetime_precision=6),
    ColumnInfo("amount", "decimal", "decimal(10,3)", True, precision=10, scale=3),
    ColumnInfo("d", "date", "date", True),
    ColumnInfo("s", "set", "set('a','b','c')", False),
    ColumnInfo("n", "int", "int(11)", False),
]


def _table(modes: TypeModes) -> Table:
    columns = []
    for info in INFOS:
        ctype = column_type(info, modes)
        assert ctype is not None
        columns.append(Column(info.name, ctype, info.nullable))
    return Table("db", "t", columns, ["id"], "p", source_schema("mariadb"), tuple(i.name for i in INFOS))


def _row(set_mask: int) -> bytes:
    name = "héllo".encode()
    return b"".join(
        (
            bytes([0b0100_0000]),  # null bitmap: n is null
            struct.pack("<i", -5),
            bytes([len(name)]) + name,
            bytes.fromhex("7fffffffffff"),  # TIME(6) -00:00:00.000001
            bytes.fromhex("7fed2978fc84"),  # DECIMAL(10,3) -1234567.891
            (2024 * 512 + 2 * 32 + 29).to_bytes(3, "little"),  # DATE 2024-02-29
            bytes([set_mask]),
        )
    )


def test_row_images_become_debezium_values() -> None:
    decoder = native_rows.decoder_for(_table(TypeModes()), MAP)
    assert decoder is not None
    body = b"header" + _row(0b101) + _row(0)
    rows = decoder.decode(body, 6, len(body), b"\x7f")
    expected = {
        "id": -5,
        "name": "héllo",
        "tm": -1,
        "amount": decimal.Decimal("-1234567.891"),
        "d": 19782,
        "s": "a,c",
        "n": 0,
    }
    assert rows == [expected, {**expected, "s": ""}]  # a required null: the fallback; an empty SET: ""
    assert str(rows[0]["amount"]) == "-1234567.891"


def test_a_surprise_in_the_bytes_is_left_to_the_python_path() -> None:
    decoder = native_rows.decoder_for(_table(TypeModes()), MAP)
    body = _row(0b101)
    with pytest.raises(ValueError):
        decoder.decode(body[:-1], 0, len(body) - 1, b"\x7f")  # ends inside the row
    bad = body.replace("héllo".encode(), b"h\xffllo\x00")
    with pytest.raises(ValueError):
        decoder.decode(bad, 0, len(bad), b"\x7f")  # not UTF-8


def test_conversions_it_does_not_do_leave_the_table_to_the_python_path() -> None:
    assert native_rows.decoder_for(_table(TypeModes(time_precision_mode="connect")), MAP) is None
    assert native_rows.decoder_for(_table(TypeModes(decimal_handling_mode="string")), MAP) is None
    latin1 = [*MAP[:1], _map_column("name", FIELD_TYPE.VARCHAR, max_length=10, character_set_name="latin1"), *MAP[2:]]
    assert native_rows.decoder_for(_table(TypeModes()), latin1) is None
