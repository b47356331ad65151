"""Topic range → sink connector (the JDBC sink) on real Spark, Kafka and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.admin import AdminClient

from deploy.kafka_stack import KafkaBroker
from deploy.postgres import PostgresServer
from tests.integration.jdbc_helpers import sql
from tests.integration.kafka_helpers import OutgoingRecord, create_topic, produce, unique_topic_name
from worker.backfill import BackfillManager, JobState

pytestmark = pytest.mark.integration

SCHEMA = {
    "type": "struct",
    "name": "event",
    "optional": False,
    "fields": [
        {"field": "id", "type": "int64", "optional": False},
        {"field": "label", "type": "string", "optional": True},
    ],
}


def test_topic_range_reprocessed_into_a_jdbc_table(
    backfills: BackfillManager, kafka: KafkaBroker, postgres: PostgresServer
) -> None:
    topic = unique_topic_name("events")
    create_topic(kafka.bootstrap_servers, topic, partitions=2)
    produce(
        kafka.bootstrap_servers,
        topic,
        [
            OutgoingRecord(value=json.dumps({"schema": SCHEMA, "payload": {"id": i, "label": f"event {i}"}}).encode(), partition=i % 2)
            for i in range(2_000)
        ],
    )
    db = "reprocess_events"
    url = postgres.create_database(db)
    spec = {
        "id": "reprocess",
        "kind": "topic_to_sink",
        # Partition 0 holds even ids at offset id/2, partition 1 odd ids at (id-1)/2.
        "source": {"topic": topic, "start.offsets": {"0": 100, "1": 100}, "end.offsets": {"0": 300, "1": 150}},
        "target": {
            "config": {
                "connector.class": "JdbcSink",
                "connection.url": postgres.jdbc_url(db),
                "connection.user": "postgres",
                "table.name.format": "events",
                "auto.create": "true",
                "insert.mode": "upsert",
                "pk.mode": "record_value",
                "pk.fields": "id",
                "key.converter": "StringConverter",
                "value.converter": "JsonConverter",
            }
        },
    }
    backfills.submit(spec)
    status = backfills.wait("reprocess", timeout=300)
    assert status.state is JobState.SUCCEEDED, status.error
    assert status.rows_total == 250
    assert status.rows_done == 250

    rows = sql(url, "SELECT id, label FROM events ORDER BY id")
    expected = sorted([2 * o for o in range(100, 300)] + [2 * o + 1 for o in range(100, 150)])
    assert [r[0] for r in rows] == expected
    assert rows[0][1] == f"event {expected[0]}"

    # The backfill used no consumer group: nothing to disturb a live connector's offsets.
    # The client is held in a name: a temporary one is freed before its answer arrives, and
    # librdkafka then purges the request, so the future never completes.
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    groups = admin.list_consumer_groups().result(timeout=15)
    assert not [g.group_id for g in groups.valid if "reprocess" in g.group_id or g.group_id.startswith("connect-")]
