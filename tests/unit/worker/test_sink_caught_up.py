"""The runner's empty ``put()`` after a poll that came back short (the consumer caught up), which
a task holding batches back answers by writing them; and what it does with a failure then.

No broker: the runner's consumer is fed fake consumed messages."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sluice.connectors.api import ConnectError, DataError, SinkRecordBatch, TopicPartition, UnusableRawValues

from .test_errors import CollectingSinkTask, FakeConsumer, FakeMessage, envelope, sink_runner

TP = TopicPartition("in", 0)


class Sizes(CollectingSinkTask):
    """Records the size of every batch put, and raises ``fail_empty`` on an empty put."""

    def __init__(self, fail_empty: Exception | None = None) -> None:
        super().__init__()
        self.sizes: list[int] = []
        self.fail_empty = fail_empty

    def put(self, records: SinkRecordBatch) -> None:  # type: ignore[override]
        self.sizes.append(len(records))
        if not records and self.fail_empty is not None:
            raise self.fail_empty


def _runner(task: Sizes, batch_size: int) -> tuple[Any, FakeConsumer]:
    consumer = FakeConsumer()
    runner = sink_runner(task, consumer=consumer, batch_size=batch_size)
    runner.initialize()
    runner.on_assign(consumer, [KafkaTopicPartition("in", 0)])  # type: ignore[arg-type]
    return runner, consumer


def test_a_short_poll_is_followed_by_an_empty_put_and_a_full_one_is_not() -> None:
    task = Sizes()
    runner, consumer = _runner(task, batch_size=3)
    consumer.fed += [[FakeMessage(i, envelope(i)) for i in range(3)], [FakeMessage(3, envelope(3))]]
    runner.iteration()  # full: more may be waiting
    assert task.sizes == [3]
    runner.iteration()  # short: caught up
    assert task.sizes == [3, 1, 0]
    runner.iteration()  # nothing at all
    assert task.sizes == [3, 1, 0, 0]


def test_raw_values_given_back_on_the_empty_put_are_consumed_again() -> None:
    task = Sizes(fail_empty=UnusableRawValues("held values do not parse", {TP: 1}))
    runner, consumer = _runner(task, batch_size=10)
    consumer.fed.append([FakeMessage(i, envelope(i)) for i in range(3)])
    runner.iteration()
    assert runner.offsets.rewinds == {TP: 1}


def test_a_data_error_on_the_empty_put_fails_the_task_naming_it() -> None:
    task = Sizes(fail_empty=DataError("a held row breaks a constraint"))
    runner, consumer = _runner(task, batch_size=10)
    with pytest.raises(ConnectError, match="a held row breaks a constraint"):
        runner.iteration()
