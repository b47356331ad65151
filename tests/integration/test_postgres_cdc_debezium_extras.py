"""Debezium behaviours beyond row changes, through a real worker, PostgreSQL and Kafka.

Logical decoding messages (``pg_logical_emit_message``) as ``op: m`` events on
``<topic.prefix>.message`` with ``message.prefix.*`` filtering; the outbox ``EventRouter`` SMT
routing inserts into an outbox table to ``outbox.event.<aggregatetype>``; the reselector post
processor filling an unchanged TOASTed value that the WAL did not carry.
"""

from __future__ import annotations

import base64
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from tests.integration.cdc_helpers import cdc_config, dbname, key, read_events, run_sql, value, worker, write_connector
from tests.integration.kafka_helpers import unique_topic_name
from tests.services.postgres import PostgresServer

pytestmark = pytest.mark.integration

RESELECTOR = {
    "post.processors": "reselector",
    "reselector.type": "io.debezium.processors.reselect.ReselectColumnsPostProcessor",
}


def test_logical_decoding_messages_are_message_events(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdcmsg")
    run_sql(postgres_db, "CREATE TABLE notes (id int PRIMARY KEY, body text)")
    config = cdc_config(
        postgres.port, dbname(postgres_db), prefix,
        **{"table.include.list": r"public\.notes", "snapshot.mode": "no_data", "slot.drop.on.stop": "true",
           "message.prefix.exclude.list": "skip.*"},
    )  # fmt: skip
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    try:
        w.wait_running("cdc")
        time.sleep(1.0)
        run_sql(postgres_db, "SELECT pg_logical_emit_message(false, 'audit', 'hello')")
        # transactional: delivered at commit, between the transaction's changes
        run_sql(
            postgres_db,
            "INSERT INTO notes VALUES (1, 'a')",
            "SELECT pg_logical_emit_message(true, 'audit', '\\x00ff10'::bytea)",
            "INSERT INTO notes VALUES (2, 'b')",
        )
        run_sql(postgres_db, "SELECT pg_logical_emit_message(false, 'skipped-prefix', 'x')")
        with pytest.raises(psycopg.Error):  # a rolled-back transactional message is never decoded
            run_sql(postgres_db, "SELECT pg_logical_emit_message(true, 'audit', 'gone')", "SELECT 1/0")
        run_sql(postgres_db, "SELECT pg_logical_emit_message(false, 'audit', 'last')")
        messages = read_events(bootstrap, f"{prefix}.message", 3)
        rows = read_events(bootstrap, f"{prefix}.public.notes", 2)
    finally:
        w.stop()
    assert [key(m) for m in messages] == [{"prefix": "audit"}] * 3
    payloads = [value(m) for m in messages]
    assert [p["op"] for p in payloads] == ["m", "m", "m"]
    assert [base64.b64decode(p["message"]["content"]) for p in payloads] == [b"hello", b"\x00\xff\x10", b"last"]
    assert {p["message"]["prefix"] for p in payloads} == {"audit"}
    non_tx, tx, _ = (p["source"] for p in payloads)
    assert non_tx["txId"] is None and isinstance(tx["txId"], int)
    assert tx["txId"] == value(rows[0])["source"]["txId"] and (tx["schema"], tx["table"]) == ("", "")
    assert value(rows[0])["source"]["lsn"] < tx["lsn"] <= value(rows[1])["source"]["lsn"]
    assert (tx["db"], tx["name"], tx["connector"]) == (dbname(postgres_db), prefix, "postgresql")
    doc = orjson.loads(messages[0].value)
    assert doc["schema"]["name"] == "io.debezium.connector.postgresql.MessageValue"
    assert [f["field"] for f in doc["schema"]["fields"]] == ["op", "ts_ms", "source", "transaction", "message"]
    assert orjson.loads(messages[0].key)["schema"]["name"] == "io.debezium.connector.postgresql.MessageKey"


def test_outbox_event_router_routes_inserts_by_aggregate_type(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdcobx")
    kind = f"Order{uuid.uuid4().hex[:6]}"
    run_sql(
        postgres_db,
        "CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, "
        "aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)",
    )
    config = cdc_config(
        postgres.port, dbname(postgres_db), prefix,
        **{"table.include.list": r"public\.outbox", "snapshot.mode": "no_data", "slot.drop.on.stop": "true",
           "tombstones.on.delete": "false", "transforms": "outbox",
           "transforms.outbox.type": "io.debezium.transforms.outbox.EventRouter",
           "transforms.outbox.table.fields.additional.placement": "type:header:eventType",
           "key.converter": "org.apache.kafka.connect.storage.StringConverter"},
    )  # fmt: skip
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    ids = [str(uuid.uuid4()) for _ in range(3)]
    try:
        w.wait_running("cdc")
        time.sleep(1.0)
        for n, event_id in enumerate(ids):
            run_sql(
                postgres_db,
                "INSERT INTO outbox VALUES (%s, %s, %s, 'OrderCreated', %s)",
                params=(event_id, kind, f"order-{n}", orjson.dumps({"total": n}).decode()),
            )
        run_sql(postgres_db, "UPDATE outbox SET type = 'changed'", "DELETE FROM outbox")  # ignored, dropped
        run_sql(postgres_db, "INSERT INTO outbox VALUES (%s, %s, 'order-9', 'OrderShipped', NULL)",
                params=(str(uuid.uuid4()), kind))  # fmt: skip
        events = read_events(bootstrap, f"outbox.event.{kind}", 4)
        log = w.log(tail=1_000_000)
    finally:
        w.stop()
    assert [e.key for e in events] == [b"order-0", b"order-1", b"order-2", b"order-9"]
    assert [orjson.loads(value(e)) for e in events[:3]] == [{"total": 0}, {"total": 1}, {"total": 2}]
    assert value(events[3]) is None
    headers = [dict(e.headers) for e in events[:3]]
    assert [orjson.loads(h["id"]) if h["id"].startswith(b'"') else h["id"].decode() for h in headers] == ids
    assert all(b"OrderCreated" in h["eventType"] for h in headers)
    assert "update of the outbox table" in log


def test_reselector_fills_unchanged_toasted_values(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    body = uuid.uuid4().hex * 1000  # stored out of line (TOAST), not compressed
    run_sql(
        postgres_db,
        "CREATE TABLE docs (id int PRIMARY KEY, n int, body text, note text)",
        "ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL",
    )
    run_sql(postgres_db, "INSERT INTO docs VALUES (1, 1, %s, NULL), (2, 1, %s, 'kept')", params=(body, body[::-1]))
    tag = unique_topic_name("rs")[-6:]
    variants = {"plain": f"rsp{tag}", "reselect": f"rsr{tag}"}
    extras = {
        "plain": {},
        "reselect": {**RESELECTOR, "reselector.reselect.columns.exclude.list": r"public\.docs\.note"},
    }
    configs = {
        name: cdc_config(
            postgres.port,
            dbname(postgres_db),
            p,
            **{
                "table.include.list": r"public\.docs",
                "snapshot.mode": "no_data",
                "slot.drop.on.stop": "true",
                **extras[name],
            },
        )  # fmt: skip
        for name, p in variants.items()
    }
    w = worker(tmp_path, bootstrap).start(*(write_connector(tmp_path / f"{n}.json", n, c) for n, c in configs.items()))
    try:
        for name in variants:
            w.wait_running(name)
        time.sleep(1.0)
        run_sql(postgres_db, "UPDATE docs SET n = n + 1", "UPDATE docs SET n = 5 WHERE id = 2")
        got = {n: [value(r) for r in read_events(bootstrap, f"{p}.public.docs", 3)] for n, p in variants.items()}
    finally:
        w.stop()
    plain = got["plain"]
    assert [e["op"] for e in plain] == ["u", "u", "u"]
    assert [e["after"]["body"] for e in plain] == ["__debezium_unavailable_value"] * 3
    filled = got["reselect"]
    assert [(e["after"]["id"], e["after"]["n"]) for e in filled] == [(1, 2), (2, 2), (2, 5)]
    assert [e["after"]["body"] for e in filled] == [body, body[::-1], body[::-1]]
    assert [e["after"]["note"] for e in filled] == [None, "kept", "kept"]  # excluded column: never reselected
