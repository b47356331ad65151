"""Offsets of a just-created topic: a partition whose leader is not ready yet is asked again.

Right after ``CreateTopics`` the metadata lists the partitions some 50-150 ms before their leader
serves ListOffsets (measured on the test broker: 4 of 60 new 4-partition topics answered
NOT_LEADER_FOR_PARTITION once). A JDBC backfill reads the watermarks of its new target topic at
once, so without the retry it failed with that error instead of running.
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from sluice.connectors.backfill import kafka_admin
from sluice.connectors.backfill.errors import BackfillJobError


class FlakyConsumer:
    """Answers ``failures`` times with ``code`` per partition, then (0, 10)."""

    failures = 2
    code = KafkaError.NOT_LEADER_FOR_PARTITION
    calls: dict[int, int] = {}

    def __init__(self, _conf: dict[str, Any]) -> None:
        pass

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        n = FlakyConsumer.calls[tp.partition] = FlakyConsumer.calls.get(tp.partition, 0) + 1
        if n <= FlakyConsumer.failures:
            raise KafkaException(KafkaError(FlakyConsumer.code, "Failed to get watermark offsets: Broker: Not leader for partition"))
        return (0, 10)

    def close(self) -> None:
        pass


@pytest.fixture
def flaky(monkeypatch: pytest.MonkeyPatch) -> type[FlakyConsumer]:
    FlakyConsumer.calls = {}
    FlakyConsumer.failures = 2
    FlakyConsumer.code = KafkaError.NOT_LEADER_FOR_PARTITION
    monkeypatch.setattr(kafka_admin, "Consumer", FlakyConsumer)
    monkeypatch.setattr(kafka_admin.time, "sleep", lambda _s: None)
    return FlakyConsumer


def test_a_leader_not_ready_yet_is_asked_again(flaky: type[FlakyConsumer]) -> None:
    assert kafka_admin.watermarks("b:9092", "t", 4) == {p: (0, 10) for p in range(4)}
    assert flaky.calls == {p: 3 for p in range(4)}


def test_other_errors_are_not_retried(flaky: type[FlakyConsumer]) -> None:
    flaky.code = KafkaError.TOPIC_AUTHORIZATION_FAILED
    with pytest.raises(KafkaException):
        kafka_admin.watermarks("b:9092", "t", 1)
    assert flaky.calls == {0: 1}


def test_a_leader_that_never_comes_is_a_clear_job_error(flaky: type[FlakyConsumer], monkeypatch: pytest.MonkeyPatch) -> None:
    flaky.failures = 10**9
    clock = iter(range(0, 10**6, 5))
    monkeypatch.setattr(kafka_admin.time, "monotonic", lambda: float(next(clock)))
    with pytest.raises(BackfillJobError, match=r"cannot read the offsets of t\[0\] from Kafka: .*Not leader for partition"):
        kafka_admin.watermarks("b:9092", "t", 1)
