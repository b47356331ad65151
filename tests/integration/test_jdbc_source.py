"""Tables of real PostgreSQL, MariaDB and SQLite databases → the JDBC source → topics, through a
real worker process.

What a user checks: the records in the topic (values and Connect schemas), that rows inserted
later show up, and that a worker restart resumes from the stored offsets without re-sending or
missing rows. Every test runs once per dialect; MariaDB is configured with its JDBC URL.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.integration.jdbc_helpers import (
    JDBC_SOURCE,
    JSON_CONVERTER,
    WORKER_SETTINGS,
    Database,
    connector_url,
    database_fixture,
)
from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration


def _payloads(bootstrap: str, topic: str, count: int, *, settle: float = 1.0) -> list[dict[str, Any]]:
    return [
        orjson.loads(r.value or b"null")["payload"]
        for r in consume_all(bootstrap, topic, count, timeout=60, settle=settle)
    ]


def _connector_file(path: Path, name: str, config: dict[str, str]) -> Path:
    path.write_bytes(orjson.dumps({"name": name, "config": config}))
    return path


def _worker(tmp_path: Path, bootstrap: str) -> WorkerProcess:
    settings: dict[str, Any] = {**WORKER_SETTINGS, "value.converter": JSON_CONVERTER, "offset.flush.interval.ms": "500"}
    return WorkerProcess(tmp_path, bootstrap, **settings)


db = database_fixture()


#: Per dialect: the orders table (an auto-increment key and a few typed columns) and the type of id.
_ORDERS = {
    "postgresql": (
        "CREATE TABLE orders ({pk}, customer text NOT NULL, amount numeric(10,2), placed date, note jsonb, raw bytea, "
        "tags text[])",
        "int32",
    ),
    "mariadb": (
        "CREATE TABLE orders ({pk}, customer varchar(50) NOT NULL, amount decimal(10,2), placed date, note json, "
        "raw blob)",
        "int32",
    ),
    "sqlite": (
        "CREATE TABLE orders ({pk}, customer TEXT NOT NULL, amount NUMERIC(10,2), placed DATE, note TEXT, raw BLOB)",
        "int64",
    ),
}
_TIMESTAMP = {"postgresql": "timestamp", "mariadb": "datetime(3)", "sqlite": "DATETIME"}


def test_incremental_modes_pick_up_new_rows_and_resume_after_restart(
    kafka: Any, db: Database, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name(db.kind) + "-"
    ddl, id_type = _ORDERS[db.kind]
    db.sql(ddl.format(pk=db.serial_pk()))
    db.sql(f"CREATE TABLE accounts ({db.serial_pk()}, name text, updated_at {_TIMESTAMP[db.kind]} NOT NULL)")
    db.sql("CREATE TABLE regions (code varchar(10), label text)")
    start = dt.datetime(2024, 1, 1)
    for i in range(3):
        columns = "customer, amount, placed, note, raw" + (", tags" if db.kind == "postgresql" else "")
        values: list[Any] = [
            f"c{i}",
            decimal.Decimal(f"{i}.25") if db.kind != "sqlite" else f"{i}.25",  # sqlite3 binds no Decimal
            "2024-03-01",
            orjson.dumps({"i": i}).decode(),
            bytes([i]),
        ]
        if db.kind == "postgresql":
            values.append(["a", "b"])
        db.sql(f"INSERT INTO orders ({columns}) VALUES ({', '.join(['%s'] * len(values))})", values)
        db.sql("INSERT INTO accounts (name, updated_at) VALUES (%s, %s)", (f"a{i}", start + dt.timedelta(seconds=i)))
    db.sql("INSERT INTO regions VALUES ('eu', 'Europe'), ('us', 'Americas')")
    common = {
        "connector.class": JDBC_SOURCE,
        "connection.url": connector_url(db, request, "mariadb"),
        "topic.prefix": prefix,
        "poll.interval.ms": "200",
    }
    files = (
        _connector_file(
            tmp_path / "inc.json", "src-inc", {**common, "mode": "incrementing", "table.include.list": "orders"}
        ),
        _connector_file(
            tmp_path / "tsi.json",
            "src-tsi",
            {
                **common,
                "mode": "timestamp+incrementing",
                "timestamp.column.name": "updated_at",
                "table.whitelist": "accounts",
            },
        ),
        _connector_file(
            tmp_path / "bulk.json",
            "src-bulk",
            {**common, "mode": "bulk", "table.include.list": ".*regions", "poll.interval.ms": "500"},
        ),
    )

    worker = _worker(tmp_path, bootstrap).start(*files)
    try:
        for name in ("src-inc", "src-tsi", "src-bulk"):
            worker.wait_running(name)
        orders = consume_all(bootstrap, prefix + "orders", 3, timeout=60)
        first = orjson.loads(orders[0].value or b"null")
        fields = {f["field"]: f for f in first["schema"]["fields"]}
        assert first["schema"]["name"] == "orders"
        assert fields["id"]["type"] == id_type and fields["id"]["optional"] is False
        assert fields["amount"]["name"] == "org.apache.kafka.connect.data.Decimal"
        assert fields["amount"]["parameters"]["scale"] == "2"
        assert fields["placed"]["name"] == "org.apache.kafka.connect.data.Date"
        assert fields["raw"]["type"] == "bytes"
        payload = first["payload"]
        assert payload["customer"] == "c0" and orjson.loads(payload["note"]) == {"i": 0}
        assert base64.b64decode(payload["raw"]) == b"\x00"
        assert decimal.Decimal(int.from_bytes(base64.b64decode(payload["amount"]), "big", signed=True)).scaleb(
            -2
        ) == decimal.Decimal("0.25")
        if db.kind == "postgresql":
            assert fields["tags"]["type"] == "array" and payload["tags"] == ["a", "b"]
        assert orders[0].key is None
        assert [p["name"] for p in _payloads(bootstrap, prefix + "accounts", 3)] == ["a0", "a1", "a2"]
        # bulk re-reads the whole table every poll
        assert len(consume_all(bootstrap, prefix + "regions", 4, timeout=30)) >= 4
        # a row inserted while the connector runs appears
        db.sql("INSERT INTO orders (customer) VALUES ('live')")
        assert [p["customer"] for p in _payloads(bootstrap, prefix + "orders", 4)][-1] == "live"
    finally:
        assert worker.stop() == 0

    # While the worker is down: new rows, and an update that moves a row's timestamp forward.
    db.sql("INSERT INTO orders (customer) VALUES ('after-1'), ('after-2')")
    db.sql("INSERT INTO accounts (name, updated_at) VALUES ('a3', %s)", (start + dt.timedelta(minutes=1),))
    db.sql(
        "UPDATE accounts SET name = 'a0-changed', updated_at = %s WHERE name = 'a0'", (start + dt.timedelta(minutes=2),)
    )

    worker = _worker(tmp_path, bootstrap).start(*files)
    try:
        worker.wait_running("src-inc")
        assert [p["customer"] for p in _payloads(bootstrap, prefix + "orders", 6)] == [
            "c0",
            "c1",
            "c2",
            "live",
            "after-1",
            "after-2",
        ]
        assert [p["name"] for p in _payloads(bootstrap, prefix + "accounts", 5)] == [
            "a0",
            "a1",
            "a2",
            "a3",
            "a0-changed",
        ]
    finally:
        worker.stop()


def test_timestamp_mode_does_not_lose_rows_sharing_a_timestamp(
    kafka: Any, db: Database, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("ticks")
    create_topic(bootstrap, topic)
    at = {"postgresql": "timestamptz", "mariadb": "timestamp(3)", "sqlite": "DATETIME"}[db.kind]
    db.sql(f"CREATE TABLE ticks (n int, at {at} NOT NULL)")
    noon = dt.datetime(2024, 5, 1, 12, 0, 0, tzinfo=dt.UTC if db.kind == "postgresql" else None)
    for n in range(1, 8):
        db.sql("INSERT INTO ticks VALUES (%s, %s)", (n, noon))
    config = {
        "connector.class": JDBC_SOURCE,
        "connection.url": connector_url(db, request, "mysql"),
        "mode": "timestamp",
        "timestamp.column.name": "at",
        "query": "SELECT n, at FROM ticks",
        "topic.prefix": topic,
        "batch.max.rows": "2",
        "poll.interval.ms": "200",
    }
    files = (_connector_file(tmp_path / "ts.json", "src-ts", config),)
    worker = _worker(tmp_path, bootstrap).start(*files)
    try:
        worker.wait_running("src-ts")
        assert sorted(p["n"] for p in _payloads(bootstrap, topic, 7)) == list(range(1, 8))
        db.sql("INSERT INTO ticks VALUES (8, %s)", (noon + dt.timedelta(seconds=1),))
        assert sorted(p["n"] for p in _payloads(bootstrap, topic, 8)) == list(range(1, 9))
    finally:
        worker.stop()


class _NoOffsets:
    def offsets(self, partitions: Any) -> list[None]:
        return [None for _ in partitions]


class _Context:
    connector_name, task_id, offset_reader = "jdbc-source", 0, _NoOffsets()


@contextmanager
def _started_task(config: dict[str, str], *, raw: bool) -> Iterator[Any]:
    """A JDBC source task run in this process; ``raw=False`` makes it read through SQLAlchemy."""
    from sluice.connectors.source.jdbc.task import JdbcSourceTask

    task = JdbcSourceTask()
    task.start(config, _Context())  # type: ignore[arg-type]
    try:
        if not raw:
            task._queriers[0]._raw_fetch = False
        yield task
    finally:
        task.stop()


def test_postgres_rows_read_past_sqlalchemy_equal_what_sqlalchemy_reads(postgres_db: str) -> None:
    """On PostgreSQL a table's rows come straight from a psycopg server-side cursor (SQLAlchemy's
    per-row objects cost more than the rest of the read). The records must be exactly what the
    SQLAlchemy path gives, for every common column type, in bulk and in incremental modes."""
    db = Database("postgresql", postgres_db)
    db.sql(
        "CREATE TABLE everything (id bigint PRIMARY KEY, c_small smallint, c_real real, c_double double precision,"
        " c_numeric numeric(20,3), c_free numeric, c_bool boolean, c_text text, c_varchar varchar(20),"
        " c_bytes bytea, c_date date, c_time time, c_ts timestamp NOT NULL, c_tstz timestamptz, c_json json,"
        " c_jsonb jsonb, c_ints integer[], c_texts text[], c_uuid uuid, c_inet inet)"
    )
    db.sql(
        "INSERT INTO everything VALUES (1, 7, 1.5, 2.25, 123456789.125, 0.1, true, 'tab\there', 'v', '\\x00ff',"
        " '2024-03-01', '13:45:30.5', '2024-02-29 23:59:59.999', '2024-02-29 23:59:59+02', '{\"a\": [1]}',"
        " '{\"b\": null}', '{1,2}', '{x,\"y z\"}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '10.0.0.1')"
    )
    db.sql("INSERT INTO everything (id, c_ts) VALUES (2, '2024-03-01 00:00:00')")
    db.dispose()

    def read(mode: str, raw: bool) -> tuple[list[Any], list[Any], bool | None]:
        config = {
            "connection.url": postgres_db,
            "mode": mode,
            "tables": "everything",
            "topic.prefix": "t-",
            "incrementing.column.name": "id",
            "timestamp.column.name": "c_ts",
        }
        with _started_task(config, raw=raw) as task:
            batch = task.poll()
            assert batch is not None
            return list(batch.values), list(batch.source_offsets), task._queriers[0]._raw_fetch

    for mode in ("bulk", "incrementing", "timestamp+incrementing"):
        fast_values, fast_offsets, used = read(mode, raw=True)
        slow_values, slow_offsets, _ = read(mode, raw=False)
        assert used is True, f"{mode}: the rows did not come from the server-side cursor"
        assert fast_values == slow_values
        assert fast_offsets == slow_offsets
        assert [v["id"] for v in fast_values] == [1, 2]


def test_postgres_rows_streamed_in_chunks_arrive_whole_and_in_order(postgres_db: str) -> None:
    """Rows read past SQLAlchemy come a server chunk (``batch.max.rows`` rows) at a time; polls
    that ask for one row more than a chunk (the timestamp mode's look-ahead) or stop in the
    middle of one must still hand out every row once, in order, with the same offsets as SQLAlchemy."""
    db = Database("postgresql", postgres_db)
    db.sql("CREATE TABLE ticks (id bigint PRIMARY KEY, at timestamp NOT NULL, note text)")
    db.sql(
        "INSERT INTO ticks SELECT i, timestamp '2024-01-01' + (i / 3) * interval '1 second', 'n' || i"
        " FROM generate_series(1, 17) AS i"
    )
    db.dispose()

    def read(mode: str, raw: bool) -> tuple[list[Any], list[Any], bool | None]:
        config = {
            "connection.url": postgres_db,
            "mode": mode,
            "tables": "ticks",
            "topic.prefix": "t-",
            "incrementing.column.name": "id",
            "timestamp.column.name": "at",
            "batch.max.rows": "4",
            "timestamp.delay.interval.ms": "0",
        }
        values: list[Any] = []
        offsets: list[Any] = []
        with _started_task(config, raw=raw) as task:
            for _ in range(10):
                batch = task.poll()
                if batch is None:
                    break
                assert len(batch) <= 4
                values += batch.values
                offsets += batch.source_offsets
            return values, offsets, task._queriers[0]._raw_fetch

    for mode in ("bulk", "incrementing", "timestamp"):
        fast_values, fast_offsets, used = read(mode, raw=True)
        slow_values, slow_offsets, _ = read(mode, raw=False)
        assert used is True, f"{mode}: the rows did not come from the streamed psycopg cursor"
        assert [v["id"] for v in fast_values] == list(range(1, 18)), mode
        assert fast_values == slow_values
        assert fast_offsets == slow_offsets


def test_postgres_rows_come_in_binary_only_when_every_column_type_loads_so(postgres_db: str) -> None:
    """Binary rows are cheaper to load, but a type psycopg has no binary loader for (an enum here)
    would arrive as bytes instead of text: such a table stays in text format, with the same
    records SQLAlchemy gives."""
    db = Database("postgresql", postgres_db)
    db.sql("CREATE TYPE mood AS ENUM ('sad', 'happy')")
    db.sql("CREATE TABLE feelings (id bigint PRIMARY KEY, m mood, n double precision)")
    db.sql("CREATE TABLE plain (id bigint PRIMARY KEY, n double precision, t text)")
    db.sql("INSERT INTO feelings VALUES (1, 'happy', 0.5), (2, NULL, NULL)")
    db.sql("INSERT INTO plain VALUES (1, 0.5, 'x'), (2, NULL, NULL)")
    db.dispose()

    def read(table: str, raw: bool) -> tuple[list[Any], bool | None]:
        with _started_task({"connection.url": postgres_db, "mode": "bulk", "tables": table, "topic.prefix": "t-"}, raw=raw) as task:
            batch = task.poll()
            assert batch is not None
            return list(batch.values), task._queriers[0]._binary

    feelings, binary = read("feelings", raw=True)
    assert binary is False
    assert feelings == read("feelings", raw=False)[0]
    assert feelings[0]["m"] == "happy"
    plain, binary = read("plain", raw=True)
    assert binary is True
    assert plain == read("plain", raw=False)[0]
