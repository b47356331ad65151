"""Zombie fencing for exactly-once sources (KIP-618), against a real broker: a producer holding a
task's ``transactional.id`` — what a task instance left on a frozen worker is — can no longer
commit once ``PUT /connectors/{name}/fence`` ran on any worker, or once the connector was
reconfigured (the fencing round before new task configs are written).

The zombie is played by the test: a transactional producer with the id Connect's naming gives the
task (``<group.id>-<connector>-<task>``), holding an open transaction with one record in it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.distributed_helpers import Cluster, wait_for
from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cluster(kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("fencing"), kafka.bootstrap_servers, 2, **{"exactly.once.source.support": "enabled"})
    c.start()
    yield c
    c.stop()


def _zombie(bootstrap: str, group: str, connector: str, task: int, topic: str) -> Producer:
    """A producer with the task's transactional id and an open transaction holding one record."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{group}-{connector}-{task}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, json.dumps({"zombie": task}).encode())
    producer.flush(10)
    return producer


def _assert_fenced(zombie: Producer) -> None:
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() or "fenced" in error.str().lower(), error.str()


def _sequence(topic: str, tasks: int) -> dict[str, Any]:
    return {
        "connector.class": "SequenceSource",
        "tasks.max": str(tasks),
        "topic": topic,
        "sequence.rate": "200",
    }


def _task_workers(c: Cluster, name: str, tasks: int) -> list[str]:
    body = c.wait_running(name, tasks)
    return [t["worker_id"] for t in body["tasks"]]


def test_fence_through_a_worker_that_runs_no_task_fences_the_zombie_and_restarts_the_tasks(
    cluster: Cluster, kafka: KafkaBroker
) -> None:
    bootstrap, c = kafka.bootstrap_servers, cluster
    topic = unique_topic_name("fence")
    create_topic(bootstrap, topic, partitions=1)
    c.put_config(c.workers[0], "fenced", _sequence(topic, 1))
    owner = _task_workers(c, "fenced", 1)[0]
    other = next(w for w in c.workers if not w.url.endswith(owner))
    zombie = _zombie(bootstrap, c.group, "fenced", 0, topic)
    response = c.request(other, "PUT", "/connectors/fenced/fence")
    assert response.status_code == 204, response.text
    _assert_fenced(zombie)
    # The live task was fenced too and restarted: it runs and its records keep arriving, once each.
    wait_for(lambda: c.status(other, "fenced"), lambda b: [t["state"] for t in b.get("tasks", [])] == ["RUNNING"], what="the task running again")
    records = consume_all(bootstrap, topic, 400, timeout=60, settle=1)
    seqs = [json.loads(r.value)["payload"]["seq"] for r in records if r.value and b"zombie" not in r.value]
    assert seqs == sorted(set(seqs)) and seqs[0] == 0, "a record was delivered twice or out of order"
    assert not [r for r in records if r.value and b"zombie" in r.value], "the zombie's record became visible"


def test_reconfiguring_a_connector_fences_every_task_of_the_previous_generation(cluster: Cluster, kafka: KafkaBroker) -> None:
    bootstrap, c = kafka.bootstrap_servers, cluster
    topic = unique_topic_name("refence")
    create_topic(bootstrap, topic, partitions=2)
    c.put_config(c.workers[0], "shrinking", _sequence(topic, 2))
    _task_workers(c, "shrinking", 2)
    # Task 1 of the first generation, stuck somewhere: the new generation has no task 1 to fence it.
    zombie = _zombie(bootstrap, c.group, "shrinking", 1, topic)
    c.put_config(c.workers[1], "shrinking", _sequence(topic, 1))
    wait_for(lambda: c.status(c.workers[0], "shrinking"), lambda b: len(b.get("tasks", [])) == 1, what="one task")
    _assert_fenced(zombie)


def test_fence_refuses_what_it_cannot_fence(cluster: Cluster, kafka: KafkaBroker, tmp_path: Path) -> None:
    c = cluster
    response = c.request(c.workers[0], "PUT", "/connectors/no-such-connector/fence")
    assert response.status_code == 404, response.text
    sink = {
        "connector.class": "FileStreamSink",
        "tasks.max": "1",
        "topics": unique_topic_name("fence-sink"),
        "file": str(tmp_path / "out.txt"),
    }
    c.put_config(c.workers[0], "a-sink", sink)
    response = c.request(c.workers[1], "PUT", "/connectors/a-sink/fence")
    assert response.status_code == 400, response.text
    assert "only source tasks" in response.json()["message"]
