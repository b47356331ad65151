"""Binlog positions in Debezium's offset keys, and what a restart skips."""

from __future__ import annotations

from sluice.connectors.source.binlog_cdc.positions import BinlogPosition, merge_gtid


def test_mariadb_gtid_state_keeps_the_last_gtid_of_each_domain() -> None:
    assert merge_gtid(None, "0-1-5") == "0-1-5"
    assert merge_gtid("0-1-5", "0-1-6") == "0-1-6"
    assert merge_gtid("0-1-6,2-3-9", "1-1-1") == "0-1-6,1-1-1,2-3-9"
    assert merge_gtid("0-1-6,1-1-1", "1-2-2") == "0-1-6,1-2-2"


def test_mysql_gtid_set_adds_the_transaction_to_its_source_intervals() -> None:
    uuid = "3e11fa47-71ca-11e1-9e33-c80aa9429562"
    other = "4a11fa47-71ca-11e1-9e33-c80aa9429562"
    assert merge_gtid(None, f"{uuid}:1") == f"{uuid}:1"
    assert merge_gtid(f"{uuid}:1-5", f"{uuid}:6") == f"{uuid}:1-6"
    assert merge_gtid(f"{uuid}:1-5:8", f"{uuid}:7") == f"{uuid}:1-5:7-8"
    assert merge_gtid(f"{uuid}:1-5:7", f"{uuid}:6") == f"{uuid}:1-7"
    assert merge_gtid(f"{uuid}:1-5,\n{other}:3", f"{other}:9") == f"{uuid}:1-5,{other}:3:9"


def test_offsets_point_at_the_transaction_start_with_events_to_skip() -> None:
    position = BinlogPosition(file="bin.000002", restart_pos=500, restart_gtids="0-1-9", gtids="0-1-9")
    assert position.offset() == {"gtids": "0-1-9", "file": "bin.000002", "pos": 500}
    position.server_id, position.ts_sec = 1, 1700000000
    position.begin(600, "0-1-10")
    position.event_done()  # the GTID event
    position.event_done()  # a table map
    assert position.offset() == {
        "server_id": 1, "gtids": "0-1-9", "file": "bin.000002", "pos": 600, "event": 2, "ts_sec": 1700000000,
    }  # fmt: skip
    position.commit(900)
    assert position.offset() == {"server_id": 1, "gtids": "0-1-10", "file": "bin.000002", "pos": 900, "ts_sec": 1700000000}
    position.rotate("bin.000003", 4)
    assert position.offset()["file"] == "bin.000003" and position.offset()["pos"] == 4


def test_a_resumed_position_skips_the_delivered_events_then_rows() -> None:
    position = BinlogPosition.resume({"file": "bin.000002", "pos": 600, "gtids": "0-1-9", "event": 2, "row": 3})
    position.begin(600, "0-1-10")  # the stream starts again at the transaction's GTID event
    assert position.skipping
    position.event_done()
    assert position.skipping and position.rows_to_skip() == 0
    position.event_done()
    assert not position.skipping
    assert position.rows_to_skip() == 3  # of the first row event after the skipped ones
    assert position.rows_to_skip() == 0  # once
    position.commit(900)
    assert position.gtids == "0-1-10" and position.offset()["pos"] == 900 and "event" not in position.offset()
