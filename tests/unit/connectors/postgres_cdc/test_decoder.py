"""pgoutput messages → Debezium change events, without a database."""

from __future__ import annotations

import decimal
from typing import Any

import pytest

from sluice.connectors.cdc.chunks import ChunkWindow
from sluice.connectors.cdc.snapshot import WATERMARK_PREFIX
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.decoder import ChangeDecoder, Relation, TableLoader
from sluice.connectors.source.postgres_cdc.snapshot import postgres_snapshot
from sluice.connectors.source.postgres_cdc.tables import Column, Table
from sluice.connectors.source.postgres_cdc.types import INT4, NUMERIC, TEXT, UNAVAILABLE, TypeModes, column_type
from tests.unit.connectors.postgres_cdc import pgoutput_messages as pg

MODES = TypeModes()
T0 = 1_700_000_000_000_000


def make_table(relid: int, relation: Relation, primary_key: list[str]) -> Table:
    schema, name, identity, columns = relation
    cols = [
        Column(n, oid, typmod, n not in primary_key and n != "name", column_type(oid, typmod, MODES))
        for n, oid, typmod in columns
    ]
    return Table(relid, schema, name, cols, primary_key, identity, "srv", [True] * len(cols))


def decoder(load: TableLoader | None = None, tombstones: bool = True, **kw: Any) -> ChangeDecoder:
    """A decoder of server ``srv``; ``load`` describes relations (default: :func:`make_table`, key ``id``)."""

    def default_load(relid: int, relation: Relation, is_signal: bool) -> tuple[Table | None, bool]:
        return make_table(relid, relation, ["id"]), True

    return ChangeDecoder(
        topic_prefix="srv",
        database="db",
        partition={"server": "srv"},
        tombstones=tombstones,
        skipped_operations={"t"},
        load_table=load or default_load,
        **kw,
    )


COLUMNS = [("id", INT4, -1, True), ("name", TEXT, -1, False), ("price", NUMERIC, (10 << 16 | 2) + 4, False)]


def feed(d: ChangeDecoder, *messages: bytes) -> list[Any]:
    for m in messages:
        d.handle(memoryview(m))
    out: list[Any] = []
    for item in [*d.outbox, d.finish_batch()]:
        out.extend(item)  # a SourceRecordBatch is a sequence of records too
    d.outbox = []
    return out


def test_full_identity_fills_only_unchanged_values_from_the_old_row() -> None:
    """A value set to NULL stays NULL; only an unchanged TOASTed one is taken from the old row."""
    records = feed(
        decoder(),
        pg.relation(16384, "public", "items", COLUMNS),
        pg.begin(1000, T0, 42),
        pg.update(910, 16384, [b"1", "u", None], old=[b"1", b"apple", b"1.50"]),
        pg.commit(1000, 1010, T0),
    )
    assert records[0].value["after"] == {"id": 1, "name": "apple", "price": None}


def test_insert_update_delete_become_debezium_events_with_tombstone() -> None:
    d = decoder()
    records = feed(
        d,
        pg.relation(16384, "public", "items", COLUMNS),
        pg.begin(1000, T0, 42),
        pg.insert(900, 16384, [b"1", b"apple", b"1.50"]),
        pg.update(910, 16384, [b"1", b"pear", "u"], old=[b"1", b"apple", b"1.50"]),
        pg.delete(920, 16384, [b"1", None, None]),
        pg.commit(1000, 1010, T0),
    )
    assert [r.value["op"] if r.value else None for r in records] == ["c", "u", "d", None]
    created = records[0]
    assert created.topic == "srv.public.items"
    assert created.key == {"id": 1}
    assert created.key_schema.name == "srv.public.items.Key"
    assert created.value_schema.name == "srv.public.items.Envelope"
    assert created.value["after"] == {"id": 1, "name": "apple", "price": decimal.Decimal("1.50")}
    source = created.value["source"]
    assert source["ts_ms"] == T0 // 1000 and source["txId"] == 42 and source["lsn"] == 900
    assert source["schema"] == "public" and source["table"] == "items" and source["snapshot"] == "false"
    assert source["sequence"] == '["0","900"]'
    updated = records[1].value
    assert updated["before"]["name"] == "apple"
    # REPLICA IDENTITY FULL: an unchanged TOASTed value is taken from the old row, as Debezium does
    assert updated["after"]["price"] == decimal.Decimal("1.50")
    deleted = records[2].value
    assert deleted["after"] is None
    # REPLICA IDENTITY DEFAULT old key: required non-key columns get Debezium's fallback values
    assert deleted["before"] == {"id": 1, "name": "", "price": None}
    assert records[3].value is None and records[3].key == {"id": 1}
    offset = records[-1].source_offset
    assert offset["lsn_commit"] == 1000 and offset["lsn"] == 1010 and offset["txId"] == 42
    assert d.safe_lsn == 1010


def test_events_serialize_to_debezium_json_through_the_json_converter() -> None:
    """What lands in the topic with ``JsonConverter`` (schemas disabled): null ``before`` and
    ``transaction`` blocks, the decimal as Connect's base64, the sequence's quotes escaped."""
    from sluice.converters.json import JsonConverter

    d = decoder()
    records = feed(
        d,
        pg.relation(16384, "public", "items", COLUMNS),
        pg.begin(1000, T0, 42),
        pg.insert(900, 16384, [b"1", b"app\x1ble", b"1.50"]),
        pg.commit(1000, 1010, T0),
    )
    values = JsonConverter()
    values.configure({"schemas.enable": "false"}, False)
    keys = JsonConverter()
    keys.configure({"schemas.enable": "false"}, True)
    created = records[0]
    data = values.from_connect_data(created.topic, created.value_schema, created.value)
    assert data is not None
    assert data.startswith(b'{"before":null,"after":{"id":1,"name":"app\\u001Ble","price":"AJY="},"source":{')
    assert b'"sequence":"[\\"0\\",\\"900\\"]"' in data
    assert b'"transaction":null,"op":"c"' in data
    assert keys.from_connect_data(created.topic, created.key_schema, created.key) == b'{"id":1}'


def test_unchanged_toast_text_is_marked_like_debezium() -> None:
    d = decoder()
    records = feed(
        d,
        pg.relation(1, "public", "docs", [("id", INT4, -1, True), ("body", TEXT, -1, False)]),
        pg.begin(100, T0, 1),
        pg.update(90, 1, [b"5", "u"]),
        pg.commit(100, 110, T0),
    )
    assert records[0].value["after"] == {"id": 5, "body": UNAVAILABLE}
    assert records[0].value["before"] is None


def test_primary_key_change_is_a_delete_and_a_create() -> None:
    d = decoder()
    records = feed(
        d,
        pg.relation(1, "public", "t", [("id", INT4, -1, True), ("name", TEXT, -1, False)]),
        pg.begin(100, T0, 1),
        pg.update(90, 1, [b"2", b"x"], old=[b"1", None], old_kind=b"K"),
        pg.commit(100, 110, T0),
    )
    assert [(r.key, r.value["op"] if r.value else None) for r in records] == [({"id": 1}, "d"), ({"id": 1}, None), ({"id": 2}, "c")]


def test_replayed_transactions_are_skipped_after_restart() -> None:
    d = decoder()
    d.resume_from(200, 190)  # delivered: everything before commit 200, and up to LSN 190 within it
    records = feed(
        d,
        pg.relation(1, "public", "t", [("id", INT4, -1, True), ("name", TEXT, -1, False)]),
        pg.begin(100, T0, 1),
        pg.insert(90, 1, [b"1", b"a"]),
        pg.commit(100, 110, T0),
        pg.begin(200, T0, 2),
        pg.insert(180, 1, [b"2", b"b"]),
        pg.insert(190, 1, [b"3", b"c"]),
        pg.insert(195, 1, [b"4", b"d"]),
        pg.commit(200, 210, T0),
        pg.begin(300, T0, 3),
        pg.insert(290, 1, [b"5", b"e"]),
        pg.commit(300, 310, T0),
    )
    assert [r.key["id"] for r in records] == [4, 5]


def test_keepalive_moves_the_safe_position_only_between_transactions() -> None:
    d = decoder()
    feed(d, pg.relation(1, "public", "t", [("id", INT4, -1, True)]), pg.begin(100, T0, 1))
    d.keepalive(500)
    assert d.safe_lsn == 0
    feed(d, pg.commit(100, 110, T0))
    d.keepalive(500)
    assert d.safe_lsn == 500


def test_watermark_window_drops_rows_changed_by_the_stream() -> None:
    d = decoder()
    feed(d, pg.relation(1, "public", "t", [("id", INT4, -1, True), ("name", TEXT, -1, False)]))
    table = d.tables[1]
    assert table is not None
    snap = postgres_snapshot(d, lambda name: table, chunk_size=10, incremental_chunk_size=10)
    d.on_message = snap.on_message
    snap.add(["public.t"], "initial")
    window = ChunkWindow("w1", table, "initial")
    for i in (1, 2, 3):
        window.add({"id": i}, {"id": i, "name": "old"})
    window.exhausted = True
    snap.window = window
    records = feed(
        d,
        pg.message(50, WATERMARK_PREFIX, b"L:w1"),
        pg.begin(100, T0, 1),
        pg.update(90, 1, [b"2", b"new"]),
        pg.commit(100, 110, T0),
        pg.message(120, WATERMARK_PREFIX, b"H:w1"),
    )
    assert [(r.value["op"], r.key["id"]) for r in records] == [("u", 2), ("r", 1), ("r", 3)]
    assert records[-1].value["source"]["snapshot"] == "last"
    assert not snap.active and "snapshot_tables" not in records[-1].source_offset


def test_changes_inside_a_prefetched_window_are_dropped_from_its_chunk() -> None:
    """The next chunk's low watermark can reach the stream before that chunk is read: changes
    after it still count against the chunk once its rows arrive."""
    d = decoder()
    feed(d, pg.relation(1, "public", "t", [("id", INT4, -1, True), ("name", TEXT, -1, False)]))
    table = d.tables[1]
    assert table is not None
    snap = postgres_snapshot(d, lambda name: table, chunk_size=2, incremental_chunk_size=2)
    d.on_message = snap.on_message
    snap.add(["public.t"], "initial")
    first, second = ChunkWindow("w1", table, "initial"), ChunkWindow("w2", table, "initial")
    first.add({"id": 1}, {"id": 1, "name": "old"})
    first.last_key = ["1"]
    snap.window = first
    snap._prefetched = (second, 2, None)  # type: ignore[assignment]  # its query sent, not read yet
    records = feed(
        d,
        pg.message(50, WATERMARK_PREFIX, b"L:w1"),
        pg.message(60, WATERMARK_PREFIX, b"H:w1"),
        pg.message(70, WATERMARK_PREFIX, b"L:w2"),
        pg.begin(100, T0, 1),
        pg.update(90, 1, [b"2", b"new"]),
        pg.commit(100, 110, T0),
    )
    assert [(r.value["op"], r.key["id"]) for r in records] == [("r", 1), ("u", 2)]
    # the prefetched chunk's rows arrive and it becomes the current window
    snap._prefetched = None
    second.add({"id": 2}, {"id": 2, "name": "old"})
    second.add({"id": 3}, {"id": 3, "name": "old"})
    second.exhausted = True
    snap.window = second
    records = feed(d, pg.message(120, WATERMARK_PREFIX, b"H:w2"))
    assert [(r.value["op"], r.key["id"]) for r in records] == [("r", 3)]


def test_chunk_progress_is_in_the_offsets_until_the_table_is_done() -> None:
    d = decoder()
    feed(d, pg.relation(1, "public", "t", [("id", INT4, -1, True)]))
    table = d.tables[1]
    assert table is not None
    snap = postgres_snapshot(d, lambda name: table, chunk_size=2, incremental_chunk_size=2)
    d.on_message = snap.on_message
    snap.add(["public.t"], "initial")
    window = ChunkWindow("w1", table, "initial")
    window.add({"id": 1}, {"id": 1})
    window.add({"id": 2}, {"id": 2})
    window.last_key = ["2"]
    snap.window = window
    records = feed(d, pg.message(50, WATERMARK_PREFIX, b"L:w1"), pg.message(60, WATERMARK_PREFIX, b"H:w1"))
    assert records[-1].source_offset["snapshot_tables"] == [["public.t", "initial"]]
    assert records[-1].source_offset["snapshot_key"] == ["2"]
    assert records[-1].source_offset["snapshot"] is True
    restored = postgres_snapshot(decoder(), lambda name: table, chunk_size=2, incremental_chunk_size=2)
    restored.restore(dict(records[-1].source_offset))
    assert restored.pending == [["public.t", "initial"]] and restored.last_key == ["2"]


def test_config_accepts_debezium_keys_and_names_bad_ones() -> None:
    cfg = PostgresCdcConfig.parse(
        {
            "database.hostname": "db",
            "database.port": "5433",
            "database.user": "u",
            "database.password": "secret",
            "database.dbname": "inventory",
            "topic.prefix": "dbserver1",
            "plugin.name": "pgoutput",
            "slot.name": "s",
            "publication.name": "p",
            "publication.autocreate.mode": "filtered",
            "snapshot.mode": "never",
            "table.include.list": "public.a, public.b",
            "tombstones.on.delete": "false",
            "heartbeat.interval.ms": "0",
            "decimal.handling.mode": "string",
            "time.precision.mode": "connect",
            "max.batch.size": "100",
            "poll.interval.ms": "10",
            "signal.data.collection": "public.signals",
            "incremental.snapshot.chunk.size": "50",
            "provide.transaction.metadata": "false",
        }
    )
    assert cfg.snapshot_mode == "no_data" and cfg.table_include_list == ["public.a", "public.b"]
    assert PostgresCdcConfig.from_task_config(cfg.to_task_config() | {"name": "x"}) == cfg
    from sluice.connectors.api import ConfigError

    with pytest.raises(ConfigError, match="plugin.name"):
        PostgresCdcConfig.parse({"database.dbname": "d", "topic.prefix": "p", "plugin.name": "decoderbufs"})
    with pytest.raises(ConfigError, match="decimal.handling.mode"):
        PostgresCdcConfig.parse({"database.dbname": "d", "topic.prefix": "p", "decimal.handling.mode": "exact"})


def test_transaction_metadata_events_and_blocks() -> None:
    d = decoder(transaction_topic="srv.transaction")
    records = feed(
        d,
        pg.relation(1, "public", "t", [("id", INT4, -1, True), ("name", TEXT, -1, False)]),
        pg.begin(100, T0, 7),
        pg.insert(90, 1, [b"1", b"a"]),
        pg.insert(95, 1, [b"2", b"b"]),
        pg.commit(100, 110, T0),
    )
    assert [r.topic for r in records] == ["srv.transaction", "srv.public.t", "srv.public.t", "srv.transaction"]
    begin, end = records[0].value, records[-1].value
    assert begin["status"] == "BEGIN" and begin["id"] == "7:100" and begin["event_count"] is None
    assert end["status"] == "END" and end["event_count"] == 2
    assert end["data_collections"] == [{"data_collection": "public.t", "event_count": 2}]
    assert records[2].value["transaction"] == {"id": "7:100", "total_order": 2, "data_collection_order": 2}


def test_truncate_events_when_not_skipped() -> None:
    def load(relid: int, relation: Relation, is_signal: bool) -> tuple[Table | None, bool]:
        return make_table(relid, relation, ["id"]), True

    d = ChangeDecoder(
        topic_prefix="srv", database="db", partition={}, tombstones=True, skipped_operations=set(), load_table=load
    )
    import struct

    records = feed(
        d,
        pg.relation(1, "public", "t", [("id", INT4, -1, True)]),
        pg.begin(100, T0, 1),
        pg.xlog(90, b"T" + struct.pack(">IBI", 1, 0, 1)),
        pg.commit(100, 110, T0),
    )
    assert len(records) == 1 and records[0].value["op"] == "t"
    assert records[0].key is None and records[0].key_schema is None
