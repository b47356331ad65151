"""The JDBC source on SQLite: modes, offsets, resumption, table selection and task splitting."""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.connectors.api import ConfigError, ConnectError, Date, Decimal, SourceRecordBatch, Timestamp, Type
from sluice.connectors.source.jdbc import JdbcSourceConnector
from sluice.connectors.source.jdbc.querier import from_epoch, to_epoch
from sluice.connectors.source.jdbc.tables import group_tables, like_to_regex
from sluice.connectors.source.jdbc.task import JdbcSourceTask
from tests.unit.connectors.jdbc.conftest import FakeConnectorContext, FakeOffsetReader, FakeSourceContext


def execute(db_url: str, *statements: str, params: list[tuple[Any, ...]] | None = None) -> None:
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        for statement in statements:
            if params is not None and "?" in statement:
                conn.executemany(statement, params)
            else:
                conn.execute(statement)


def ts(second: int, micro: int = 0) -> str:
    return f"2024-01-01 00:00:{second:02d}.{micro:06d}"


@pytest.fixture
def orders(db_url: str) -> str:
    execute(
        db_url,
        "CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, customer TEXT NOT NULL, amount NUMERIC(10, 2), "
        "placed DATE, updated DATETIME NOT NULL, raw BLOB)",
        "INSERT INTO orders (customer, amount, placed, updated, raw) VALUES (?, ?, ?, ?, ?)",
        params=[(f"c{i}", f"{i}.50", "2024-02-01", ts(i), b"\x01") for i in range(5)],
    )
    return db_url


@pytest.fixture
def run(db_url: str) -> Iterator[Any]:
    tasks: list[JdbcSourceTask] = []

    def start(reader: FakeOffsetReader | None = None, **config: str) -> JdbcSourceTask:
        raw = {"connection.url": db_url, "topic.prefix": "db-", "poll.interval.ms": "0", "tables": "orders", **config}
        task = JdbcSourceTask()
        task.start(raw, FakeSourceContext(reader))
        tasks.append(task)
        return task

    yield start
    for task in tasks:
        task.stop()


def drain(task: JdbcSourceTask, polls: int = 10) -> list[SourceRecordBatch]:
    out = []
    for _ in range(polls):
        batch = task.poll()
        if batch is not None:
            out.append(batch)
    return out


def test_incrementing_mode_reads_rows_as_schemad_structs(run: Any, orders: str) -> None:
    batches = drain(run(mode="incrementing", **{"batch.max.rows": "2", "poll.interval.ms": "60000"}), 3)
    assert [len(b) for b in batches] == [2, 2, 1]
    first = batches[0]
    assert first.topic == "db-orders" and first.keys is None
    assert first.source_partition == {"protocol": "1", "table": "orders"}
    assert first.last_offset == {"incrementing": 2} and batches[-1].last_offset == {"incrementing": 5}
    schema = first.value_schema
    assert schema is not None and schema.name == "orders"
    types = {f.name: (f.schema.type, f.schema.name, f.schema.optional) for f in schema.fields}
    assert types == {
        "id": (Type.INT64, None, False),
        "customer": (Type.STRING, None, False),
        "amount": (Type.BYTES, Decimal.LOGICAL_NAME, True),
        "placed": (Type.INT32, Date.LOGICAL_NAME, True),
        "updated": (Type.INT64, Timestamp.LOGICAL_NAME, False),
        "raw": (Type.BYTES, None, True),
    }
    assert first.values[0]["customer"] == "c0" and str(first.values[0]["amount"]) == "0.50"
    assert first.values[0]["updated"] == dt.datetime(2024, 1, 1)


def test_incrementing_mode_resumes_from_the_stored_offset_and_sees_new_rows(run: Any, orders: str) -> None:
    reader = FakeOffsetReader()
    reader.put({"protocol": "1", "table": "orders"}, {"incrementing": 3})
    task = run(reader, mode="incrementing")
    assert [v["id"] for b in drain(task, 2) for v in b.values] == [4, 5]
    execute(orders, "INSERT INTO orders (customer, updated) VALUES ('new', '2024-01-02 00:00:00.000000')")
    assert [v["customer"] for b in drain(task, 3) for v in b.values] == ["new"]


def test_a_legacy_offset_partition_is_read_when_there_is_no_v1_offset(run: Any, orders: str) -> None:
    reader = FakeOffsetReader()
    reader.put({"table": "orders"}, {"incrementing": 4})
    assert [v["id"] for b in drain(run(reader, mode="incrementing"), 2) for v in b.values] == [5]


def test_timestamp_incrementing_picks_up_updates_and_ties(run: Any, orders: str) -> None:
    task = run(mode="timestamp+incrementing", **{"timestamp.column.name": "updated"})
    seen = [v["id"] for b in drain(task, 2) for v in b.values]
    assert seen == [1, 2, 3, 4, 5]
    last = drain(task, 1) or []
    assert last == []
    execute(orders, f"UPDATE orders SET customer = 'changed', updated = '{ts(30)}' WHERE id = 2")
    execute(orders, f"INSERT INTO orders (customer, updated) VALUES ('tie', '{ts(30)}')")
    batches = drain(task, 3)
    assert [(v["id"], v["customer"]) for b in batches for v in b.values] == [(2, "changed"), (6, "tie")]
    millis, nanos = to_epoch(dt.datetime(2024, 1, 1, 0, 0, 30), dt.UTC)
    assert batches[-1].last_offset == {"timestamp": millis, "timestamp_nanos": nanos, "incrementing": 6}


def test_timestamp_mode_advances_past_a_timestamp_only_when_all_its_rows_are_read(run: Any, db_url: str) -> None:
    execute(
        db_url,
        "CREATE TABLE orders (n INTEGER, updated DATETIME NOT NULL)",
        "INSERT INTO orders VALUES (?, ?)",
        params=[(1, ts(1)), (2, ts(2)), (3, ts(2)), (4, ts(2)), (5, ts(3))],
    )
    task = run(mode="timestamp", **{"timestamp.column.name": "updated", "batch.max.rows": "2"})
    batches = drain(task, 4)
    offsets = [o for b in batches for o in b.source_offsets]
    t1, t2, t3 = (to_epoch(dt.datetime.fromisoformat(ts(s)), dt.UTC)[0] for s in (1, 2, 3))
    # rows 2 and 3 share ts(2) with row 4 in the next batch: their offset stays at ts(1)
    assert [o["timestamp"] for o in offsets if o] == [t1, t1, t1, t2, t3]
    # a restart from the offset stored after the second batch re-reads the ts(2) rows, never skips them
    reader = FakeOffsetReader()
    reader.put({"protocol": "1", "table": "orders"}, dict(batches[0].source_offsets[-1] or {}))
    again = drain(run(reader, mode="timestamp", **{"timestamp.column.name": "updated"}), 2)
    assert [v["n"] for b in again for v in b.values] == [2, 3, 4, 5]


def test_timestamp_initial_and_delay(run: Any, orders: str) -> None:
    initial = to_epoch(dt.datetime.fromisoformat(ts(2)), dt.UTC)[0]
    task = run(mode="timestamp", **{"timestamp.column.name": "updated", "timestamp.initial": str(initial)})
    assert [v["id"] for b in drain(task, 2) for v in b.values] == [4, 5]
    execute(orders, "INSERT INTO orders (customer, updated) VALUES ('future', '2999-01-01 00:00:00.000000')")
    assert drain(task, 2) == []  # newer than now: left for later


def test_bulk_mode_rereads_the_table_without_offsets(run: Any, orders: str) -> None:
    batches = drain(run(mode="bulk"), 3)
    assert sum(len(b) for b in batches) >= 10
    assert all(b.source_partition is None for b in batches)


def test_query_mode_infers_the_schema_and_uses_the_query_partition(run: Any, orders: str) -> None:
    task = run(
        mode="incrementing",
        query="SELECT id, customer, amount * 2 AS doubled FROM orders",
        **{"incrementing.column.name": "id", "tables": ""},
    )
    batches = drain(task, 2)
    assert batches[0].topic == "db-" and batches[0].source_partition == {"query": "query"}
    assert [v["id"] for b in batches for v in b.values] == [1, 2, 3, 4, 5]
    assert {f.name for f in batches[0].value_schema.fields} == {"id", "customer", "doubled"}  # type: ignore[union-attr]


def test_nullable_incrementing_column_is_refused(run: Any, db_url: str) -> None:
    execute(db_url, "CREATE TABLE orders (n INTEGER, name TEXT)")
    with pytest.raises(ConnectError, match="nullable"):
        run(mode="incrementing", **{"incrementing.column.name": "n"})
    run(mode="incrementing", **{"incrementing.column.name": "n", "validate.non.null": "false"})


def test_connector_selects_tables_and_spreads_them_over_tasks(db_url: str) -> None:
    execute(db_url, *(f"CREATE TABLE {n} (id INTEGER PRIMARY KEY)" for n in ("a1", "a2", "a3", "b1", "skip_me")))
    connector = JdbcSourceConnector()
    connector.initialize(FakeConnectorContext())
    connector.start(
        JdbcSourceConnector.validate(
            {
                "connection.url": db_url,
                "mode": "bulk",
                "topic.prefix": "p-",
                "table.include.list": "a.*,b1",
                "table.poll.interval.ms": "0",
            }
        )
    )
    configs = connector.task_configs(2)
    assert [c["tables"] for c in configs] == ["a1,a2", "a3,b1"]
    assert len(connector.task_configs(10)) == 4
    connector.stop()


def test_connector_asks_for_reconfiguration_when_tables_change(db_url: str) -> None:
    execute(db_url, "CREATE TABLE t1 (id INTEGER PRIMARY KEY)")
    context = FakeConnectorContext()
    connector = JdbcSourceConnector()
    connector.initialize(context)
    connector.start(
        JdbcSourceConnector.validate(
            {"connection.url": db_url, "mode": "bulk", "topic.prefix": "p-", "table.poll.interval.ms": "50"}
        )
    )
    execute(db_url, "CREATE TABLE t2 (id INTEGER PRIMARY KEY)")
    deadline = dt.datetime.now() + dt.timedelta(seconds=5)
    while context.reconfigurations == 0 and dt.datetime.now() < deadline:
        pass
    connector.stop()
    assert context.reconfigurations >= 1
    assert [c["tables"] for c in connector.task_configs(1)] == ["t1,t2"]


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"mode": "timestamp"}, "timestamp.column.name"),
        ({"mode": "sometimes"}, "mode"),
        ({"mode": "bulk", "table.whitelist": "a", "table.include.list": "b"}, "table.whitelist"),
        ({"mode": "bulk", "table.types": "TABLE,SYNONYM"}, "table.types"),
        ({"mode": "incrementing", "query": "SELECT 1"}, "incrementing.column.name"),
        ({"mode": "bulk", "batch.max.rows": "0"}, "batch.max.rows"),
    ],
)
def test_invalid_configurations_name_the_key(config: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        JdbcSourceConnector.validate({"connection.url": "sqlite://", "topic.prefix": "p", **config})
    assert info.value.key == key


def test_offset_conversions_round_trip() -> None:
    value = dt.datetime(2024, 5, 6, 7, 8, 9, 123456)
    millis, nanos = to_epoch(value, dt.UTC)
    assert (millis % 1000, nanos) == (123, 123_456_000)
    assert from_epoch(millis, nanos, dt.UTC) == value
    assert group_tables(["a", "b", "c"], 2) == [["a", "b"], ["c"]]
    assert like_to_regex("pub%_x").fullmatch("public_x") and not like_to_regex("pub").fullmatch("public")


def test_alter_offsets_checks_the_shape() -> None:
    connector = JdbcSourceConnector()
    pairs: Any = [({"protocol": "1", "table": "db.s.t"}, {"incrementing": 5}), ({"query": "query"}, None)]
    assert connector.alter_offsets({}, pairs)
    bad: Any = [({"table": "t"}, {"incrementing": "five"})]
    with pytest.raises(ConfigError):
        connector.alter_offsets({}, bad)
