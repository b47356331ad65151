"""Topic range → sink connector (the JDBC sink) on real Spark, Kafka and PostgreSQL."""

from __future__ import annotations

import decimal
import json

import pytest

from sluice.connectors.api.schema import INT64_SCHEMA, OPTIONAL_STRING_SCHEMA, Decimal, Schema
from sluice.converters.avro import AvroConverter
from sluice.deploy.kafka_stack import KafkaBroker
from sluice.deploy.schema_registry import SchemaRegistryServer
from sluice.worker.backfill import BackfillManager, JobState
from tests.integration.jdbc_helpers import sql
from tests.integration.kafka_helpers import ClosingAdminClient, OutgoingRecord, create_topic, produce, unique_topic_name
from tests.services.postgres import PostgresServer

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


def produce_events(bootstrap: str, prefix: str, count: int) -> str:
    """A new two-partition topic holding ``count`` JSON-with-schema events (id, label); its name."""
    topic = unique_topic_name(prefix)
    create_topic(bootstrap, topic, partitions=2)
    records = [
        OutgoingRecord(
            value=json.dumps({"schema": SCHEMA, "payload": {"id": i, "label": f"event {i}"}}).encode(), partition=i % 2
        )
        for i in range(count)
    ]
    produce(bootstrap, topic, records)
    return topic


def test_topic_range_reprocessed_into_a_jdbc_table(
    backfills: BackfillManager, kafka: KafkaBroker, postgres: PostgresServer
) -> None:
    topic = produce_events(kafka.bootstrap_servers, "events", 2_000)
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
    with ClosingAdminClient({"bootstrap.servers": kafka.bootstrap_servers}) as admin:
        groups = admin.list_consumer_groups().result(timeout=15)
    # (Other tests' connectors share the broker, so only groups that could be this job's count.)
    assert not [g.group_id for g in groups.valid if "reprocess" in g.group_id]


def test_an_avro_topic_range_reprocessed_into_a_jdbc_table(
    backfills: BackfillManager, kafka: KafkaBroker, postgres: PostgresServer, schema_registry: SchemaRegistryServer
) -> None:
    """Avro with a Schema Registry, as most Connect deployments run: each Spark task's sink reads
    the records with its own AvroConverter, fetching the writer's schema by id."""
    topic = unique_topic_name("avro-events")
    create_topic(kafka.bootstrap_servers, topic, partitions=2)
    row = Schema.struct(
        [("id", INT64_SCHEMA), ("label", OPTIONAL_STRING_SCHEMA), ("amount", Decimal.schema(2))], name="shop.Event"
    )
    writer = AvroConverter()
    writer.configure({"schema.registry.url": schema_registry.url}, False)
    values = writer.from_connect_batch(
        topic,
        [row] * 600,
        [
            {"id": i, "label": None if i % 5 == 0 else f"event {i}", "amount": decimal.Decimal(i).scaleb(-2)}
            for i in range(600)
        ],
    )
    produce(kafka.bootstrap_servers, topic, [OutgoingRecord(value=v, partition=i % 2) for i, v in enumerate(values)])
    db = "reprocess_avro"
    url = postgres.create_database(db)
    backfills.submit(
        {
            "id": "reprocess-avro",
            "kind": "topic_to_sink",
            "source": {"topic": topic},
            "target": {
                "config": {
                    "connector.class": "JdbcSink",
                    "connection.url": postgres.jdbc_url(db),
                    "connection.user": "postgres",
                    "table.name.format": "events",
                    "auto.create": "true",
                    "insert.mode": "insert",
                    "value.converter": "io.confluent.connect.avro.AvroConverter",
                    "value.converter.schema.registry.url": schema_registry.url,
                }
            },
        }
    )
    status = backfills.wait("reprocess-avro", timeout=300)
    assert status.state is JobState.SUCCEEDED, status.error
    assert status.rows_done == 600

    rows = sql(url, "SELECT id, label, amount FROM events ORDER BY id")
    assert len(rows) == 600
    assert rows[0] == (0, None, decimal.Decimal("0.00"))
    assert rows[599] == (599, "event 599", decimal.Decimal("5.99"))
