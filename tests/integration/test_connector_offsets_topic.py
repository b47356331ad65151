"""A source connector's own offsets topic (``offsets.storage.topic``, KIP-618) on a distributed
worker with exactly-once source support, against a real broker: where the offsets land, what REST
reads and changes, where a connector given a topic of its own goes on from, and the topics it may
not name.

The source is the counting sequence source: task 0 writes keys ``0-<n>`` and keeps ``{"seq": n}``
as the offset of its partition ``{"task": 0}``, so the records in the topic show exactly where each
run started.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.distributed_helpers import Cluster, wait_for
from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("offsets-topic"),
        kafka.bootstrap_servers,
        1,
        **{"exactly.once.source.support": "enabled"},
    )
    c.start()
    yield c
    c.stop()


def _sequence(topic: str, count: int, offsets_topic: str | None = None) -> dict[str, Any]:
    config = {"connector.class": "SequenceSource", "tasks.max": "1", "topic": topic, "sequence.count": str(count)}
    if offsets_topic is not None:
        config["offsets.storage.topic"] = offsets_topic
    return config


def _offset_records(bootstrap: str, topic: str, connector: str) -> list[dict[str, Any] | None]:
    """The values (``None``: a tombstone) of ``connector``'s records in offsets topic ``topic``, in
    order, as a read_committed consumer sees them now."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "offsets-reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        found: list[dict[str, Any] | None] = []
        while any(consumer.position([TopicPartition(topic, p)])[0].offset < end for p, end in ends.items() if end > 0):
            message = consumer.poll(1.0)
            if message is None or message.error() is not None:
                continue
            key = json.loads(message.key() or b"null")
            if isinstance(key, list) and key[0] == connector:
                value = message.value()
                found.append(None if value is None else json.loads(value))
        return found
    finally:
        consumer.close()


def _seqs(bootstrap: str, topic: str, count: int) -> list[int]:
    return [int((r.key or b"").decode().split("-")[1]) for r in consume_all(bootstrap, topic, count, timeout=60)]


def _offsets(c: Cluster, name: str) -> list[dict[str, Any]]:
    response = c.request(c.workers[0], "GET", f"/connectors/{name}/offsets")
    assert response.status_code == 200, response.text
    return list(response.json()["offsets"])


def _stop(c: Cluster, name: str) -> None:
    assert c.request(c.workers[0], "PUT", f"/connectors/{name}/stop").status_code == 204
    wait_for(
        lambda: c.status(c.workers[0], name),
        lambda b: b.get("connector", {}).get("state") == "STOPPED",
        what=f"{name} stopped",
    )


def _resume(c: Cluster, name: str) -> None:
    assert c.request(c.workers[0], "PUT", f"/connectors/{name}/resume").status_code == 202


def test_a_connector_with_its_own_topic_commits_its_offsets_there_and_rest_follows_it(
    cluster: Cluster, kafka: KafkaBroker
) -> None:
    bootstrap, c = kafka.bootstrap_servers, cluster
    topic, own = unique_topic_name("seq-own"), unique_topic_name("own-offsets")
    create_topic(bootstrap, topic, partitions=1)
    c.put_config(c.workers[0], "own", _sequence(topic, 300, own))
    assert _seqs(bootstrap, topic, 300) == list(range(300))
    wait_for(
        lambda: _offsets(c, "own"),
        lambda o: o == [{"partition": {"task": 0}, "offset": {"seq": 299}}],
        what="the offsets over REST",
    )
    # The transactions wrote the offsets to the connector's topic (created compacted), not the worker's.
    assert _offset_records(bootstrap, own, "own")[-1] == {"seq": 299}
    assert _offset_records(bootstrap, c.settings["offset.storage.topic"], "own") == []
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.TOPIC, own)
    assert admin.describe_configs([resource])[resource].result(10)["cleanup.policy"].value == "compact"

    # Altered over REST: written to the connector's topic, copied to the worker's; the task goes on from it.
    _stop(c, "own")
    body = {"offsets": [{"partition": {"task": 0}, "offset": {"seq": 99}}]}
    assert c.request(c.workers[0], "PATCH", "/connectors/own/offsets", json=body).status_code == 200
    assert _offsets(c, "own") == [{"partition": {"task": 0}, "offset": {"seq": 99}}]
    assert _offset_records(bootstrap, own, "own")[-1] == {"seq": 99}
    assert _offset_records(bootstrap, c.settings["offset.storage.topic"], "own") == [{"seq": 99}]
    _resume(c, "own")
    assert _seqs(bootstrap, topic, 500) == list(range(300)) + list(range(100, 300))


def test_a_connector_given_its_own_topic_goes_on_from_the_worker_topic_and_a_reset_clears_both(
    cluster: Cluster, kafka: KafkaBroker
) -> None:
    bootstrap, c = kafka.bootstrap_servers, cluster
    topic, own = unique_topic_name("seq-moved"), unique_topic_name("moved-offsets")
    worker_topic = c.settings["offset.storage.topic"]
    create_topic(bootstrap, topic, partitions=1)
    c.put_config(c.workers[0], "moved", _sequence(topic, 200))
    assert _seqs(bootstrap, topic, 200) == list(range(200))
    wait_for(
        lambda: _offset_records(bootstrap, worker_topic, "moved"),
        lambda r: r[-1:] == [{"seq": 199}],
        what="offsets in the worker topic",
    )

    # Its own topic is empty: the task reads the worker topic's offset and continues, nothing twice.
    c.put_config(c.workers[0], "moved", _sequence(topic, 300, own))
    assert _seqs(bootstrap, topic, 300) == list(range(300))
    assert _offset_records(bootstrap, own, "moved")[-1] == {"seq": 299}
    assert _offsets(c, "moved") == [{"partition": {"task": 0}, "offset": {"seq": 299}}]

    # A reset deletes the offset in both topics: the task starts over from 0.
    _stop(c, "moved")
    assert c.request(c.workers[0], "DELETE", "/connectors/moved/offsets").status_code == 200
    assert _offsets(c, "moved") == []
    assert _offset_records(bootstrap, own, "moved")[-1] is None
    assert _offset_records(bootstrap, worker_topic, "moved")[-1] is None
    _resume(c, "moved")
    assert _seqs(bootstrap, topic, 600) == list(range(300)) + list(range(300))


@pytest.mark.parametrize(
    ("offsets_topic", "why"),
    [
        ("{group}-configs", "is the worker's config.storage.topic"),
        ("{group}-status", "is the worker's status.storage.topic"),
        ("__consumer_offsets", "internal topic of Kafka's"),
        ("bad topic", "may contain only"),
    ],
)
def test_a_connector_cannot_keep_its_offsets_in_the_workers_own_topics(
    cluster: Cluster, offsets_topic: str, why: str
) -> None:
    c = cluster
    config = {**_sequence("anywhere", 1, offsets_topic.format(group=c.group)), "name": "nosy"}
    response = c.request(c.workers[0], "PUT", "/connectors/nosy/config", json=config)
    assert response.status_code == 400, response.text
    assert "offsets.storage.topic" in response.text and why in response.text
    validated = c.request(c.workers[0], "PUT", "/connector-plugins/SequenceSource/config/validate", json=config).json()
    [entry] = [e for e in validated["configs"] if e["value"]["name"] == "offsets.storage.topic"]
    assert entry["value"]["errors"] and why in entry["value"]["errors"][0]
    assert c.request(c.workers[0], "GET", "/connectors/nosy").status_code == 404


# -- no connector reads or writes the worker's internal topics -------------------------------------------


def _keys_to_end(bootstrap: str, topic: str) -> list[bytes | None]:
    """Every record key in ``topic`` up to its end now, aborted transactions' included."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reserved-reader",
            "isolation.level": "read_uncommitted",
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        keys: list[bytes | None] = []
        while any(consumer.position([TopicPartition(topic, p)])[0].offset < end for p, end in ends.items() if end > 0):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                keys.append(message.key())
        return keys
    finally:
        consumer.close()


def test_no_connector_may_name_the_workers_config_or_status_topic(cluster: Cluster) -> None:
    c = cluster
    # The cluster has no roles: every caller is unrestricted, and still refused.
    sink = {"connector.class": "FileStreamSink", "topics": f"{c.group}-configs"}
    response = c.request(c.workers[0], "PUT", "/connectors/config-copier/config", json=sink)
    assert response.status_code == 400, response.text
    assert (
        f"topics: '{c.group}-configs' is the worker's config topic (config.storage.topic); no connector may read "
        "or write the worker's internal topics"
    ) in response.json()["message"]
    router = {
        **_sequence("anywhere", 1),
        "transforms": "route",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": ".*",
        "transforms.route.replacement": f"{c.group}-status",
    }
    response = c.request(c.workers[0], "PUT", "/connectors/status-forger/config", json=router)
    assert response.status_code == 400, response.text
    assert f"transforms.route.replacement: '{c.group}-status' is the worker's status topic" in response.text
    for name in ("config-copier", "status-forger"):
        assert c.request(c.workers[0], "GET", f"/connectors/{name}").status_code == 404


def test_a_record_routed_into_the_status_topic_fails_its_task_and_is_not_sent(
    kafka: KafkaBroker, cluster: Cluster
) -> None:
    c = cluster
    status_topic = f"{c.group}-status"
    # The route depends on the record's topic (<group>-status-in becomes <group>-status): not provable at create.
    config = {
        **_sequence(f"{status_topic}-in", 5),
        "transforms": "route",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": "(.*)-in",
        "transforms.route.replacement": "$1",
    }
    c.put_config(c.workers[0], "status-router", config)
    try:
        # The first failure is enough (RESTARTING carries its trace; FAILED comes after the worker's retries).
        body = wait_for(
            lambda: c.status(c.workers[0], "status-router"),
            lambda b: (
                [t.get("state") in ("FAILED", "RESTARTING") and bool(t.get("trace")) for t in b.get("tasks", [])]
                == [True]
            ),
            what="status-router's task failed",
        )
        trace = body["tasks"][0]["trace"]
        assert (
            f"routed to topic '{status_topic}', which is the worker's status topic (status.storage.topic); it was "
            "not sent"
        ) in trace, trace
        # The sequence's keys are 0-<n>: none is among the worker's own records in the status topic.
        keys = _keys_to_end(kafka.bootstrap_servers, status_topic)
        assert keys, "the status topic should hold the worker's records"
        assert not [k for k in keys if k is not None and re.fullmatch(rb"\d+-\d+", k)], keys
    finally:
        assert c.request(c.workers[0], "DELETE", "/connectors/status-router").status_code == 204


def test_a_regex_sink_is_never_assigned_a_reserved_topic(kafka: KafkaBroker, cluster: Cluster) -> None:
    c = cluster
    suffix = unique_topic_name("probe")
    heartbeat, visible = f"__debezium-heartbeat.{suffix}", f"ok-{suffix}"  # '__' names of others are ordinary
    for topic in (heartbeat, visible):
        create_topic(kafka.bootstrap_servers, topic)
    # Accepted at create, yet librdkafka's POSIX regex matches the config topic ([[:alpha:]] is a
    # character class there, a set of '[:alph' then ']' in Python): the consumer's topic.blacklist
    # keeps it out.
    regex = f"(__debezium-heartbeat[.]|ok-){suffix}|[[:alpha:]]{c.group[1:]}-configs"
    c.put_config(c.workers[0], "regex-probe", {"connector.class": "FileStreamSink", "topics.regex": regex})
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    try:

        def assigned() -> set[str]:
            group = admin.describe_consumer_groups(["connect-regex-probe"])["connect-regex-probe"].result(timeout=10)
            return {tp.topic for m in group.members for tp in m.assignment.topic_partitions}

        try:
            topics = wait_for(assigned, lambda topics: bool(topics), timeout=30, what="regex-probe assigned")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{c.status(c.workers[0], 'regex-probe')}\n{c.workers[0].log()}") from None
        assert topics == {visible, heartbeat}
    finally:
        assert c.request(c.workers[0], "DELETE", "/connectors/regex-probe").status_code == 204
