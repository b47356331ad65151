"""Error stages: each failing operation is named with Connect's Stage, in the trace, the log, the
DLQ context headers and the task's error metrics. No broker: the producer never connects."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from sluice.connectors.api import (
    STRING_SCHEMA,
    ConnectError,
    RetriableError,
    Serialization,
    SourceRecord,
    SourceRecordBatch,
    SourceTask,
)
from sluice.converters.header import SimpleHeaderConverter
from sluice.converters.string import StringConverter
from sluice.offsets import MemoryOffsetStore
from sluice.worker.errors import ErrorHandlingConfig, RetryWithTolerance, Stage, ToleranceExceeded
from sluice.worker.runners.source import SourceTaskRunner
from sluice.worker.status import ConnectorTaskId, TargetState

from .test_errors import CollectingSinkTask, FakeMessage, envelope, sink_runner


def test_stage_names_are_connects() -> None:
    assert [s.value for s in Stage] == [
        "KEY_CONVERTER",
        "VALUE_CONVERTER",
        "HEADER_CONVERTER",
        "TRANSFORMATION",
        "TASK_POLL",
        "TASK_PUT",
        "KAFKA_PRODUCE",
        "KAFKA_CONSUME",
    ]


def test_unrecoverable_names_the_stage_counts_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    retry = RetryWithTolerance(ErrorHandlingConfig(tolerance_all=True, log_enable=True))
    error = retry.unrecoverable(Stage.TASK_POLL, "my.Task", ValueError("boom"), "source partition x")
    assert "stage TASK_POLL" in str(error) and "my.Task" in str(error) and "boom" in str(error)
    assert retry.metrics()["total-record-failures"] == 1
    assert retry.metrics()["total-records-skipped"] == 0  # tolerance does not apply: nothing is skipped
    assert retry.metrics()["last-error-timestamp"] > 0
    assert "Executing stage 'TASK_POLL'" in caplog.text


class FailureListener:
    def __init__(self) -> None:
        self.failed = threading.Event()
        self.error: BaseException | None = None

    def on_failure(self, task_id: Any, error: BaseException) -> None:
        self.error = error
        self.failed.set()

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


class ScriptedSourceTask(SourceTask):
    def __init__(self, *results: Any) -> None:
        self.results = list(results)

    def start(self, config: Any, context: Any) -> None:
        pass

    def poll(self) -> list[SourceRecord] | None:
        result = self.results.pop(0) if self.results else None
        if isinstance(result, BaseException):
            raise result
        return result

    def stop(self) -> None:
        pass


class StartableDLQ:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, Any, Any]] = []
        self.produce_requests = self.produce_failures = 0

    def start(self) -> None:
        pass

    def send(self, key: Any, value: Any, headers: Any) -> None:
        self.produce_requests += 1
        self.sent.append((key, value, headers))

    def flush(self, timeout: float) -> bool:
        return True

    def close(self, timeout: float = 0) -> None:
        pass


class RecordingProducer:
    """The runner's real producer, keeping what it accepted. ``len()`` of a producer cannot tell:
    it also counts the queued events of its failing connection attempts (there is no broker)."""

    def __init__(self) -> None:
        self.inner: Any = None
        self.accepted: list[tuple[str, bytes | None, bytes | None]] = []

    def built(self, config: dict[str, Any]) -> RecordingProducer:
        """The runner's producer factory: a real producer of ``config``, recorded."""
        self.inner = Producer(config)
        return self

    def produce(self, topic: str, value: Any = None, key: Any = None, *args: Any, **kwargs: Any) -> None:
        self.inner.produce(topic, value, key, *args, **kwargs)  # refuses exactly as the real one
        encode = lambda b: b.encode() if isinstance(b, str) else b  # noqa: E731
        self.accepted.append((topic, encode(key), encode(value)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __len__(self) -> int:
        return len(self.inner)


def source_runner(
    task: SourceTask,
    listener: Any,
    dlq: Any = None,
    *,
    producer: RecordingProducer | None = None,
    transform: Any = None,
    value_converter: Any = None,
    **errors: Any,
) -> SourceTaskRunner:
    """A source runner whose producer (``producer``, a real one recorded) is never reached: no broker."""
    key, header = StringConverter(), SimpleHeaderConverter()
    key.configure({}, True)
    header.configure({})
    if value_converter is None:
        value_converter = StringConverter()
        value_converter.configure({}, False)
    return SourceTaskRunner(
        ConnectorTaskId("src", 0), task, {}, listener=listener, initial_state=TargetState.STARTED,
        producer_config={"bootstrap.servers": "127.0.0.1:9", "message.max.bytes": 1000, "log_level": 0},
        offset_store=MemoryOffsetStore(), key_converter=key, value_converter=value_converter, header_converter=header,
        transform=transform, offset_flush_timeout_ms=100, errors=ErrorHandlingConfig(**errors), dlq=dlq,
        producer_factory=(producer if producer is not None else RecordingProducer()).built,
    )


def initialized(task: SourceTask, dlq: Any = None, **kwargs: Any) -> tuple[SourceTaskRunner, RecordingProducer]:
    """A :func:`source_runner` initialized (producer created, task started), and its producer."""
    producer = RecordingProducer()
    runner = source_runner(task, FailureListener(), dlq, producer=producer, **kwargs)
    runner.initialize()
    return runner, producer


def test_a_failing_poll_fails_the_task_in_stage_task_poll() -> None:
    listener = FailureListener()
    runner = source_runner(ScriptedSourceTask(RetriableError("later"), ValueError("disk gone")), listener)
    runner.start()
    assert listener.failed.wait(10)
    runner.stop()
    runner.await_stop(10)
    assert "stage TASK_POLL" in str(listener.error)
    assert isinstance(listener.error.__cause__, ValueError)  # type: ignore[union-attr]
    metrics = runner.retry.metrics()
    assert metrics["total-retries"] == 1 and metrics["total-record-failures"] == 1


def too_big(n: int) -> SourceRecord:
    return SourceRecord("out", "x" * 5000, STRING_SCHEMA, source_partition={"f": 1}, source_offset={"n": n})


def test_a_record_the_producer_refuses_is_tolerated_in_stage_kafka_produce() -> None:
    dlq = StartableDLQ()
    runner, _ = initialized(ScriptedSourceTask(), dlq, tolerance_all=True, dlq_context_headers=True)
    runner.send([too_big(7)])
    _, value, headers = dlq.sent[0]
    assert value == b"x" * 5000
    assert dict(headers)["__connect.errors.stage"] == b"KAFKA_PRODUCE"
    assert dict(headers)["__connect.errors.class.name"] == b"confluent_kafka.Producer"
    assert list(runner.offsets.pending.values()) == [({"f": 1}, {"n": 7})]  # skipped records are done
    assert runner.retry.metrics()["total-records-skipped"] == 1
    assert runner.retry.metrics()["deadletterqueue-produce-requests"] == 1


def test_a_record_the_producer_refuses_fails_the_task_without_tolerance() -> None:
    runner, _ = initialized(ScriptedSourceTask())
    with pytest.raises(ToleranceExceeded) as info:
        runner.send([too_big(1)])
    assert isinstance(info.value.__cause__, KafkaException)
    assert not runner.offsets.pending  # its offset is never stored


def columns(*sizes: int) -> SourceRecordBatch:
    return SourceRecordBatch(
        "out", ["x" * size for size in sizes], value_schema=STRING_SCHEMA, source_partition={"f": 1},
        source_offsets=[{"n": n} for n in range(len(sizes))],
    )


def test_a_columnar_batch_skips_only_the_refused_record_with_tolerance() -> None:
    dlq = StartableDLQ()
    runner, producer = initialized(ScriptedSourceTask(), dlq, tolerance_all=True, dlq_context_headers=True)
    runner.send(columns(10, 5000, 20))
    assert [value for _, value, _ in dlq.sent] == [b"x" * 5000]
    assert dict(dlq.sent[0][2])["__connect.errors.stage"] == b"KAFKA_PRODUCE"
    assert [value for _, _, value in producer.accepted] == [b"x" * 10, b"x" * 20]  # the other two are queued
    assert list(runner.offsets.pending.values()) == [({"f": 1}, {"n": 2})]


def test_a_columnar_batch_with_a_refused_record_fails_the_task_without_tolerance() -> None:
    runner, _ = initialized(ScriptedSourceTask())
    with pytest.raises(ToleranceExceeded) as info:
        runner.send(columns(10, 5000, 20))
    assert isinstance(info.value.__cause__, KafkaException)
    assert not runner.offsets.pending  # no offset of the batch is stored


def test_a_failed_delivery_report_fails_the_task_in_stage_kafka_produce() -> None:
    runner, _ = initialized(ScriptedSourceTask())
    runner.failures.on_delivery(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), None)  # as the producer calls it
    with pytest.raises(ConnectError, match="stage KAFKA_PRODUCE"):
        runner.iteration()
    assert runner.retry.metrics()["total-record-failures"] == 1


class ErrorMessage(FakeMessage):
    def error(self) -> Any:
        return KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)


def test_a_consumer_error_fails_the_task_in_stage_kafka_consume() -> None:
    runner = sink_runner(CollectingSinkTask())
    with pytest.raises(ConnectError, match="stage KAFKA_CONSUME") as info:
        runner.deliver([FakeMessage(0, b"x"), ErrorMessage(1, b"")])
    assert "partition 0" in str(info.value)
    assert runner.retry.metrics()["total-record-failures"] == 1


class BrokenSinkTask(CollectingSinkTask):
    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.error = error

    def put(self, records: Any) -> None:
        raise self.error


def test_a_failing_put_fails_the_task_in_stage_task_put() -> None:
    runner = sink_runner(BrokenSinkTask(OSError("disk full")))
    with pytest.raises(ConnectError, match="stage TASK_PUT") as info:
        runner.deliver([FakeMessage(1, envelope(1))])
    assert isinstance(info.value.__cause__, OSError)
    assert "BrokenSinkTask" in str(info.value)


def test_a_reporter_failure_inside_put_is_not_wrapped_again() -> None:
    runner = sink_runner(BrokenSinkTask(ToleranceExceeded("Tolerance exceeded in error handler")))
    with pytest.raises(ToleranceExceeded):
        runner.deliver([FakeMessage(1, envelope(1))])
    assert runner.retry.metrics()["total-record-failures"] == 0


def test_retried_puts_are_counted() -> None:
    class FlakySinkTask(CollectingSinkTask):
        calls = 0

        def put(self, records: Any) -> None:
            self.calls += 1
            if self.calls == 1:
                raise RetriableError("busy")
            super().put(records)

    task = FlakySinkTask()
    runner = sink_runner(task)
    runner.deliver([FakeMessage(1, envelope(1))])
    assert [[r.value for r in batch] for batch in task.put_batches] == [[1]]
    assert runner.retry.metrics()["total-retries"] == 1


def test_a_bad_conversion_still_uses_the_converter_stage() -> None:
    runner = sink_runner(CollectingSinkTask(), tolerance_all=True)
    runner.deliver([FakeMessage(0, b"not json")])
    assert runner.retry.metrics()["total-records-skipped"] == 1


def test_task_status_carries_the_error_metrics_while_the_runner_lives() -> None:
    import gc

    from sluice.worker.herder.stores.status_store import StatusStore
    from sluice.worker.status import State, Status

    store = StatusStore()
    task_id = ConnectorTaskId("metered", 0)
    runner = sink_runner(CollectingSinkTask(), tolerance_all=True)
    runner.retry = RetryWithTolerance(runner.errors, task_id=task_id)
    runner.retry.total_retries = 3
    store.put_task(task_id, Status(State.RUNNING, "w1"))
    body = store.task(task_id).to_json()  # type: ignore[union-attr]
    assert body["errors"]["total-retries"] == 3  # type: ignore[index]
    assert set(body["errors"]) >= {  # type: ignore[arg-type]
        "total-record-failures", "total-records-skipped", "deadletterqueue-produce-requests", "total-errors-logged",
    }
    del runner
    gc.collect()
    assert "errors" not in store.task(task_id).to_json()  # type: ignore[union-attr]


class EncodingTask(ScriptedSourceTask):
    """Serializes its records when offered (records what it was offered)."""

    offered: Serialization | None = None

    def start(self, config: Any, context: Any) -> None:
        self.offered = context.serialization


def encoded(*sizes: int) -> SourceRecordBatch:
    return SourceRecordBatch(
        None,
        [b"x" * size if size else None for size in sizes],
        keys=[b"k%d" % i for i in range(len(sizes))],
        topics=["out", "other"] * (len(sizes) // 2) + ["out"] * (len(sizes) % 2),
        source_partition={"f": 1},
        last_offset={"n": len(sizes) - 1},
        serialized=True,
    )


def test_the_runner_offers_its_wire_formats_and_produces_serialized_batches_as_they_are() -> None:
    task = EncodingTask()
    runner, producer = initialized(task)
    assert task.offered == Serialization(StringConverter().wire_format(), StringConverter().wire_format())
    assert task.offered.value.kind == "string"
    runner.send(encoded(10, 0, 20))  # the 0 is a tombstone
    assert producer.accepted == [("out", b"k0", b"x" * 10), ("other", b"k1", None), ("out", b"k2", b"x" * 20)]
    assert runner.active_topics == {"out", "other"}
    assert list(runner.offsets.pending.values()) == [({"f": 1}, {"n": 2})]
    assert runner.records_produced == 3


def test_with_a_transform_the_task_is_not_offered_serialization_and_may_not_serialize() -> None:
    task = EncodingTask()
    runner, _ = initialized(task, transform=lambda records: records)
    assert task.offered is None
    with pytest.raises(ConnectError, match="serialized records"):
        runner.send(encoded(10))
    assert not runner.offsets.pending


def test_an_opaque_converter_is_not_offered_serialization() -> None:
    task = EncodingTask()
    latin = StringConverter()
    latin.configure({"converter.encoding": "latin-1"}, False)  # declares no wire format
    initialized(task, value_converter=latin)
    assert task.offered is None


def test_a_batch_with_a_topic_and_partition_column_goes_where_each_record_says() -> None:
    runner, producer = initialized(ScriptedSourceTask())
    batch = SourceRecordBatch(
        None, ["a", "b", "c"], value_schema=STRING_SCHEMA, topics=["out", "other", "out"],
        partitions=[None, 0, 0], source_partition={"f": 1}, source_offsets=[{"n": 0}, {"n": 1}, {"n": 2}],
    )  # fmt: skip
    runner.send(batch)
    assert producer.accepted == [("out", None, b"a"), ("other", None, b"b"), ("out", None, b"c")]
    assert runner.active_topics == {"out", "other"}
    assert list(runner.offsets.pending.values()) == [({"f": 1}, {"n": 2})]
    assert [r.partition for r in batch] == [None, 0, 0]


def test_an_encoded_batch_skips_only_the_refused_record_with_tolerance() -> None:
    dlq = StartableDLQ()
    runner, producer = initialized(EncodingTask(), dlq, tolerance_all=True, dlq_context_headers=True)
    runner.send(encoded(10, 5000, 20))
    assert [value for _, value, _ in dlq.sent] == [b"x" * 5000]
    assert producer.accepted == [("out", b"k0", b"x" * 10), ("out", b"k2", b"x" * 20)]
    assert list(runner.offsets.pending.values()) == [({"f": 1}, {"n": 2})]
