"""Tables of a real PostgreSQL → the JDBC source → topics, through a real worker process.

What a user checks: the records in the topic (values and Connect schemas), that rows inserted
later show up, and that a worker restart resumes from the stored offsets without re-sending or
missing rows.
"""

from __future__ import annotations

import base64
import decimal
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.integration.jdbc_helpers import JDBC_SOURCE, JSON_CONVERTER, WORKER_SETTINGS, sql
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


def test_incremental_modes_pick_up_new_rows_and_resume_after_restart(
    kafka: Any, postgres_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("pg") + "-"
    sql(
        postgres_db,
        "CREATE TABLE orders (id serial PRIMARY KEY, customer text NOT NULL, amount numeric(10,2), placed date, "
        "note jsonb, raw bytea, tags text[])",
    )
    sql(postgres_db, "CREATE TABLE accounts (id serial PRIMARY KEY, name text, updated_at timestamp NOT NULL)")
    sql(postgres_db, "CREATE TABLE regions (code text, label text)")
    for i in range(3):
        sql(
            postgres_db,
            "INSERT INTO orders (customer, amount, placed, note, raw, tags) VALUES (%s, %s, '2024-03-01', %s, %s, %s)",
            (f"c{i}", decimal.Decimal(f"{i}.25"), orjson.dumps({"i": i}).decode(), bytes([i]), ["a", "b"]),
        )
        sql(
            postgres_db,
            "INSERT INTO accounts (name, updated_at) VALUES (%s, '2024-01-01 00:00:00'::timestamp + %s * interval '1 second')",
            (f"a{i}", i),
        )
    sql(postgres_db, "INSERT INTO regions VALUES ('eu', 'Europe'), ('us', 'Americas')")
    common = {
        "connector.class": JDBC_SOURCE,
        "connection.url": postgres_db,
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
        assert fields["id"]["type"] == "int32" and fields["id"]["optional"] is False
        assert fields["amount"]["name"] == "org.apache.kafka.connect.data.Decimal"
        assert fields["amount"]["parameters"]["scale"] == "2"
        assert fields["placed"]["name"] == "org.apache.kafka.connect.data.Date"
        assert fields["raw"]["type"] == "bytes"
        assert fields["tags"]["type"] == "array"
        payload = first["payload"]
        assert (
            payload["customer"] == "c0" and orjson.loads(payload["note"]) == {"i": 0} and payload["tags"] == ["a", "b"]
        )
        assert decimal.Decimal(int.from_bytes(base64.b64decode(payload["amount"]), "big", signed=True)).scaleb(
            -2
        ) == decimal.Decimal("0.25")
        assert orders[0].key is None
        assert [p["name"] for p in _payloads(bootstrap, prefix + "accounts", 3)] == ["a0", "a1", "a2"]
        # bulk re-reads the whole table every poll
        assert len(consume_all(bootstrap, prefix + "regions", 4, timeout=30)) >= 4
        # a row inserted while the connector runs appears
        sql(postgres_db, "INSERT INTO orders (customer) VALUES ('live')")
        assert [p["customer"] for p in _payloads(bootstrap, prefix + "orders", 4)][-1] == "live"
    finally:
        assert worker.stop() == 0

    # While the worker is down: new rows, and an update that moves a row's timestamp forward.
    sql(postgres_db, "INSERT INTO orders (customer) VALUES ('after-1'), ('after-2')")
    sql(postgres_db, "INSERT INTO accounts (name, updated_at) VALUES ('a3', '2024-01-01 00:01:00')")
    sql(postgres_db, "UPDATE accounts SET name = 'a0-changed', updated_at = '2024-01-01 00:02:00' WHERE name = 'a0'")

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


def test_timestamp_mode_does_not_lose_rows_sharing_a_timestamp(kafka: Any, postgres_db: str, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("ticks")
    create_topic(bootstrap, topic)
    sql(postgres_db, "CREATE TABLE ticks (n int, at timestamptz NOT NULL)")
    sql(postgres_db, "INSERT INTO ticks SELECT g, '2024-05-01 12:00:00+00' FROM generate_series(1, 7) g")
    config = {
        "connector.class": JDBC_SOURCE,
        "connection.url": postgres_db,
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
        sql(postgres_db, "INSERT INTO ticks VALUES (8, '2024-05-01 12:00:01+00')")
        assert sorted(p["n"] for p in _payloads(bootstrap, topic, 8)) == list(range(1, 9))
    finally:
        worker.stop()
