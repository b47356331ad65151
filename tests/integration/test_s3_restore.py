"""Round trip through a real worker, Kafka and S3 server: topic → S3 sink → S3 source → topic.

The restored records must match the originals exactly: partition, offset order, key, value,
headers and timestamp.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.kafka_helpers import OutgoingRecord, consume_all, create_topic, produce, unique_topic_name
from tests.integration.worker_process import WorkerProcess
from tests.services.s3_server import S3Server

pytestmark = pytest.mark.integration

T0 = 1_700_000_000_000


def _deploy(worker: WorkerProcess, name: str, config: dict[str, Any]) -> None:
    response = httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=30)
    assert response.status_code == 201, response.text
    worker.wait_running(name)


def test_round_trip_restores_partitions_order_keys_values_headers_and_timestamps(
    kafka: Any, s3: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("s3trip")
    restored = f"{topic}-restored"
    create_topic(bootstrap, topic, partitions=3)
    create_topic(bootstrap, restored, partitions=3)
    originals = [
        OutgoingRecord(
            key=f"key-{i}",
            value=orjson.dumps({"id": i, "name": f"name-{i}", "tags": ["a", f"t{i % 4}"]}),
            headers=[("source", b"crm"), ("seq", f"n{i}".encode())],
            partition=i % 3,
            timestamp=T0 + i * 37,
        )
        for i in range(300)
    ]
    produce(bootstrap, topic, originals)
    settings: dict[str, Any] = {
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "offset.flush.interval.ms": "500",
        # The connectors and RegexRouter are named by the Python paths of their entry points.
    }
    worker = WorkerProcess(tmp_path, bootstrap, **settings).start()
    try:
        common = {**s3.connector_config(s3_bucket), "format.class": "json", "s3.compression.type": "gzip"}
        _deploy(
            worker,
            "archive",
            {
                "connector.class": "sluice.connectors.sink.s3.connector.S3SinkConnector",
                "topics": topic,
                **common,
                "flush.size": "25",
                "store.kafka.keys": "true",
                "store.kafka.headers": "true",
                "store.kafka.timestamps": "true",
            },
        )
        deadline = time.monotonic() + 60
        client = s3.client()
        while time.monotonic() < deadline:
            listed = client.list_objects_v2(Bucket=s3_bucket).get("Contents", [])
            count = sum(1 for item in listed if not item["Key"].endswith("/"))
            if count >= 3 * 4 * 4:  # 3 partitions x 4 objects x (values + 3 sidecars)
                break
            time.sleep(0.3)
        httpx.delete(f"{worker.url}/connectors/archive", timeout=30)
        _deploy(
            worker,
            "restore",
            {
                "connector.class": "sluice.connectors.source.s3.connector.S3SourceConnector",
                **common,
                "topics": topic,
                "s3.poll.interval.ms": "500",
                "transforms": "rename",
                "transforms.rename.type": "sluice.transforms.routing.RegexRouter",
                "transforms.rename.regex": "(.*)",
                "transforms.rename.replacement": "$1-restored",
            },
        )
        got = consume_all(bootstrap, restored, expected_count=300, timeout=60, settle=1.0)
    finally:
        worker.stop()
    original = consume_all(bootstrap, topic, expected_count=300)
    assert len(got) == 300
    for before, after in zip(original, got, strict=True):
        assert (after.partition, after.offset) == (before.partition, before.offset)
        assert after.key == before.key
        assert orjson.loads(after.value or b"null") == orjson.loads(before.value or b"null")
        assert after.headers == before.headers
        assert after.timestamp == before.timestamp


def test_restore_merges_interleaved_objects_back_into_offset_order(
    kafka: Any, s3: S3Server, s3_bucket: str, tmp_path: Path
) -> None:
    """A field partitioner spreads one Kafka partition over three directories, so each flush
    commits three objects whose offsets interleave; the restore still replays offset order."""
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("s3mix")
    restored = f"{topic}-restored"
    create_topic(bootstrap, topic)
    create_topic(bootstrap, restored)
    kinds = ["red", "green", "blue"]
    originals = [
        OutgoingRecord(key=f"k{i}", value=orjson.dumps({"id": i, "kind": kinds[(i * 7) % 3 if i % 4 else 0]}))
        for i in range(40)
    ]
    produce(bootstrap, topic, originals)
    worker = WorkerProcess(
        tmp_path,
        bootstrap,
        **{
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
            "offset.flush.interval.ms": "500",
        },
    ).start()
    try:
        common = {
            **s3.connector_config(s3_bucket),
            "format.class": "json",
            "partitioner.class": "FieldPartitioner",
            "partition.field.name": "kind",
        }
        _deploy(
            worker,
            "archive-mix",
            {
                "connector.class": "sluice.connectors.sink.s3.connector.S3SinkConnector",
                "topics": topic,
                **common,
                "flush.size": "10",
                "store.kafka.keys": "true",
            },
        )
        client = s3.client()
        deadline = time.monotonic() + 60
        names: list[str] = []
        while time.monotonic() < deadline:
            listed = [i["Key"] for i in client.list_objects_v2(Bucket=s3_bucket).get("Contents", [])]
            names = [k for k in listed if k.endswith(".json") and ".keys." not in k and ".offsets." not in k]
            if len(names) >= 12:  # 4 flushes x 3 directories
                break
            time.sleep(0.3)
        starts = sorted(int(n.rsplit("+", 1)[1].split(".")[0]) for n in names)
        assert starts[:3] == [0, 1, 2], names  # the first flush's three objects interleave 0..9
        httpx.delete(f"{worker.url}/connectors/archive-mix", timeout=30)
        _deploy(
            worker,
            "restore-mix",
            {
                "connector.class": "sluice.connectors.source.s3.connector.S3SourceConnector",
                **common,
                "topics": topic,
                "s3.poll.interval.ms": "500",
                "transforms": "rename",
                "transforms.rename.type": "sluice.transforms.routing.RegexRouter",
                "transforms.rename.regex": "(.*)",
                "transforms.rename.replacement": "$1-restored",
            },
        )
        got = consume_all(bootstrap, restored, expected_count=40, timeout=60, settle=1.0)
    finally:
        worker.stop()
    assert [orjson.loads(r.value or b"null")["id"] for r in got] == list(range(40))
    assert [r.key for r in got] == [f"k{i}".encode() for i in range(40)]
