"""The schema history without a server: what a DDL records and emits under the store-only keys, how
a statement the parser cannot follow is handled, and what a restart applies of the records."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.connectors.source.binlog_cdc.config import BinlogCdcConfig
from sluice.connectors.source.binlog_cdc.history import MemoryHistoryStore, SchemaHistory
from sluice.connectors.source.binlog_cdc.tables import collection_filter

KAFKA = {
    "schema.history.internal.kafka.topic": "shop-history",
    "schema.history.internal.kafka.bootstrap.servers": "kafka:9092",
}


class _Cursor:
    """Answers the queries of a description from information_schema for ``shop.t`` (as it is now)."""

    def __init__(self, columns: list[tuple[Any, ...]]) -> None:
        self.columns = columns
        self.sql = ""

    def __enter__(self) -> _Cursor:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    def execute(self, sql: str, params: Any = None) -> None:
        self.sql = sql

    def fetchone(self) -> Any:
        if "VERSION()" in self.sql:
            return ("10.11.19-MariaDB",)
        return ("utf8mb4_general_ci", "")

    def fetchall(self) -> list[Any]:
        if "information_schema.COLUMNS" in self.sql:
            return self.columns
        if "KEY_COLUMN_USAGE" in self.sql:
            return [("id",)]
        return []


class _KeptStore(MemoryHistoryStore):
    """Records that outlive the task, as a topic's do."""

    durable = True


def _history(columns: list[tuple[Any, ...]] | None = None, /, **keys: str) -> tuple[SchemaHistory, MemoryHistoryStore]:
    config = BinlogCdcConfig.parse(
        {
            "database.user": "u",
            "topic.prefix": "p",
            "snapshot.mode": "no_data",
            "database.include.list": "shop",
            **KAFKA,
            **keys,
        }
    )
    table_filter = collection_filter(config.database_include_list, [], config.table_include_list, [], [], [])
    store = _KeptStore()
    cursor = _Cursor(columns or [])
    history = SchemaHistory(config, table_filter, lambda: cursor, store=store)
    history.model.apply("CREATE TABLE t (id INT PRIMARY KEY, v INT)", "shop")
    return history, store


AT = {"file": "mariadb-bin.000002", "pos": 900}


def test_a_ddl_is_recorded_with_its_position_and_returned_for_the_events() -> None:
    history, store = _history()
    (recorded,) = history.apply_ddl("ALTER TABLE t ADD w DATE", "shop", AT, 1000)
    assert recorded.database == "shop" and [c.kind for c in recorded.changes] == ["ALTER"]
    (record,) = store.records
    assert (
        record["position"] == AT and record["source"] == {"server": "p"} and record["ddl"] == "ALTER TABLE t ADD w DATE"
    )
    change = record["tableChanges"][0]
    assert change["id"] == '"shop"."t"' and [c["name"] for c in change["table"]["columns"]] == ["id", "v", "w"]


def test_ddl_outside_the_captured_tables_is_recorded_unless_the_store_only_keys_say_otherwise() -> None:
    history, store = _history()
    assert history.apply_ddl("CREATE TABLE other.x (id INT)", None, AT, 1) == []  # no event: not captured
    assert [r["databaseName"] for r in store.records] == ["other"]
    assert history.apply_ddl("GRANT SELECT ON *.* TO u", "shop", AT, 1) == [] and len(store.records) == 1

    history, store = _history(**{"schema.history.internal.store.only.captured.databases.ddl": "true"})
    history.apply_ddl("CREATE TABLE other.x (id INT)", None, AT, 1)
    assert store.records == []
    only_t = {"schema.history.internal.store.only.captured.tables.ddl": "true", "table.include.list": r"shop\.t"}
    history, store = _history(**only_t)
    history.apply_ddl("CREATE TABLE shop.x (id INT)", None, AT, 1)
    history.apply_ddl("ALTER TABLE t ADD z INT", "shop", AT, 1)
    assert [r["ddl"] for r in store.records] == ["ALTER TABLE t ADD z INT"]


def test_a_database_ddl_of_a_captured_database_is_an_event_without_table_changes() -> None:
    history, _ = _history()
    (recorded,) = history.apply_ddl("ALTER DATABASE shop CHARACTER SET utf8mb4", None, AT, 1)
    assert (recorded.database, recorded.changes) == ("shop", [])


def test_an_unparseable_ddl_re_describes_the_captured_tables_it_names(caplog: pytest.LogCaptureFixture) -> None:
    now = [
        ("id", "int", "int(11)", "NO", 10, 0, None, None, None, None, "", ""),
        ("v", "bigint", "bigint(20)", "YES", 19, 0, None, None, None, None, "", ""),
    ]
    history, store = _history(now)
    (recorded,) = history.apply_ddl("ALTER TABLE t MODIFY v BIGINT FROBNICATED", "shop", AT, 1)
    assert [(c.kind, c.id) for c in recorded.changes] == [("ALTER", ("shop", "t"))]
    assert [c.column_type for c in history.model.tables[("shop", "t")].columns] == ["int(11)", "bigint(20)"]
    assert "ALTER TABLE t MODIFY v BIGINT FROBNICATED" in caplog.text and len(store.records) == 1

    skipping, store = _history(now, **{"schema.history.internal.skip.unparseable.ddl": "true"})
    assert skipping.apply_ddl("ALTER TABLE t MODIFY v BIGINT FROBNICATED", "shop", AT, 1) == [] and store.records == []
    assert [c.column_type for c in skipping.model.tables[("shop", "t")].columns] == ["int", "int"]


def test_a_restart_applies_the_records_up_to_its_offset_and_writes_the_others_once() -> None:
    history, store = _history()
    history.apply_ddl("ALTER TABLE t ADD a INT", "shop", {"file": "mariadb-bin.000002", "pos": 100}, 1)
    history.apply_ddl("ALTER TABLE t ADD b INT", "shop", {"file": "mariadb-bin.000003", "pos": 50}, 1)
    restarted, _ = _history()
    restarted.model.tables.clear()
    restarted.store = store
    restarted.recover({"file": "mariadb-bin.000002", "pos": 4000, "event": 2})
    assert [c.name for c in restarted.model.tables[("shop", "t")].columns] == ["id", "v", "a"]
    restarted.apply_ddl("ALTER TABLE t ADD b INT", "shop", {"file": "mariadb-bin.000003", "pos": 50}, 1)
    assert len(store.records) == 2  # read again from the binlog: applied, not written twice
    assert [c.name for c in restarted.model.tables[("shop", "t")].columns] == ["id", "v", "a", "b"]
