"""Where a sink task's partitions start when they are assigned (``SinkOffsets.assign_from_committed``)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from tests.unit.worker.test_errors import CollectingSinkTask, sink_runner


class FakeConsumer:
    def __init__(self, committed: list[int] | None) -> None:
        self._committed = committed
        self.assigned: list[tuple[str, int, int]] | None = None

    def committed(self, partitions: list[KafkaTopicPartition], timeout: float) -> list[KafkaTopicPartition]:
        if self._committed is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return [KafkaTopicPartition(p.topic, p.partition, o) for p, o in zip(partitions, self._committed, strict=True)]

    def assign(self, partitions: list[KafkaTopicPartition]) -> None:
        self.assigned = [(p.topic, p.partition, p.offset) for p in partitions]


def assign(consumer_config: dict[str, Any], committed: list[int] | None) -> FakeConsumer:
    runner = sink_runner(CollectingSinkTask(), consumer_config=consumer_config)
    consumer = FakeConsumer(committed)
    runner.on_assign(consumer, [KafkaTopicPartition("in", 0), KafkaTopicPartition("in", 1)])  # type: ignore[arg-type]
    assert runner.assignment == {("in", 0), ("in", 1)}
    return consumer


@pytest.mark.parametrize(
    ("reset", "start"), [("earliest", OFFSET_BEGINNING), ("latest", OFFSET_END), ("smallest", OFFSET_BEGINNING)]
)
def test_partitions_start_at_their_commit_or_where_auto_offset_reset_says(reset: str, start: int) -> None:
    """Without a commit a partition starts at once at the reset position: librdkafka left to itself
    waits 100 ms before it asks for that position."""
    consumer = assign({"auto.offset.reset": reset}, [42, OFFSET_INVALID])
    assert consumer.assigned == [("in", 0, 42), ("in", 1, start)]


@pytest.mark.parametrize(
    "config",
    [
        {"auto.offset.reset": "error"},  # librdkafka reports the missing offset itself
        {"auto.offset.reset": "earliest", "partition.assignment.strategy": "cooperative-sticky"},
    ],
)
def test_other_settings_leave_the_assignment_to_librdkafka(config: dict[str, Any]) -> None:
    assert assign(config, [42, OFFSET_INVALID]).assigned is None


def test_a_failed_lookup_leaves_the_assignment_to_librdkafka() -> None:
    assert assign({"auto.offset.reset": "earliest"}, None).assigned is None
