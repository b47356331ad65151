"""``topic.creation.*`` (KIP-158) on a real standalone worker and broker: source topics are created
with the partitions, replication factor and topic configs of their group, and a topic that already
exists is left as it is."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

from tests.integration.kafka_helpers import ClosingAdminClient, consume_all, create_topic, unique_topic_name, wait_topic
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

COUNT = 20


def sequence(name: str, topic: str, creation: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "config": {
            "connector.class": "SequenceSource",
            "topic": topic,
            "sequence.count": str(COUNT),
            "key.converter": "StringConverter",
            "value.converter": "JsonConverter",
            "value.converter.schemas.enable": "false",
            **creation,
        },
    }


def describe(admin: AdminClient, topic: str) -> tuple[int, int, dict[str, str]]:
    """(partitions, replicas of partition 0, the topic's configs) as the broker reports them."""
    meta = admin.list_topics(topic, timeout=10).topics[topic]
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=10)
    return len(meta.partitions), len(meta.partitions[0].replicas), {k: e.value for k, e in entries.items()}


def test_source_topics_are_created_per_group_and_an_existing_topic_is_left_alone(kafka: Any, tmp_path: Path) -> None:
    prefix = unique_topic_name("kip158")
    compacted, plain, existing = f"{prefix}.state", f"{prefix}.events", f"{prefix}.existing"
    create_topic(kafka.bootstrap_servers, existing, partitions=1)
    creation = {
        "topic.creation.groups": "compacted",
        "topic.creation.compacted.include": rf"{prefix}\.state,{prefix}\.other",
        "topic.creation.compacted.exclude": rf"{prefix}\.events",
        "topic.creation.compacted.partitions": "2",
        "topic.creation.compacted.replication.factor": "1",
        "topic.creation.compacted.cleanup.policy": "compact",
        "topic.creation.default.partitions": "3",
        "topic.creation.default.replication.factor": "-1",
        "topic.creation.default.compression.type": "lz4",
        "topic.creation.default.retention.ms": "3600000",
    }
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers).start()
    try:
        for name, topic in (("kip158-state", compacted), ("kip158-events", plain), ("kip158-existing", existing)):
            r = httpx.post(f"{worker.url}/connectors", json=sequence(name, topic, creation), timeout=30)
            assert r.status_code == 201, r.text
        for name in ("kip158-state", "kip158-events", "kip158-existing"):
            worker.wait_running(name)
        for topic in (compacted, plain, existing):
            wait_topic(kafka.bootstrap_servers, topic)
            assert len(consume_all(kafka.bootstrap_servers, topic, COUNT)) == COUNT

        with ClosingAdminClient({"bootstrap.servers": kafka.bootstrap_servers}) as admin:
            partitions, replicas, configs = describe(admin, compacted)
            assert (partitions, replicas, configs["cleanup.policy"]) == (2, 1, "compact")
            assert configs["compression.type"] == "producer"  # the default group's configs are not inherited

            partitions, replicas, configs = describe(admin, plain)
            assert (partitions, replicas) == (3, 1)  # -1: the single broker's default replication factor
            assert (configs["compression.type"], configs["retention.ms"], configs["cleanup.policy"]) == ("lz4", "3600000", "delete")

            partitions, _, configs = describe(admin, existing)
            resource = ConfigResource(ResourceType.TOPIC, existing)
            retention = admin.describe_configs([resource])[resource].result(timeout=10)["retention.ms"]
        assert (partitions, configs["compression.type"]) == (1, "producer")
        # the broker's setting (static or default), never a topic override from the connector's groups
        assert retention.source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value and retention.value != "3600000"
    finally:
        assert worker.stop() == 0, worker.log()


def test_validate_names_a_missing_or_bad_topic_creation_key(kafka: Any, tmp_path: Path) -> None:
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers).start()
    try:
        for creation, key in (
            ({"topic.creation.default.partitions": "3"}, "topic.creation.default.replication.factor"),
            (
                {
                    "topic.creation.default.partitions": "3",
                    "topic.creation.default.replication.factor": "1",
                    "topic.creation.groups": "g",
                    "topic.creation.g.include": "(",
                },
                "topic.creation.g.include",
            ),
        ):
            body = sequence("kip158-bad", "t", creation)
            r = httpx.post(f"{worker.url}/connectors", json=body, timeout=30)
            assert r.status_code == 400 and key in r.json()["message"], r.text
    finally:
        assert worker.stop() == 0, worker.log()
