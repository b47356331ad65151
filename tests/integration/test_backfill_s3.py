"""Topic → S3 export and S3 → topic replay on real Spark, Kafka and the S3 server."""

from __future__ import annotations

import json
import time

import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from sluice.worker.backfill import BackfillManager, JobState
from tests.integration.kafka_helpers import OutgoingRecord, consume_all, create_topic, produce, unique_topic_name
from tests.services.s3_server import S3Server

pytestmark = pytest.mark.integration

RECORDS = 3_000


def _records() -> list[OutgoingRecord]:
    # Recent timestamps: records older than the retention (7 days) would be deleted by the broker.
    base = int(time.time() * 1000) - 3_600_000
    out = []
    for i in range(RECORDS):
        headers = [("trace", f"t-{i}".encode()), ("n", str(i).encode())] if i % 4 else []
        # Every record has a key: the sink's ByteArrayFormat keys sidecar cannot tell null from empty.
        key = f"key-{i % 97}".encode()
        out.append(OutgoingRecord(value=json.dumps({"i": i, "text": "é" * (i % 5)}).encode(), key=key, headers=headers, partition=i % 3, timestamp=base + i * 1000))
    return out


def test_topic_exported_to_s3_and_replayed_identically(
    backfills: BackfillManager, kafka: KafkaBroker, s3: S3Server, s3_bucket: str
) -> None:
    source = unique_topic_name("archive-src")
    create_topic(kafka.bootstrap_servers, source, partitions=3)
    produce(kafka.bootstrap_servers, source, _records())
    original = consume_all(kafka.bootstrap_servers, source, RECORDS)

    s3_keys = {**s3.connector_config(s3_bucket), "format.class": "ByteArrayFormat", "keys.format.class": "ByteArrayFormat"}
    export = {
        "id": "export",
        "kind": "topic_to_s3",
        "source": {"topic": source},
        "target": {
            "config": {
                **s3_keys,
                "flush.size": 700,
                "key.converter": "ByteArrayConverter",
                "value.converter": "ByteArrayConverter",
            }
        },
    }
    backfills.submit(export)
    status = backfills.wait("export", timeout=300)
    assert status.state is JobState.SUCCEEDED, status.error
    assert status.rows_done == RECORDS
    assert status.rows_total == RECORDS
    names = [o["Key"] for o in s3.client().list_objects_v2(Bucket=s3_bucket).get("Contents", []) if not o["Key"].endswith("/")]
    # The S3 sink's layout: topics/<topic>/partition=<p>/<topic>+<p>+<start offset>.bin, with sidecars.
    assert f"topics/{source}/partition=0/{source}+0+0000000000.bin" in names
    assert f"topics/{source}/partition=0/{source}+0+0000000000.keys.bin" in names
    assert f"topics/{source}/partition=2/{source}+2+0000000700.timestamps.json" in names

    replayed_topic = unique_topic_name("archive-replayed")
    replay = {
        "id": "replay",
        "kind": "s3_to_topic",
        "source": {
            "config": s3_keys,
            "topics": [source],
        },
        "target": {"topics": {source: replayed_topic}},
    }
    backfills.submit(replay)
    status = backfills.wait("replay", timeout=300)
    assert status.state is JobState.SUCCEEDED, status.error
    assert status.rows_done == RECORDS

    replayed = consume_all(kafka.bootstrap_servers, replayed_topic, RECORDS)

    def view(records: list) -> list[tuple]:  # type: ignore[type-arg]
        return [(r.partition, r.offset, r.key, r.value, tuple(r.headers or ()), r.timestamp) for r in records]

    assert view(replayed) == view(original)
