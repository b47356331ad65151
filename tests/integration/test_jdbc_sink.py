"""Topics → the JDBC sink → tables of real PostgreSQL, MariaDB and SQLite databases, through a
real worker process.

What a user checks: the rows in the table after inserts, upserts (by record key and by value
fields), updates, tombstones and replays of the same records; and the DDL that auto.create and
auto.evolve produced. Every test runs once per dialect.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.jdbc_helpers import (
    JDBC_SINK,
    JSON_CONVERTER,
    WORKER_SETTINGS,
    Database,
    database_fixture,
    envelope,
    struct_schema,
    wait_for,
)
from tests.integration.kafka_helpers import (
    OutgoingRecord,
    committed_offset,
    consume_all,
    create_topic,
    produce,
    unique_topic_name,
)
from tests.integration.worker_process import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration

KEY_SCHEMA = {"type": "int64", "optional": False}
V1 = struct_schema("customer", ("id", "int64", False), ("name", "string", True), ("score", "double", True))
V2 = struct_schema(
    "customer", ("id", "int64", False), ("name", "string", True), ("score", "double", True), ("email", "string", True)
)


def _customer(id_: int, name: str, score: float, email: str | None = None) -> OutgoingRecord:
    value: dict[str, Any] = {"id": id_, "name": name, "score": score}
    schema = V1
    if email is not None:
        value["email"] = email
        schema = V2
    return OutgoingRecord(key=envelope(KEY_SCHEMA, id_), value=envelope(schema, value))


def _tombstone(id_: int) -> OutgoingRecord:
    return OutgoingRecord(key=envelope(KEY_SCHEMA, id_), value=None)


db = database_fixture()


@pytest.fixture(scope="module")
def module_worker(module_worker_process: WorkerFactory) -> WorkerProcess:
    """One worker for the module (a start costs some 3 CPU-seconds with its task host fork server)."""
    settings: dict[str, Any] = {
        **WORKER_SETTINGS,
        "key.converter": JSON_CONVERTER,
        "value.converter": JSON_CONVERTER,
        "offset.flush.interval.ms": "500",
    }
    return module_worker_process(**settings)


@pytest.fixture
def worker(module_worker: WorkerProcess) -> Iterator[WorkerProcess]:
    """The module's worker, with no connector left from an earlier test afterwards."""
    yield module_worker
    for name in httpx.get(f"{module_worker.url}/connectors", timeout=30).json():
        assert httpx.delete(f"{module_worker.url}/connectors/{name}", timeout=30).status_code == 204


def _create(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    r = httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=30)
    assert r.status_code == 201, r.text
    worker.wait_running(name)


def _committed(bootstrap: str, group: str, topic: str) -> int:
    return max(committed_offset(bootstrap, group, topic), 0)


#: The column types auto.create gives int64 / optional string / optional double fields.
_CREATED_TYPES = {
    "postgresql": ["bigint", "text", "double precision"],
    "mariadb": ["bigint", "text", "double"],
    "sqlite": ["integer", "text", "real"],
}


def test_upsert_by_record_key_with_deletes_auto_create_and_evolve(
    kafka: Any, worker: WorkerProcess, db: Database
) -> None:
    topic = unique_topic_name("customers")
    create_topic(kafka.bootstrap_servers, topic)
    produce(
        kafka.bootstrap_servers, topic, [_customer(1, "ann", 1.5), _customer(2, "bob", 2.5), _customer(3, "cy", 3.5)]
    )
    _create(
        worker,
        "sink-upsert",
        {
            "connector.class": JDBC_SINK,
            "topics": topic,
            "connection.url": db.url,
            "insert.mode": "upsert",
            "pk.mode": "record_key",
            "pk.fields": "id",
            "auto.create": "true",
            "auto.evolve": "true",
            "delete.enabled": "true",
        },
    )
    wait_for(lambda: db.rows(topic), lambda rows: len(rows) == 3, what="3 rows")
    id_type, name_type, score_type = _CREATED_TYPES[db.kind]
    assert db.columns(topic) == [("id", id_type, False), ("name", name_type, True), ("score", score_type, True)]
    assert db.primary_key(topic) == ["id"]

    later = [_customer(1, "ann-2", 9.0), _tombstone(2), _customer(4, "dee", 4.5, email="dee@example.com")]
    produce(kafka.bootstrap_servers, topic, later)
    expected = [(1, "ann-2", 9.0, None), (3, "cy", 3.5, None), (4, "dee", 4.5, "dee@example.com")]
    wait_for(lambda: db.rows(topic), lambda rows: rows == expected, what="upserted, deleted, evolved rows")
    assert db.columns(topic)[3] == ("email", name_type, True)

    # Replaying the same records (as after a crash) leaves the table as it is.
    produce(
        kafka.bootstrap_servers,
        topic,
        [_customer(1, "ann", 1.5), _customer(2, "bob", 2.5), _customer(3, "cy", 3.5), *later],
    )
    wait_for(
        lambda: _committed(kafka.bootstrap_servers, "connect-sink-upsert", topic),
        lambda n: n == 12,
        what="replay consumed",
    )
    assert db.rows(topic) == expected


_JSON_COLUMN = {"postgresql": "jsonb", "mariadb": "json", "sqlite": "text"}
_TEXT_KEY = {"postgresql": "text", "mariadb": "varchar(200)", "sqlite": "text"}


def test_insert_with_kafka_coordinates_as_key_and_schemaless_values(
    kafka: Any, worker: WorkerProcess, db: Database
) -> None:
    topic = unique_topic_name("events")
    create_topic(kafka.bootstrap_servers, topic)
    produce(
        kafka.bootstrap_servers,
        topic,
        [OutgoingRecord(value=b'{"kind": "click", "n": %d, "meta": {"a": 1}}' % i) for i in range(5)],
    )
    table = f"ev_{topic}"
    db.sql(
        f"CREATE TABLE {db.quote(table)} (__connect_topic {_TEXT_KEY[db.kind]}, __connect_partition int, "
        f"__connect_offset bigint, kind text, n bigint, meta {_JSON_COLUMN[db.kind]}, "
        "PRIMARY KEY (__connect_topic, __connect_partition, __connect_offset))",
    )
    _create(
        worker,
        "sink-insert",
        {
            "connector.class": JDBC_SINK,
            "topics": topic,
            "connection.url": db.url,
            "table.name.format": "ev_${topic}",
            "pk.mode": "kafka",
            "value.converter": JSON_CONVERTER,
            "value.converter.schemas.enable": "false",
        },
    )
    rows = wait_for(lambda: db.rows(table, order="3"), lambda rows: len(rows) == 5, what="5 rows")
    assert [r[:5] for r in rows] == [(topic, 0, i, "click", i) for i in range(5)]
    assert all((orjson.loads(r[5]) if isinstance(r[5], str) else r[5]) == {"a": 1} for r in rows)


def test_upsert_by_value_fields_is_idempotent_under_replays(kafka: Any, worker: WorkerProcess, db: Database) -> None:
    topic = unique_topic_name("accounts")
    create_topic(kafka.bootstrap_servers, topic)
    schema = struct_schema("account", ("region", "string", False), ("id", "int32", False), ("balance", "int64", True))
    records = [
        OutgoingRecord(value=envelope(schema, {"region": r, "id": i, "balance": b}))
        for r, i, b in [("eu", 1, 10), ("us", 1, 20), ("eu", 1, 30), ("eu", 2, 5)]
    ]
    produce(kafka.bootstrap_servers, topic, records)
    produce(kafka.bootstrap_servers, topic, records)  # the same records twice
    _create(
        worker,
        "sink-value-pk",
        {
            "connector.class": JDBC_SINK,
            "topics": topic,
            "connection.url": db.url,
            "insert.mode": "upsert",
            "pk.mode": "record_value",
            "pk.fields": "region,id",
            "auto.create": "true",
        },
    )
    wait_for(
        lambda: db.rows(topic, "region, id, balance", order="1, 2"),
        lambda rows: rows == [("eu", 1, 30), ("eu", 2, 5), ("us", 1, 20)],
        what="one row per (region, id) with the last balance",
    )
    assert db.primary_key(topic) == ["region", "id"]


def test_update_mode_changes_existing_rows_only(kafka: Any, worker: WorkerProcess, db: Database) -> None:
    topic = unique_topic_name("prices")
    create_topic(kafka.bootstrap_servers, topic)
    db.sql(f"CREATE TABLE {db.quote(topic)} (sku bigint NOT NULL PRIMARY KEY, price double precision, note text)")
    db.sql(f"INSERT INTO {db.quote(topic)} VALUES (1, 1.0, 'one'), (2, 2.0, 'two')")
    schema = struct_schema("price", ("sku", "int64", False), ("price", "double", True), ("note", "string", True))
    updates = [
        OutgoingRecord(value=envelope(schema, {"sku": s, "price": p, "note": n}))
        for s, p, n in [(1, 1.5, "one+"), (3, 3.0, "three"), (2, 2.5, None), (1, 1.75, "one++")]
    ]
    produce(kafka.bootstrap_servers, topic, updates)
    _create(
        worker,
        "sink-update",
        {
            "connector.class": JDBC_SINK,
            "topics": topic,
            "connection.url": db.url,
            "insert.mode": "update",
            "pk.mode": "record_value",
            "pk.fields": "sku",
        },
    )
    expected = [(1, 1.75, "one++"), (2, 2.5, None)]  # sku 3 has no row to update
    wait_for(lambda: db.rows(topic), lambda rows: rows == expected, what="updated rows")
    produce(kafka.bootstrap_servers, topic, updates)  # a replay changes nothing
    wait_for(
        lambda: _committed(kafka.bootstrap_servers, "connect-sink-update", topic),
        lambda n: n == 8,
        what="replay consumed",
    )
    assert db.rows(topic) == expected


def test_a_row_the_database_rejects_goes_to_the_dead_letter_queue_and_the_rest_is_written(
    kafka: Any, worker: WorkerProcess, db: Database
) -> None:
    topic = unique_topic_name("stock")
    dlq = topic + "-dlq"
    create_topic(kafka.bootstrap_servers, topic)
    create_topic(kafka.bootstrap_servers, dlq)
    db.sql(f"CREATE TABLE {db.quote(topic)} (sku bigint NOT NULL PRIMARY KEY, qty bigint NOT NULL CHECK (qty >= 0))")
    schema = struct_schema("stock", ("sku", "int64", False), ("qty", "int64", False))

    def batch(*pairs: tuple[int, int]) -> list[OutgoingRecord]:
        return [OutgoingRecord(value=envelope(schema, {"sku": s, "qty": q})) for s, q in pairs]

    produce(kafka.bootstrap_servers, topic, batch((1, 10), (2, 20)))
    _create(
        worker,
        "sink-dlq",
        {
            "connector.class": JDBC_SINK,
            "topics": topic,
            "connection.url": db.url,
            "insert.mode": "upsert",
            "pk.mode": "record_value",
            "pk.fields": "sku",
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": dlq,
        },
    )
    wait_for(lambda: db.rows(topic), lambda rows: rows == [(1, 10), (2, 20)], what="first batch")
    # The table is known now, so on PostgreSQL this batch is sent without waiting; the failure
    # surfaces on the next put or commit and the batch is written again row by row.
    produce(kafka.bootstrap_servers, topic, batch((3, 30), (4, -1), (1, 11)))
    wait_for(lambda: db.rows(topic), lambda rows: rows == [(1, 11), (2, 20), (3, 30)], what="the good rows")
    [dead] = consume_all(kafka.bootstrap_servers, dlq, 1, timeout=60)
    assert orjson.loads(dead.value or b"null")["payload"] == {"sku": 4, "qty": -1}
    status = httpx.get(f"{worker.url}/connectors/sink-dlq/status", timeout=30).json()
    assert status["tasks"][0]["state"] == "RUNNING"


@pytest.mark.parametrize(
    "bad",
    [
        b'{"id":5,"v":1e999}',  # valid JSON, but no double
        b'{"id":5,"v":NaN}',  # Arrow's JSON reader accepts NaN; JSON and the converter do not
        b'{"id":5,"v":1.5,"s":"\xff"}',  # invalid UTF-8, which Arrow's reader keeps
        b'{"id":5,"v":1.5',  # truncated
    ],
    ids=["overflow", "nan", "bad-utf8", "truncated"],
)
def test_a_malformed_or_unconvertible_value_goes_to_the_dead_letter_queue(
    kafka: Any, worker: WorkerProcess, db: Database, bad: bytes
) -> None:
    """The sink takes schemaless JSON raw and unchecked (it parses it itself), so the first to see a
    bad value is the task: on PostgreSQL the JSON fast path's helper thread refuses the batch and
    the task gives it back (``UnusableRawValues``); elsewhere the task reads the values, whose
    decoding fails. Either way the runtime delivers that batch again decoded, record by record,
    dead-letters the one record and writes every other row once."""
    topic = unique_topic_name("readings")
    dlq = topic + "-dlq"
    name = f"sink-no-double-{topic}"
    create_topic(kafka.bootstrap_servers, topic)
    create_topic(kafka.bootstrap_servers, dlq)
    db.sql(f"CREATE TABLE {db.quote(topic)} (id bigint PRIMARY KEY, v double precision, s text)")

    def values(ids: range) -> list[OutgoingRecord]:
        return [OutgoingRecord(value=b'{"id":%d,"v":%d.5}' % (i, i)) for i in ids]

    produce(kafka.bootstrap_servers, topic, values(range(0, 3)))
    r = httpx.post(
        f"{worker.url}/connectors",
        json={
            "name": name,
            "config": {
                "connector.class": JDBC_SINK,
                "topics": topic,
                "connection.url": db.url,
                "insert.mode": "insert",  # a row written twice would break the primary key
                "value.converter": JSON_CONVERTER,
                "value.converter.schemas.enable": "false",
                "errors.tolerance": "all",
                "errors.deadletterqueue.topic.name": dlq,
            },
        },
        timeout=30,
    )
    assert r.status_code == 201, r.text
    worker.wait_running(name)
    # The first batch reads the table's column types; the fast path can take the next ones.
    wait_for(lambda: db.sql(f"SELECT count(*) FROM {db.quote(topic)}"), lambda rows: rows == [(3,)], what="first batch")
    produce(kafka.bootstrap_servers, topic, values(range(3, 5)) + [OutgoingRecord(value=bad)] + values(range(6, 10)))

    expected = [(i, i + 0.5) for i in range(10) if i != 5]
    wait_for(
        lambda: db.sql(f"SELECT id, v FROM {db.quote(topic)} ORDER BY id"), lambda rows: rows == expected, what="rows"
    )
    [dead] = consume_all(kafka.bootstrap_servers, dlq, 1, timeout=60)
    assert dead.value == bad
    status = httpx.get(f"{worker.url}/connectors/{name}/status", timeout=30).json()
    assert status["tasks"][0]["state"] == "RUNNING"
    if db.kind == "postgresql":  # the path this test is about was taken (the log names this test's topic)
        assert any("do not convert" in line and topic in line for line in worker.log(tail=200_000).splitlines())
