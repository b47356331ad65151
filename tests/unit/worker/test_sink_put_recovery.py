"""A sink task's ``put()`` that refuses a batch on a record's data (``SinkTask.put``'s contract):
the runtime applies ``errors.*`` to that record and writes the others, once each, in order."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from sluice.connectors.api import ConnectError, DataError, SinkRecord, SinkTask, UnwritableRecordError
from tests.unit.worker.test_errors import FakeDLQ, FakeMessage, envelope, sink_runner


class PickySinkTask(SinkTask):
    """Writes a batch only if it holds none of ``bad`` (values); refuses it whole otherwise."""

    def __init__(self, bad: set[int], *, name_the_record: bool = False) -> None:
        self.bad = bad
        self.name_the_record = name_the_record
        self.written: list[int] = []
        self.puts = 0

    def start(self, config: object, context: object) -> None:
        pass

    def put(self, records: Sequence[SinkRecord]) -> None:
        self.puts += 1
        for record in records:
            if record.value in self.bad:
                message = f"cannot write {record.value} at offset {record.kafka_offset}"
                if self.name_the_record:
                    raise UnwritableRecordError(message, record)
                raise DataError(message)
        self.written += [r.value for r in records]

    def stop(self) -> None:
        pass


def _messages(n: int) -> list[FakeMessage]:
    return [FakeMessage(i, envelope(i), [("origin", b"test")]) for i in range(n)]


@pytest.mark.parametrize("name_the_record", [False, True])
def test_tolerance_all_dead_letters_each_refused_record_and_writes_the_others_once(name_the_record: bool) -> None:
    task, dlq = PickySinkTask({7, 13}, name_the_record=name_the_record), FakeDLQ()
    runner = sink_runner(task, dlq, tolerance_all=True, dlq_context_headers=True)
    runner.deliver(_messages(20))
    assert task.written == [i for i in range(20) if i not in (7, 13)]
    assert [value for _, value, _ in dlq.sent] == [envelope(7), envelope(13)]  # as consumed
    headers = [dict(h) for _, _, h in dlq.sent]
    assert [h["__connect.errors.offset"] for h in headers] == [b"7", b"13"]
    assert {h["__connect.errors.stage"] for h in headers} == {b"TASK_PUT"}
    assert headers[0]["origin"] == b"test"
    assert b"cannot write 7" in headers[0]["__connect.errors.exception.message"]
    if name_the_record:
        assert task.puts == 3  # the batch, then the rest twice: no halving needed
    assert runner.retry.total_records_skipped == 2


def test_tolerance_none_fails_at_the_first_refused_record_and_writes_nothing_after_it() -> None:
    task = PickySinkTask({7, 13})
    runner = sink_runner(task)
    with pytest.raises(ConnectError, match="Tolerance exceeded in error handler for topic 'in' partition 0 offset 7"):
        runner.deliver(_messages(20))
    assert max(task.written, default=-1) < 7


def test_tolerance_all_without_a_dlq_logs_each_skipped_record(caplog: pytest.LogCaptureFixture) -> None:
    task = PickySinkTask({3})
    runner = sink_runner(task, tolerance_all=True)
    with caplog.at_level(logging.WARNING):
        runner.deliver(_messages(6))
    assert task.written == [0, 1, 2, 4, 5]
    assert "Skipped a record at topic 'in' partition 0 offset 3" in caplog.text
    assert "TASK_PUT" in caplog.text


def test_a_record_of_an_earlier_batch_is_reported_and_the_batch_offered_again_whole() -> None:
    earlier = SinkRecord("in", 0, 99, 99)

    class DeferredFailure(PickySinkTask):
        def put(self, records: Sequence[SinkRecord]) -> None:
            self.puts += 1
            if self.puts == 1:  # a write deferred from the batch before fails now
                raise UnwritableRecordError("the row of offset 99 was refused", earlier)
            self.written += [r.value for r in records]

    task, dlq = DeferredFailure(set()), FakeDLQ()
    runner = sink_runner(task, dlq, tolerance_all=True)
    runner.deliver(_messages(4))
    assert task.written == [0, 1, 2, 3]
    assert len(dlq.sent) == 1  # serialised again: not a message of this batch


def test_a_task_that_keeps_refusing_the_same_record_fails() -> None:
    class Stubborn(PickySinkTask):
        def put(self, records: Sequence[SinkRecord]) -> None:
            raise UnwritableRecordError("always", SinkRecord("in", 0, 99, 99))

    runner = sink_runner(Stubborn(set()), FakeDLQ(), tolerance_all=True)
    with pytest.raises(ConnectError, match="Unrecoverable error in stage TASK_PUT"):
        runner.deliver(_messages(2))
