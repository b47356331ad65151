"""The JDBC sink on SQLite: modes, keys, tombstones, DDL, offsets and failures."""

from __future__ import annotations

import datetime as dt
import decimal
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.connectors.api import (
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_FLOAT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    ConfigError,
    ConnectError,
    DataError,
    Decimal,
    RetriableError,
    Schema,
    SinkRecord,
    SinkRecordBatch,
    Timestamp,
    TopicPartition,
    UnwritableRecordError,
)
from sluice.connectors.sink.jdbc import JdbcSinkConnector
from sluice.connectors.sink.jdbc.task import JdbcSinkTask
from tests.unit.connectors.jdbc.conftest import FakeReporter, FakeSinkContext

VALUE = Schema.struct(
    [("id", INT64_SCHEMA), ("name", OPTIONAL_STRING_SCHEMA), ("score", OPTIONAL_FLOAT64_SCHEMA)], name="c"
)
VALUE2 = Schema.struct([*((f.name, f.schema) for f in VALUE.fields), ("email", OPTIONAL_STRING_SCHEMA)], name="c")
TP = TopicPartition("customers", 0)


def rec(
    offset: int, id_: int, name: str | None = "n", score: float | None = 1.0, *, topic: str = "customers", **extra: Any
) -> SinkRecord:
    value: dict[str, Any] | None = {"id": id_, "name": name, "score": score, **extra}
    schema = VALUE2 if extra else VALUE
    return SinkRecord(topic, 0, offset, value, schema, id_, INT64_SCHEMA)


def tombstone(offset: int, id_: int) -> SinkRecord:
    return SinkRecord("customers", 0, offset, None, None, id_, INT64_SCHEMA)


def rows(db_url: str, table: str = "customers") -> list[tuple[Any, ...]]:
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        return conn.execute(f'SELECT * FROM "{table}" ORDER BY 1').fetchall()


def ddl(db_url: str, table: str = "customers") -> str:
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        return str(conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0])


@pytest.fixture
def make_task(db_url: str) -> Iterator[Any]:
    tasks: list[JdbcSinkTask] = []

    def make(reporter: FakeReporter | None = None, **config: str) -> JdbcSinkTask:
        task = JdbcSinkTask()
        task.start(
            {"connection.url": db_url, "topics": "customers", "auto.create": "true", **config},
            FakeSinkContext(reporter),
        )
        tasks.append(task)
        return task

    yield make
    for task in tasks:
        task.stop()


def test_insert_creates_the_table_and_writes_rows(make_task: Any, db_url: str) -> None:
    task = make_task()
    task.put(SinkRecordBatch.of([rec(0, 1, "ann"), rec(1, 2, "bob", None)]))
    assert rows(db_url) == [(1, "ann", 1.0), (2, "bob", None)]
    assert '"id" INTEGER NOT NULL' in ddl(db_url) and "PRIMARY KEY" not in ddl(db_url)
    assert task.pre_commit({TP: 2}) == {TP: 2}


def test_upsert_by_record_key_is_idempotent_and_applies_tombstones(make_task: Any, db_url: str) -> None:
    task = make_task(**{"insert.mode": "upsert", "pk.mode": "record_key", "pk.fields": "id", "delete.enabled": "true"})
    batch = SinkRecordBatch.of([rec(0, 1, "a"), rec(1, 2, "b"), rec(2, 1, "a2"), tombstone(3, 2), rec(4, 3, "c")])
    task.put(batch)
    task.put(batch)  # a replay changes nothing
    assert rows(db_url) == [(1, "a2", 1.0), (3, "c", 1.0)]
    assert 'PRIMARY KEY("id")' in ddl(db_url)


def test_tombstone_then_reinsert_in_one_batch_keeps_the_row(make_task: Any, db_url: str) -> None:
    task = make_task(**{"insert.mode": "upsert", "pk.mode": "record_key", "delete.enabled": "true"})
    task.put(SinkRecordBatch.of([rec(0, 1, "a"), tombstone(1, 1), rec(2, 1, "again")]))
    assert rows(db_url) == [(1, 1, "again", 1.0)]  # primitive key → __connect_key column, then the value fields


def test_insert_mode_keeps_deletes_in_order(make_task: Any, db_url: str) -> None:
    task = make_task(**{"pk.mode": "record_key", "pk.fields": "id", "delete.enabled": "true"})
    task.put(SinkRecordBatch.of([rec(0, 1, "a"), tombstone(1, 1), rec(2, 1, "b")]))
    assert rows(db_url) == [(1, "b", 1.0)]


def test_update_mode_changes_existing_rows_only(make_task: Any, db_url: str) -> None:
    make_task(**{"insert.mode": "upsert", "pk.mode": "record_value", "pk.fields": "id"}).put(SinkRecordBatch.of([rec(0, 1, "a")]))
    make_task(**{"insert.mode": "update", "pk.mode": "record_value", "pk.fields": "id"}).put(SinkRecordBatch.of(
        [rec(1, 1, "b"), rec(2, 9, "x")]
    ))
    assert rows(db_url) == [(1, "b", 1.0)]


def test_kafka_coordinates_as_primary_key(make_task: Any, db_url: str) -> None:
    make_task(**{"pk.mode": "kafka"}).put(SinkRecordBatch.of([rec(5, 1), rec(6, 2)]))
    assert [r[:3] for r in rows(db_url)] == [("customers", 0, 5), ("customers", 0, 6)]
    assert 'PRIMARY KEY("__connect_topic", "__connect_partition", "__connect_offset")' in ddl(db_url)


def test_struct_keys_and_fields_whitelist(make_task: Any, db_url: str) -> None:
    key_schema = Schema.struct([("region", STRING_SCHEMA), ("no", INT32_SCHEMA)])
    task = make_task(**{"insert.mode": "upsert", "pk.mode": "record_key", "fields.whitelist": "name"})
    task.put(SinkRecordBatch.of(
        [
            SinkRecord(
                "customers", 0, 0, {"id": 1, "name": "a", "score": 2.0}, VALUE, {"region": "eu", "no": 1}, key_schema
            )
        ]
    ))
    assert rows(db_url) == [("eu", 1, "a")]


def test_auto_evolve_adds_optional_columns(make_task: Any, db_url: str) -> None:
    task = make_task(**{"auto.evolve": "true"})
    task.put(SinkRecordBatch.of([rec(0, 1)]))
    task.put(SinkRecordBatch.of([rec(1, 2, email="x@y")]))
    assert rows(db_url) == [(1, "n", 1.0, None), (2, "n", 1.0, "x@y")]


def test_without_auto_evolve_new_fields_fail_clearly(make_task: Any) -> None:
    task = make_task()
    task.put(SinkRecordBatch.of([rec(0, 1)]))
    with pytest.raises(ConnectError, match="missing columns for fields email and auto.evolve is disabled"):
        task.put(SinkRecordBatch.of([rec(1, 2, email="x@y")]))
    assert task.pre_commit({TP: 2}) == {TP: 1}  # the failed record is not committed


def test_missing_table_without_auto_create_fails(db_url: str) -> None:
    task = JdbcSinkTask()
    task.start({"connection.url": db_url, "topics": "customers"}, FakeSinkContext())
    with pytest.raises(ConnectError, match="auto.create is disabled"):
        task.put(SinkRecordBatch.of([rec(0, 1)]))
    task.stop()


def test_schemaless_values_infer_columns(make_task: Any, db_url: str) -> None:
    task = make_task()
    task.put(SinkRecordBatch.of(
        [
            SinkRecord("customers", 0, 0, {"id": 1, "tags": ["a"], "at": "x"}, None),
            SinkRecord("customers", 0, 1, {"id": 2, "extra": 1.5}, None),
        ]
    ))
    assert rows(db_url) == [(1, '["a"]', "x", None), (2, None, None, 1.5)]


def test_schemaless_values_of_one_size_but_other_keys_get_every_column(make_task: Any, db_url: str) -> None:
    # Equal sizes let the builder skip comparing key sets; a different key must still be noticed.
    make_task().put(SinkRecordBatch.of(
        [
            SinkRecord("customers", 0, 0, {"id": 1, "name": "a"}, None),
            SinkRecord("customers", 0, 1, {"id": 2, "city": "b"}, None),
            SinkRecord("customers", 0, 2, {"name": "c", "id": 3}, None),
        ]
    ))
    assert rows(db_url) == [(1, "a", None), (2, None, "b"), (3, "c", None)]


def test_columnar_upsert_keeps_the_last_record_of_a_key(make_task: Any, db_url: str) -> None:
    values = [{"id": i % 3, "name": f"v{i}", "score": float(i)} for i in range(7)]

    def load(column: str) -> list[Any]:
        return {"partition": [0] * 7, "kafka_offset": list(range(7))}[column]

    batch = SinkRecordBatch("customers", values, [None] * 7, [None] * 7, [None] * 7, load)
    make_task(**{"insert.mode": "upsert", "pk.mode": "record_value", "pk.fields": "id"}).put(batch)
    assert rows(db_url) == [(0, "v6", 6.0), (1, "v4", 4.0), (2, "v5", 5.0)]


def test_logical_types_are_written(make_task: Any, db_url: str) -> None:
    schema = Schema.struct([("id", INT64_SCHEMA), ("amount", Decimal.schema(2)), ("at", Timestamp.SCHEMA)])
    at = dt.datetime(2024, 1, 2, 3, 4, 5, 600_000, tzinfo=dt.UTC)
    make_task().put(SinkRecordBatch.of([SinkRecord("customers", 0, 0, {"id": 1, "amount": decimal.Decimal("9.99"), "at": at}, schema)]))
    assert rows(db_url) == [(1, 9.99, "2024-01-02 03:04:05.600000")]


def test_a_rejected_row_is_named_by_topic_partition_and_offset(make_task: Any, db_url: str) -> None:
    task = make_task(**{"pk.mode": "record_value", "pk.fields": "id"})
    task.put(SinkRecordBatch.of([rec(0, 1)]))
    with pytest.raises(DataError, match="topic 'customers' partition 0 offset 7"):
        task.put(SinkRecordBatch.of([rec(6, 2), rec(7, 1)]))  # id 1 exists: a primary key violation
    assert rows(db_url) == [(1, "n", 1.0)]  # the batch was rolled back
    assert task.pre_commit({TP: 8}) == {TP: 6}
    task.put(SinkRecordBatch.of([rec(6, 2)]))  # once written, the partition commits in full again
    assert task.pre_commit({TP: 8}) == {TP: 8}


def test_rejected_rows_go_to_the_errant_record_reporter_and_the_rest_is_written(make_task: Any, db_url: str) -> None:
    reporter = FakeReporter()
    task = make_task(reporter, **{"pk.mode": "record_value", "pk.fields": "id"})
    task.put(SinkRecordBatch.of([rec(0, 1)]))
    task.put(SinkRecordBatch.of([rec(1, 2), rec(2, 1, "dup"), rec(3, 3)]))
    assert [r.kafka_offset for r, _ in reporter.reported] == [2]
    assert rows(db_url) == [(1, "n", 1.0), (2, "n", 1.0), (3, "n", 1.0)]


def test_columnar_batches_are_written(make_task: Any, db_url: str) -> None:
    values = [{"id": i, "name": f"n{i}", "score": None} for i in range(5)]

    def load(column: str) -> list[Any]:
        return {"partition": [0] * 5, "kafka_offset": list(range(5))}[column]

    batch = SinkRecordBatch("customers", values, [VALUE] * 5, [None] * 5, [None] * 5, load)
    make_task(**{"batch.size": "2"}).put(batch)
    assert [r[0] for r in rows(db_url)] == [0, 1, 2, 3, 4]


def test_a_lost_connection_is_retriable_then_fails_after_max_retries(
    make_task: Any, db_url: str, tmp_path: Any
) -> None:
    task = make_task(**{"max.retries": "1", "retry.backoff.ms": "0"})
    task.put(SinkRecordBatch.of([rec(0, 1)]))
    (tmp_path / "test.db").unlink()
    (tmp_path / "test.db").mkdir()  # the file is gone and cannot be reopened
    task._drop_connection()
    with pytest.raises(RetriableError):
        task.put(SinkRecordBatch.of([rec(1, 2)]))
    with pytest.raises(ConnectError, match="max.retries=1"):
        task.put(SinkRecordBatch.of([rec(1, 2)]))


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"insert.mode": "upsert"}, "insert.mode"),
        ({"delete.enabled": "true", "pk.mode": "record_value"}, "delete.enabled"),
        ({"pk.mode": "kafka", "pk.fields": "a,b"}, "pk.fields"),
        ({"pk.mode": "nope"}, "pk.mode"),
        ({"unknown.key": "1"}, "unknown.key"),
        ({"db.timezone": "Mars/Base"}, "db.timezone"),
    ],
)
def test_invalid_configurations_name_the_key(config: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        JdbcSinkConnector.validate({"connection.url": "sqlite://", "topics": "t", **config})
    assert info.value.key == key


def test_connector_makes_identical_task_configs_with_the_password() -> None:
    connector = JdbcSinkConnector()
    connector.start(
        JdbcSinkConnector.validate(
            {"connection.url": "jdbc:postgresql://h/db", "connection.password": "pw", "topics": "a,b"}
        )
    )
    configs = connector.task_configs(2)
    assert configs[0] == configs[1]
    assert configs[0]["connection.password"] == "pw" and configs[0]["topics"] == "a,b"
    assert "connection.password" in JdbcSinkConnector.Config.secret_keys()
    assert "io.confluent.connect.jdbc.JdbcSinkConnector" in JdbcSinkConnector.aliases


@pytest.mark.parametrize("mode", ["insert", "upsert"])
def test_tombstones_that_are_not_applied_are_counted_and_logged_once_per_batch(
    make_task: Any, db_url: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    task = make_task(**{"insert.mode": mode, "pk.mode": "record_value", "pk.fields": "id"})
    with caplog.at_level("WARNING", logger="sluice.connectors.sink.jdbc.rows"):
        task.put(SinkRecordBatch.of([rec(0, 1, "a"), tombstone(1, 2), rec(2, 3, "c"), tombstone(3, 4)]))
        task.put(SinkRecordBatch.of([rec(4, 5, "e"), tombstone(5, 6)]))
    assert [r[0] for r in rows(db_url)] == [1, 3, 5]
    warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Ignored")]
    assert warnings == [
        "Ignored 2 tombstone(s) (null values) of topic customers, at offsets 1, 3: delete.enabled is false",
        "Ignored 1 tombstone(s) (null values) of topic customers, at offsets 5: delete.enabled is false",
    ]
    assert task.tombstones_ignored == 3
    assert task.pre_commit({TP: 6}) == {TP: 6}


@pytest.mark.parametrize("mode", ["insert", "upsert"])
def test_schemaless_tombstones_alone_are_ignored_with_value_keys(make_task: Any, db_url: str, mode: str) -> None:
    """A run of tombstones with no record beside it (insert mode writes each run apart) has no
    value fields to find the key's in: nothing to write, only tombstones to count."""
    task = make_task(**{"insert.mode": mode, "pk.mode": "record_value", "pk.fields": "id"})
    schemaless = [SinkRecord("customers", 0, 0, {"id": 1, "name": "a"}, None), tombstone(1, 2), tombstone(2, 3)]
    task.put(SinkRecordBatch.of(schemaless))
    task.put(SinkRecordBatch.of([tombstone(3, 4)]))
    assert rows(db_url) == [(1, "a")]
    assert task.tombstones_ignored == 3


def test_a_value_that_is_not_an_object_is_refused_naming_the_record_before_anything_is_written(
    make_task: Any, db_url: str
) -> None:
    task = make_task(**{"insert.mode": "upsert", "pk.mode": "record_value", "pk.fields": "id"})
    good = SinkRecord("customers", 0, 0, {"id": 1, "name": "a"}, None, 1, INT64_SCHEMA)
    bad = SinkRecord("customers", 0, 1, [1, 2, 3], None, 2, INT64_SCHEMA)
    with pytest.raises(UnwritableRecordError, match="offset 1") as info:
        task.put(SinkRecordBatch.of([good, bad]))
    assert info.value.record.kafka_offset == 1
    assert not rows_or_none(db_url)


def rows_or_none(db_url: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'customers'").fetchone() is None:
            return []
        return conn.execute('SELECT * FROM "customers"').fetchall()
