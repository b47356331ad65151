"""Topics → the JDBC sink → tables of a real PostgreSQL, through a real worker process.

What a user checks: the rows in the table after inserts, upserts (by record key and by value
fields), tombstones and replays of the same records; and the DDL that auto.create and auto.evolve
produced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from tests.integration.jdbc_helpers import (
    JDBC_SINK,
    JSON_CONVERTER,
    WORKER_SETTINGS,
    envelope,
    sql,
    struct_schema,
    wait_for,
)
from tests.integration.kafka_helpers import OutgoingRecord, create_topic, produce, unique_topic_name
from tests.integration.worker_process import WorkerProcess

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


@pytest.fixture
def worker(kafka: Any, tmp_path: Path) -> Any:
    settings: dict[str, Any] = {
        **WORKER_SETTINGS,
        "key.converter": JSON_CONVERTER,
        "value.converter": JSON_CONVERTER,
        "offset.flush.interval.ms": "500",
    }
    w = WorkerProcess(tmp_path, kafka.bootstrap_servers, **settings).start()
    try:
        yield w
    finally:
        w.stop()


def _create(worker: WorkerProcess, name: str, config: dict[str, str]) -> None:
    r = httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=30)
    assert r.status_code == 201, r.text
    worker.wait_running(name)


def _rows(url: str, table: str) -> list[tuple[Any, ...]]:
    exists = sql(url, "SELECT to_regclass(%s)", (f'"{table}"',))[0][0]
    return sql(url, f'SELECT * FROM "{table}" ORDER BY 1') if exists else []


def test_upsert_by_record_key_with_deletes_auto_create_and_evolve(
    kafka: Any, worker: WorkerProcess, postgres_db: str
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
            "connection.url": postgres_db,
            "insert.mode": "upsert",
            "pk.mode": "record_key",
            "pk.fields": "id",
            "auto.create": "true",
            "auto.evolve": "true",
            "delete.enabled": "true",
        },
    )
    wait_for(lambda: _rows(postgres_db, topic), lambda rows: len(rows) == 3, what="3 rows")
    columns = sql(
        postgres_db,
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
        (topic,),
    )
    assert columns == [("id", "bigint", "NO"), ("name", "text", "YES"), ("score", "double precision", "YES")]
    key = sql(
        postgres_db,
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        "WHERE i.indrelid = %s::regclass AND i.indisprimary",
        (f'"{topic}"',),
    )
    assert key == [("id",)]

    later = [_customer(1, "ann-2", 9.0), _tombstone(2), _customer(4, "dee", 4.5, email="dee@example.com")]
    produce(kafka.bootstrap_servers, topic, later)
    expected = [(1, "ann-2", 9.0, None), (3, "cy", 3.5, None), (4, "dee", 4.5, "dee@example.com")]
    wait_for(lambda: _rows(postgres_db, topic), lambda rows: rows == expected, what="upserted, deleted, evolved rows")

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
    assert _rows(postgres_db, topic) == expected


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        [tp] = consumer.committed([KafkaTopicPartition(topic, 0)], timeout=10)
        return max(tp.offset, 0)
    finally:
        consumer.close()


def test_insert_with_kafka_coordinates_as_key_and_schemaless_values(
    kafka: Any, worker: WorkerProcess, postgres_db: str
) -> None:
    topic = unique_topic_name("events")
    create_topic(kafka.bootstrap_servers, topic)
    produce(
        kafka.bootstrap_servers,
        topic,
        [OutgoingRecord(value=b'{"kind": "click", "n": %d, "meta": {"a": 1}}' % i) for i in range(5)],
    )
    sql(
        postgres_db,
        f'CREATE TABLE "ev_{topic}" (__connect_topic text, __connect_partition int, __connect_offset bigint, '
        "kind text, n bigint, meta jsonb, PRIMARY KEY (__connect_topic, __connect_partition, __connect_offset))",
    )
    _create(
        worker,
        "sink-insert",
        {
            "connector.class": JDBC_SINK,
            "topics": topic,
            "connection.url": postgres_db,
            "table.name.format": "ev_${topic}",
            "pk.mode": "kafka",
            "value.converter": JSON_CONVERTER,
            "value.converter.schemas.enable": "false",
        },
    )
    rows = wait_for(lambda: _rows(postgres_db, f"ev_{topic}"), lambda rows: len(rows) == 5, what="5 rows")
    assert [r[:5] for r in sorted(rows, key=lambda r: r[2])] == [(topic, 0, i, "click", i) for i in range(5)]
    assert all(r[5] == {"a": 1} for r in rows)


def test_upsert_by_value_fields_is_idempotent_under_replays(
    kafka: Any, worker: WorkerProcess, postgres_db: str
) -> None:
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
            "connection.url": postgres_db,
            "insert.mode": "upsert",
            "pk.mode": "record_value",
            "pk.fields": "region,id",
            "auto.create": "true",
        },
    )
    wait_for(
        lambda: (
            sql(postgres_db, f'SELECT region, id, balance FROM "{topic}" ORDER BY 1, 2')
            if sql(postgres_db, "SELECT to_regclass(%s)", (f'"{topic}"',))[0][0]
            else []
        ),
        lambda rows: rows == [("eu", 1, 30), ("eu", 2, 5), ("us", 1, 20)],
        what="one row per (region, id) with the last balance",
    )
