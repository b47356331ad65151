"""The binlog snapshot's own parts: positions as ints, stored keys, watermarks reached in order,
values converted as the binlog reader gives them, and the chunk queries."""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pytest
from pymysql.constants import FIELD_TYPE

from sluice.connectors.api import ConfigError
from sluice.connectors.source.binlog_cdc.config import BINLOG_CDC_UNIMPLEMENTED_KEYS, BinlogCdcConfig
from sluice.connectors.source.binlog_cdc.snapshot import Watermarks
from sluice.connectors.source.binlog_cdc.snapshot_reads import (
    BinlogSnapshotReader,
    SnapshotTable,
    binlog_like_conversions,
    encode,
    key_param,
    key_text,
    position_of,
)
from sluice.connectors.source.binlog_cdc.source_block import source_schema
from sluice.connectors.source.binlog_cdc.tables import Column, Table
from sluice.connectors.source.binlog_cdc.types import ColumnInfo, TypeModes, column_type

BASE = {
    "database.user": "cdc",
    "topic.prefix": "shop",
    "schema.history.internal": "io.debezium.relational.history.MemorySchemaHistory",
}


def test_positions_order_across_binlog_files() -> None:
    assert encode("mariadb-bin.000002", 4) > encode("mariadb-bin.000001", 1 << 30)
    assert position_of(encode("mariadb-bin.000012", 5144), "mariadb-bin.000003") == ("mariadb-bin.000012", 5144)


@pytest.mark.parametrize(
    ("value", "data_type"),
    [
        (9007199254740993, "bigint"),  # beyond a double's precision: bound as an int, not text
        (decimal.Decimal("-12.50"), "decimal"),
        (b"\x00\xff", "varbinary"),
        ("a'b", "varchar"),
        ("101", "bit"),
    ],
)
def test_a_stored_key_binds_as_the_columns_value(value: Any, data_type: str) -> None:
    text = key_text(value)
    assert isinstance(text, str)
    expected = int("101", 2) if data_type == "bit" else value
    assert key_param(text, data_type) == expected


def test_temporal_keys_are_texts_the_server_compares() -> None:
    assert key_text(dt.datetime(2024, 3, 1, 10, 11, 12, 500)) == "2024-03-01 10:11:12.000500"
    assert key_text(-dt.timedelta(hours=838, minutes=59, seconds=59)) == "-838:59:59.000000"


def test_watermarks_take_effect_in_the_order_taken_once_the_stream_reaches_them() -> None:
    fired: list[tuple[str, int]] = []
    marks = Watermarks(lambda text, at: fired.append((text, at)))
    marks.add(10, "L:1")
    marks.add(10, "H:1")
    marks.add(25, "L:2")
    marks.reached(9)
    assert fired == []
    marks.reached(10)
    assert fired == [("L:1", 10), ("H:1", 10)]
    marks.reached(30)
    assert fired[-1] == ("L:2", 25)
    marks.add(40, "H:2")
    marks.clear()
    marks.reached(50)
    assert len(fired) == 3


def test_values_are_converted_as_the_binlog_reader_gives_them() -> None:
    conv = binlog_like_conversions()
    assert conv[FIELD_TYPE.BIT](b"\x08\x01") == "100000000001" and conv[FIELD_TYPE.BIT](b"\x00") == "0"
    assert conv[FIELD_TYPE.DATE]("0000-00-00") is None and conv[FIELD_TYPE.DATE]("2024-02-29") == dt.date(2024, 2, 29)
    assert conv[FIELD_TYPE.DATETIME]("0000-00-00 00:00:00") is None


def _table(primary_key: list[str]) -> SnapshotTable:
    modes = TypeModes()
    columns = [
        Column(name, column_type(ColumnInfo(name, data_type, data_type, True), modes), True)  # type: ignore[arg-type]
        for name, data_type in (("a", "int"), ("b", "varchar"), ("v", "int"))
    ]
    return SnapshotTable(Table("shop", "pairs", columns, primary_key, "p", source_schema("mariadb")), 1)


class _Cursor:
    def __init__(self, log: list[tuple[str, Any]]) -> None:
        self.log = log

    def __enter__(self) -> _Cursor:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def execute(self, sql: str, params: Any = None) -> None:
        self.log.append((sql, params))

    def fetchall(self) -> list[tuple[Any, ...]]:
        return [("a", "int"), ("b", "varchar")]


class _Conn:
    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def cursor(self) -> _Cursor:
        return _Cursor(self.log)


def test_a_chunk_reads_after_the_last_key_in_key_order() -> None:
    reader = BinlogSnapshotReader(lambda at, text: None, lambda: 0)
    conn = _Conn()
    sql, params = reader._chunk_query(conn, _table(["a", "b"]), 7, ["3", "y"])
    assert sql == (
        "SELECT `a`, `b`, `v` FROM `shop`.`pairs` WHERE (`a` > %s) OR (`a` = %s AND `b` > %s) ORDER BY `a`, `b` LIMIT 8"
    )
    assert params == [3, 3, "y"]
    sql, params = reader._chunk_query(conn, _table([]), 7, None)
    assert sql == "SELECT `a`, `b`, `v` FROM `shop`.`pairs`" and params == []  # no key: one read


@pytest.mark.parametrize("mode", ["initial", "initial_only", "when_needed", "always", "no_data", "never"])
def test_snapshot_modes(mode: str) -> None:
    config = BinlogCdcConfig.parse({**BASE, "snapshot.mode": mode})
    assert config.snapshot_mode == ("no_data" if mode == "never" else mode)


def test_snapshot_keys_and_their_errors_name_the_key() -> None:
    config = BinlogCdcConfig.parse(BASE)
    assert (config.snapshot_mode, config.snapshot_locking_mode, config.snapshot_fetch_size) == (
        "initial",
        "minimal",
        10_000,
    )
    for raw, key in (
        ({"snapshot.mode": "configuration_based"}, "snapshot.mode"),
        ({"snapshot.locking.mode": "custom"}, "snapshot.locking.mode"),
        ({"snapshot.max.threads": "2"}, "snapshot.max.threads"),
        ({"signal.data.collection": "just_a_table"}, "signal.data.collection"),
        ({"signal.enabled.channels": "kafka"}, "signal.kafka.bootstrap.servers"),
        ({"snapshot.select.statement.overrides": "shop.t"}, "snapshot.select.statement.overrides.shop.t"),
    ):
        with pytest.raises(ConfigError) as caught:
            BinlogCdcConfig.parse({**BASE, **raw})
        assert key in caught.value.problems or caught.value.key == key
    assert (
        "signal.*" not in BINLOG_CDC_UNIMPLEMENTED_KEYS and "snapshot.fetch.size" not in BINLOG_CDC_UNIMPLEMENTED_KEYS
    )


def test_select_statement_overrides_round_trip_through_the_task_config() -> None:
    raw = {
        **BASE,
        "snapshot.select.statement.overrides": "shop.a,shop.b",
        "snapshot.select.statement.overrides.shop.a": "SELECT * FROM shop.a WHERE x > 1",
        "snapshot.select.statement.overrides.shop.b": "SELECT * FROM shop.b",
    }
    config = BinlogCdcConfig.parse(raw)
    assert config.snapshot_overrides == {"shop.a": "SELECT * FROM shop.a WHERE x > 1", "shop.b": "SELECT * FROM shop.b"}
    again = BinlogCdcConfig.from_task_config(config.to_task_config())
    assert again.snapshot_overrides == config.snapshot_overrides
