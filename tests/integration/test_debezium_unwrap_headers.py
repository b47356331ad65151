"""The two keys of issue #37 on a real worker, broker and database: Debezium's documented
ExtractNewRecordState example (with ``operation.header``) and ``header.converter`` set to Connect's
JsonConverter, in one connector config that Kafka Connect 4.3 + Debezium 3.6 run unchanged.

The bytes expected here are what Debezium's own SMT and Connect's converter write for the same
change events (``tests/integration/test_unwrap_vectors.py`` checks that correspondence in Java).
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from tests.integration.cdc_helpers import cdc_config, dbname, read_events, run_sql
from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.worker_process import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration

TIMEOUT_S = 30

#: Debezium 3.6's documentation, "Adding metadata" (event-flattening.adoc), copied unchanged, plus
#: the key issue #37 found refused (a Debezium 1.x key that Debezium 3 accepts and ignores).
DEBEZIUM_DOCS_UNWRAP = {
    "transforms": "unwrap",
    "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
    "transforms.unwrap.add.fields": "op,table,lsn,source.ts_ms",
    "transforms.unwrap.add.headers": "db",
    "transforms.unwrap.delete.tombstone.handling.mode": "rewrite",
    "transforms.unwrap.operation.header": "true",
}


@pytest.fixture
def worker(worker_process: WorkerFactory) -> WorkerProcess:
    return worker_process(**{"offset.flush.interval.ms": "500"})  # as cdc_helpers.worker sets it


def _headers(record: Any) -> dict[str, bytes | None]:
    return dict(record.headers or [])


def test_documented_unwrap_with_json_header_converter_writes_what_connect_writes(
    worker: WorkerProcess, kafka: Any, postgres: Any, postgres_db: str
) -> None:
    prefix = unique_topic_name("unwraphdr")
    run_sql(postgres_db, "CREATE TABLE items (id int PRIMARY KEY, label text)")
    config = {
        **cdc_config(postgres.port, dbname(postgres_db), prefix, **{"table.include.list": r"public\.items"}),
        "snapshot.mode": "no_data",
        "header.converter": "org.apache.kafka.connect.json.JsonConverter",
        **DEBEZIUM_DOCS_UNWRAP,
    }
    typo = {**config, "transforms.unwrap.operation.headers": "true"}
    refused = httpx.post(f"{worker.url}/connectors", json={"name": "typo", "config": typo}, timeout=TIMEOUT_S)
    assert refused.status_code == 400 and "operation.headers" in refused.json()["message"], refused.text

    created = httpx.post(f"{worker.url}/connectors", json={"name": "unwrap", "config": config}, timeout=TIMEOUT_S)
    assert created.status_code == 201, created.text
    worker.wait_running("unwrap", timeout=60)
    run_sql(postgres_db, "INSERT INTO items VALUES (1, 'first')")
    run_sql(postgres_db, "UPDATE items SET label = 'second' WHERE id = 1")
    run_sql(postgres_db, "DELETE FROM items WHERE id = 1")

    records = read_events(kafka.bootstrap_servers, f"{prefix}.public.items", 3)
    payloads = [orjson.loads(r.value)["payload"] for r in records]
    assert [(p["id"], p["label"], p["__deleted"], p["__op"], p["__table"]) for p in payloads] == [
        (1, "first", "false", "c", "items"),
        (1, "second", "false", "u", "items"),
        (1, None, "true", "d", "items"),  # REPLICA IDENTITY DEFAULT: a delete's before holds the key only
    ]
    assert all(p["__lsn"] > 0 and p["__source_ts_ms"] > 0 for p in payloads)
    db_header = b'{"schema":{"type":"string","optional":true},"payload":"%s"}' % dbname(postgres_db).encode()
    assert [_headers(r) for r in records] == [{"__db": db_header}] * 3
    assert "operation.header=true has no effect" in worker.log()
