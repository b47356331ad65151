"""The hand-off guard on a real worker: a backfill into a stored CDC connector's topic without
``target.cdc`` is refused at submit (400 on ``target.topic``, pointing at ``target.cdc``), while the
same backfill with ``target.cdc`` and a backfill into a topic of its own are accepted.

The CDC connector is created STOPPED (Connect's ``initial_state``): its config is validated against
the real database and stored, but no slot is made and nothing streams. The accepted backfills carry
a cron schedule, so they are stored without starting Spark; the guard runs at submit either way.
About 10 s, most of it the worker's start.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.cdc_helpers import cdc_config, dbname, run_sql
from tests.integration.worker_process import WorkerProcess
from tests.services.postgres import PostgresServer

pytestmark = pytest.mark.integration

NIGHTLY = {"cron": "0 3 * * *"}


def test_a_backfill_into_a_cdc_connectors_topic_must_hand_off_with_target_cdc(
    kafka: KafkaBroker, postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.create_database("handoff_guard")
    run_sql(url, "CREATE TABLE orders (id bigint PRIMARY KEY, total numeric(10,2))")
    config = cdc_config(postgres.port, dbname(url), "shop", **{"table.include.list": r"public\.orders"})
    source = {
        "connection.url": postgres.jdbc_url("handoff_guard"),
        "connection.user": "postgres",
        "table": "public.orders",
    }
    plain = {
        "id": "orders",
        "kind": "jdbc_to_topic",
        "source": {**source, "cdc.slot.name": config["slot.name"]},
        "target": {"topic": "shop.public.orders"},
    }
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers)
    worker.start()
    try:
        created = httpx.post(
            f"{worker.url}/connectors",
            json={"name": "shop-cdc", "config": config, "initial_state": "STOPPED"},
            timeout=30,
        )
        assert created.status_code == 201, created.text

        refused = httpx.post(f"{worker.url}/backfills", json=plain, timeout=10)
        assert refused.status_code == 400
        message = refused.json()["message"]
        assert message.startswith(
            "Invalid backfill spec: target.topic: shop.public.orders is the topic of the PostgreSQL CDC connector "
            "shop-cdc (topic.prefix shop + table public.orders)"
        )
        assert "two keys in two partitions" in message
        assert 'Hand off with target.cdc instead: {"name": "shop-cdc"' in message
        assert httpx.get(f"{worker.url}/backfills/orders", timeout=10).status_code == 404  # nothing stored

        handoff = {
            "id": "orders",
            "kind": "jdbc_to_topic",
            "source": source,
            "target": {"cdc": {"name": "shop-cdc", "config": config}},
            "schedule": NIGHTLY,
        }
        accepted = httpx.post(f"{worker.url}/backfills", json=handoff, timeout=10)
        assert accepted.status_code == 201, accepted.text
        assert "warnings" not in accepted.json()

        own_topic = {**plain, "id": "orders-copy", "target": {"topic": "orders-copy"}, "schedule": NIGHTLY}
        assert httpx.post(f"{worker.url}/backfills", json=own_topic, timeout=10).status_code == 201
    finally:
        worker.stop()
