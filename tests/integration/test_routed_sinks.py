"""A topic-renaming transform in front of a sink (KIP-793): the data goes where the new name
says (a table named after it), while consumer offsets are committed for the topic the records
were consumed from, so the connector's lag drains and a restart does not re-deliver everything.

The runtime keeps a routed poll as one columnar batch carrying both names; this checks that the
sinks use each name for its purpose."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.jdbc_helpers import (
    JDBC_SINK,
    JSON_CONVERTER,
    WORKER_SETTINGS,
    Database,
    envelope,
    struct_schema,
    wait_for,
)
from tests.integration.kafka_helpers import OutgoingRecord, committed_offset, create_topic, produce, unique_topic_name
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

SCHEMA = struct_schema("item", ("id", "int64", False), ("name", "string", True))
ROUTE = {
    "transforms": "route",
    "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
    "transforms.route.regex": "raw-(.*)",
    "transforms.route.replacement": "clean_$1",
}


def test_a_routed_jdbc_sink_writes_the_new_table_and_commits_the_consumed_topic(kafka: Any, tmp_path: Path) -> None:
    suffix = unique_topic_name("items").replace("-", "_")
    topic = f"raw-{suffix}"
    create_topic(kafka.bootstrap_servers, topic)
    produce(
        kafka.bootstrap_servers,
        topic,
        [OutgoingRecord(key=None, value=envelope(SCHEMA, {"id": i, "name": f"n{i}"})) for i in range(50)],
    )
    db = Database("sqlite", f"sqlite:///{tmp_path / 'routed.db'}")
    settings = {**WORKER_SETTINGS, "value.converter": JSON_CONVERTER, "offset.flush.interval.ms": "500"}
    (tmp_path / "worker").mkdir()
    worker = WorkerProcess(tmp_path / "worker", kafka.bootstrap_servers, **settings).start()
    try:
        config = {
            "connector.class": JDBC_SINK,
            "topics": topic,
            "connection.url": db.url,
            "auto.create": "true",
            **ROUTE,
        }
        r = httpx.post(f"{worker.url}/connectors", json={"name": "routed", "config": config}, timeout=30)
        assert r.status_code == 201, r.text
        table = f"clean_{suffix}"
        wait_for(lambda: db.rows(table, "id, name") if db.exists(table) else [], lambda rows: len(rows) == 50, what="50 rows")
        assert db.rows(table, "id, name") == [(i, f"n{i}") for i in range(50)]
        assert not db.exists(topic)
        wait_for(
            lambda: committed_offset(kafka.bootstrap_servers, "connect-routed", topic),
            lambda n: n == 50,
            what="offsets committed for the consumed topic",
        )
    finally:
        assert worker.stop() == 0, worker.log()
        db.dispose()
