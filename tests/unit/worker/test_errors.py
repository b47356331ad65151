"""errors.* handling: config parsing, retries with backoff, tolerance, and the batch fallback."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
import pytest
from confluent_kafka import OFFSET_INVALID
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sluice.connectors.api import (
    STRING_SCHEMA,
    ConfigError,
    ConnectError,
    DataError,
    RetriableError,
    SinkRecord,
    SinkTask,
    SourceRecord,
    SourceTask,
    TopicPartition,
)
from sluice.converters.header import SimpleHeaderConverter
from sluice.converters.json import JsonConverter
from sluice.converters.string import StringConverter
from sluice.offsets import MemoryOffsetStore
from sluice.worker.errors import (
    HEADER_STAGE,
    SKIPPED,
    ErrorContext,
    ErrorHandlingConfig,
    RetryWithTolerance,
    Stage,
    context_headers,
)
from sluice.worker.runners.sink import SinkErrantRecordReporter, SinkTaskRunner
from sluice.worker.runners.source import SourceTaskRunner
from sluice.worker.status import ConnectorTaskId, TargetState

# -- config -----------------------------------------------------------------------------------------


def test_defaults_match_connect() -> None:
    config = ErrorHandlingConfig.parse({"name": "x"})
    assert config == ErrorHandlingConfig(0, 60_000, False, False, False, "", 3, False)
    assert not config.wants_reporter


def test_every_key_is_parsed() -> None:
    config = ErrorHandlingConfig.parse(
        {
            "errors.retry.timeout": "-1",
            "errors.retry.delay.max.ms": "250",
            "errors.tolerance": "all",
            "errors.log.enable": "true",
            "errors.log.include.messages": "TRUE",
            "errors.deadletterqueue.topic.name": "dlq",
            "errors.deadletterqueue.topic.replication.factor": "1",
            "errors.deadletterqueue.context.headers.enable": "true",
        }
    )
    assert config == ErrorHandlingConfig(-1, 250, True, True, True, "dlq", 1, True)
    assert config.wants_reporter


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("errors.tolerance", "some"),
        ("errors.retry.timeout", "soon"),
        ("errors.retry.timeout", "-2"),
        ("errors.retry.delay.max.ms", "0"),
        ("errors.log.enable", "yes"),
        ("errors.deadletterqueue.topic.replication.factor", "0"),
        ("errors.deadletterqueue.context.headers.enable", "1"),
        ("errors.retry.timeoutt", "1"),
    ],
)
def test_bad_values_and_unknown_keys_name_the_key(key: str, value: str) -> None:
    with pytest.raises(ConfigError) as info:
        ErrorHandlingConfig.parse({key: value})
    assert info.value.key == key
    assert key in str(info.value)


# -- retry and tolerance ----------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def flaky(failures: int, result: Any = "ok") -> Any:
    calls = {"n": 0}

    def op() -> Any:
        calls["n"] += 1
        if calls["n"] <= failures:
            raise RetriableError(f"transient {calls['n']}")
        return result

    op.calls = calls  # type: ignore[attr-defined]
    return op


def operator(clock: FakeClock, reports: list[ErrorContext] | None = None, **config: Any) -> RetryWithTolerance:
    return RetryWithTolerance(
        ErrorHandlingConfig(**config), reporter=None if reports is None else reports.append,
        clock=clock, sleep=clock.sleep, rng=lambda: 1.0,
    )


def test_retriable_errors_are_retried_with_exponential_backoff_capped_at_the_max_delay() -> None:
    clock = FakeClock()
    retry = operator(clock, retry_timeout_ms=60_000, retry_delay_max_ms=1_000)
    assert retry.execute(Stage.VALUE_CONVERTER, flaky(4)) == "ok"
    assert clock.sleeps == [0.3, 0.6, 1.0, 1.0]
    assert retry.total_retries == 4


def test_jitter_keeps_the_delay_between_half_and_all_of_the_step() -> None:
    retry = RetryWithTolerance(ErrorHandlingConfig(retry_delay_max_ms=60_000), rng=lambda: 0.0)
    assert retry.backoff(1, None) == pytest.approx(0.15)
    assert retry.backoff(3, None) == pytest.approx(0.6)
    assert retry.backoff(3, 0.1) == pytest.approx(0.1)  # never past the deadline


def test_retries_stop_at_the_timeout_and_then_tolerance_none_fails() -> None:
    clock = FakeClock()
    retry = operator(clock, retry_timeout_ms=1_000, retry_delay_max_ms=60_000)
    op = flaky(1_000)
    with pytest.raises(ConnectError, match="Tolerance exceeded in error handler") as info:
        retry.execute(Stage.TRANSFORMATION, op)
    assert isinstance(info.value.__cause__, RetriableError)
    assert clock.now == pytest.approx(1.0)
    assert sum(clock.sleeps) == pytest.approx(1.0)


def test_retry_timeout_zero_does_not_retry() -> None:
    clock = FakeClock()
    retry = operator(clock, tolerance_all=True)
    op = flaky(1)
    assert retry.execute(Stage.KAFKA_PRODUCE, op) is SKIPPED
    assert op.calls["n"] == 1 and clock.sleeps == []


def test_retry_forever_keeps_going() -> None:
    clock = FakeClock()
    retry = operator(clock, retry_timeout_ms=-1, retry_delay_max_ms=100)
    assert retry.execute(Stage.KAFKA_PRODUCE, flaky(50)) == "ok"
    assert len(clock.sleeps) == 50


def test_non_retriable_errors_are_not_retried() -> None:
    clock = FakeClock()
    retry = operator(clock, retry_timeout_ms=10_000)

    def bad() -> None:
        raise DataError("garbage")

    with pytest.raises(ConnectError, match="Tolerance exceeded") as info:
        retry.execute(Stage.VALUE_CONVERTER, bad)
    assert isinstance(info.value.__cause__, DataError)
    assert clock.sleeps == []


def test_tolerance_all_logs_reports_and_skips(caplog: pytest.LogCaptureFixture) -> None:
    reports: list[ErrorContext] = []
    retry = operator(FakeClock(), reports, tolerance_all=True, log_enable=True, log_include_messages=True)

    def bad() -> None:
        raise DataError("garbage")

    record = SourceRecord("t", "the-value", STRING_SCHEMA)
    assert retry.execute(Stage.VALUE_CONVERTER, bad, class_name="C", coordinates="here", record=record) is SKIPPED
    assert [(r.stage, r.class_name, str(r.error)) for r in reports] == [(Stage.VALUE_CONVERTER, "C", "garbage")]
    assert retry.total_records_skipped == 1 and retry.total_errors_logged == 1
    assert "VALUE_CONVERTER" in caplog.text and "here" in caplog.text and "the-value" in caplog.text


def test_context_headers_are_connects() -> None:
    try:
        raise DataError("boom")
    except DataError as exc:
        ctx = ErrorContext(Stage.VALUE_CONVERTER, "sluice.converters.json.JsonConverter", exc)
    headers = dict(context_headers(ctx, "conn", 2, "in", 0, 7))
    assert headers["__connect.errors.topic"] == b"in"
    assert headers["__connect.errors.partition"] == b"0"
    assert headers["__connect.errors.offset"] == b"7"
    assert headers["__connect.errors.connector.name"] == b"conn"
    assert headers["__connect.errors.task.id"] == b"2"
    assert headers[HEADER_STAGE] == b"VALUE_CONVERTER"
    assert headers["__connect.errors.class.name"] == b"sluice.converters.json.JsonConverter"
    assert headers["__connect.errors.exception.class.name"] == b"sluice.connectors.api.errors.DataError"
    assert headers["__connect.errors.exception.message"] == b"boom"
    assert b"DataError: boom" in (headers["__connect.errors.exception.stacktrace"] or b"")
    assert "__connect.errors.offset" not in dict(context_headers(ctx, "conn", 2, "in"))


# -- batch fallback in the runners ------------------------------------------------------------------


class FakeMessage:
    def __init__(self, offset: int, value: bytes, headers: list[tuple[str, bytes]] | None = None) -> None:
        self._offset, self._value, self._headers = offset, value, headers

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return "in"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> None:
        return None

    def value(self) -> bytes:
        return self._value

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self._offset)


class FakeDLQ:
    def __init__(self) -> None:
        self.sent: list[tuple[Any, Any, Any]] = []

    def start(self) -> None:
        pass

    def send(self, key: Any, value: Any, headers: Any) -> None:
        self.sent.append((key, value, headers))

    def flush(self, timeout: float) -> bool:
        return True

    def close(self, timeout: float = 0) -> None:
        pass


class Listener:
    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


class CollectingSinkTask(SinkTask):
    def __init__(self) -> None:
        self.put_batches: list[list[SinkRecord]] = []

    def start(self, config: Any, context: Any) -> None:
        pass

    def put(self, records: Sequence[SinkRecord]) -> None:
        self.put_batches.append(list(records))

    def stop(self) -> None:
        pass


class FakeConsumer:
    """The consumer of a test's sink runner (no broker): it hands out the batches fed to it and
    records what the runner asked of it."""

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}
        self.fed: list[list[Any]] = []
        self.seeks: list[tuple[str, int, int]] = []
        self.commits: list[list[tuple[str, int, int]]] = []
        self.closed = False

    def built(self, config: dict[str, Any]) -> FakeConsumer:
        """The runner's consumer factory: this consumer, with the runner's settings."""
        self.config = config
        return self

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.subscription = topics

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        return self.fed.pop(0) if self.fed and num_messages > 1 else []

    def committed(self, partitions: list[Any], timeout: float) -> list[Any]:
        return [KafkaTopicPartition(p.topic, p.partition, OFFSET_INVALID) for p in partitions]

    def assign(self, partitions: list[Any]) -> None:
        pass

    def seek(self, partition: Any) -> None:
        self.seeks.append((partition.topic, partition.partition, partition.offset))

    def commit(self, offsets: list[Any], asynchronous: bool = True) -> None:
        self.commits.append([(tp.topic, tp.partition, tp.offset) for tp in offsets])

    def pause(self, partitions: list[Any]) -> None:
        pass

    def resume(self, partitions: list[Any]) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def sink_runner(
    task: SinkTask,
    dlq: FakeDLQ | None = None,
    transform: Any = None,
    *,
    value_converter: Any = None,
    key_converter: Any = None,
    config: dict[str, Any] | None = None,
    consumer_config: dict[str, Any] | None = None,
    consumer: FakeConsumer | None = None,
    listener: Any = None,
    batch_size: int = 2_000,
    **errors: Any,
) -> SinkTaskRunner:
    """A sink runner of topic ``in``, its consumer ``consumer`` (a real one when
    ``consumer_config`` names a broker); values are JSON with schemas unless ``value_converter``
    says otherwise, keys strings unless ``key_converter`` does."""
    if value_converter is None:
        value_converter = JsonConverter()
        value_converter.configure({"schemas.enable": "true"}, False)
    key = key_converter
    if key is None:
        key = StringConverter()
        key.configure({}, True)
    header = SimpleHeaderConverter()
    header.configure({})
    real = consumer_config is not None and "bootstrap.servers" in consumer_config
    factory = {} if real else {"consumer_factory": (consumer or FakeConsumer()).built}
    return SinkTaskRunner(
        ConnectorTaskId("conn", 0), task, config or {}, listener=listener or Listener(), initial_state=TargetState.STARTED,
        consumer_config=consumer_config or {}, topics=["in"], topics_regex=None, key_converter=key,
        value_converter=value_converter, header_converter=header, transform=transform,
        errors=ErrorHandlingConfig(**errors), dlq=dlq, batch_size=batch_size, **factory,  # type: ignore[arg-type]
    )


def started(task: SinkTask, *partitions: int, **kwargs: Any) -> tuple[SinkTaskRunner, FakeConsumer]:
    """A :func:`sink_runner` initialized (task started, consumer subscribed) and assigned
    ``partitions`` of topic ``in``, as its consumer would on the first poll; and that consumer."""
    consumer = FakeConsumer()
    runner = sink_runner(task, consumer=consumer, **kwargs)
    runner.initialize()
    if partitions:
        runner.on_assign(consumer, [KafkaTopicPartition("in", p) for p in partitions])  # type: ignore[arg-type]
    return runner, consumer


def envelope(n: int) -> bytes:
    return b'{"schema":{"type":"int32"},"payload":%d}' % n


def test_sink_batch_fallback_isolates_the_bad_record_and_keeps_the_good_ones() -> None:
    task, dlq = CollectingSinkTask(), FakeDLQ()
    runner = sink_runner(task, dlq, tolerance_all=True, dlq_context_headers=True)
    messages = [FakeMessage(0, envelope(1)), FakeMessage(1, b'{"plain": true}', [("h", b"x")]), FakeMessage(2, envelope(3))]
    runner.deliver(messages)
    assert [r.value for r in task.put_batches[0]] == [1, 3]
    assert [r.kafka_offset for r in task.put_batches[0]] == [0, 2]
    assert len(dlq.sent) == 1
    key, value, headers = dlq.sent[0]
    assert value == b'{"plain": true}'
    assert headers[0] == ("h", b"x")  # the original headers first, then the context
    context = dict(headers[1:])
    assert context["__connect.errors.stage"] == b"VALUE_CONVERTER"
    assert context["__connect.errors.offset"] == b"1"
    assert context["__connect.errors.class.name"] == b"sluice.converters.json.JsonConverter"
    assert runner.offsets.consumed == {TopicPartition("in", 0): 3}  # the position moves past the skipped record


def test_sink_good_batches_take_the_batched_path() -> None:
    task = CollectingSinkTask()
    runner = sink_runner(task, tolerance_all=True)
    runner.failures.convert_each = None  # type: ignore[assignment,method-assign]  # would fail if used
    runner.deliver([FakeMessage(i, envelope(i)) for i in range(5)])
    assert [r.value for r in task.put_batches[0]] == list(range(5))


def test_sink_tolerance_none_fails_on_the_bad_record_before_put() -> None:
    task = CollectingSinkTask()
    runner = sink_runner(task)
    with pytest.raises(ConnectError, match="Tolerance exceeded") as info:
        runner.deliver([FakeMessage(0, envelope(1)), FakeMessage(1, b"garbage")])
    assert isinstance(info.value.__cause__, DataError)
    assert task.put_batches == []


def test_sink_transform_failures_are_isolated_with_the_transformation_stage() -> None:
    def chain(records: list[SinkRecord]) -> list[SinkRecord]:
        if any(r.value == 2 for r in records):
            raise ValueError("two is not allowed")
        return [r.replace(value=r.value * 10) for r in records]

    task, dlq = CollectingSinkTask(), FakeDLQ()
    runner = sink_runner(task, dlq, transform=chain, tolerance_all=True, dlq_context_headers=True)
    runner.deliver([FakeMessage(i, envelope(i)) for i in range(4)])
    assert [r.value for r in task.put_batches[0]] == [0, 10, 30]
    assert dlq.sent[0][1] == envelope(2)
    assert dict(dlq.sent[0][2])["__connect.errors.stage"] == b"TRANSFORMATION"


def test_errant_record_reporter_sends_reserialised_records_and_honours_tolerance() -> None:
    dlq = FakeDLQ()
    runner = sink_runner(CollectingSinkTask(), dlq, tolerance_all=True, dlq_context_headers=True)
    reporter = runner.failures.errant_record_reporter
    assert isinstance(reporter, SinkErrantRecordReporter)
    record = SinkRecord("in", 0, 5, 42, None, "k", None)
    reporter.report(record, DataError("rejected"))
    key, value, headers = dlq.sent[0]
    assert key == b"k"
    assert orjson.loads(value)["payload"] == 42  # re-serialised with the task's JsonConverter
    context = dict(headers)
    assert context["__connect.errors.stage"] == b"TASK_PUT"
    assert context["__connect.errors.offset"] == b"5"

    failing = sink_runner(CollectingSinkTask(), FakeDLQ(), dlq_topic="dlq")
    with pytest.raises(ConnectError, match="Tolerance exceeded"):
        failing.failures.errant_record_reporter.report(record, DataError("rejected"))  # type: ignore[union-attr]
    assert len(failing.dlq.sent) == 1  # type: ignore[union-attr]


def test_no_reporter_without_error_handling() -> None:
    assert sink_runner(CollectingSinkTask()).failures.errant_record_reporter is None


class NoopSourceTask(SourceTask):
    def start(self, config: Any, context: Any) -> None:
        pass

    def poll(self) -> None:
        return None

    def stop(self) -> None:
        pass


class PickyConverter(StringConverter):
    def from_connect_data(self, topic: str, schema: Any, value: Any, headers: Any = None) -> bytes | None:
        if value == "bad":
            raise DataError("bad value")
        return super().from_connect_data(topic, schema, value, headers)

    def from_connect_batch(self, topic: str, schemas: Any, values: Any) -> list[bytes | None]:
        return [self.from_connect_data(topic, s, v) for s, v in zip(schemas, values)]


class ListProducer:
    """A producer that keeps what it is handed (no broker)."""

    def __init__(self) -> None:
        self.produced: list[tuple[str, Any, Any]] = []

    def produce(self, topic: str, value: Any = None, key: Any = None, **kwargs: Any) -> None:
        self.produced.append((topic, key, value))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        return 0


def test_source_fallback_skips_the_bad_record_sends_it_to_the_dlq_and_counts_its_offset() -> None:
    value = PickyConverter()
    value.configure({}, False)
    key = StringConverter()
    key.configure({}, True)
    header = SimpleHeaderConverter()
    header.configure({})
    dlq, producer, store = FakeDLQ(), ListProducer(), MemoryOffsetStore()
    runner = SourceTaskRunner(
        ConnectorTaskId("src", 0), NoopSourceTask(), {}, listener=Listener(), initial_state=TargetState.STARTED,  # type: ignore[arg-type]
        producer_config={}, offset_store=store, key_converter=key, value_converter=value,
        header_converter=header, errors=ErrorHandlingConfig(tolerance_all=True, dlq_context_headers=True), dlq=dlq,  # type: ignore[arg-type]
        producer_factory=lambda config: producer,  # type: ignore[arg-type,return-value]
    )
    runner.initialize()
    sp = {"p": 1}
    records = [SourceRecord("out", v, STRING_SCHEMA, source_partition=sp, source_offset={"n": i}) for i, v in enumerate(["a", "bad", "c"])]
    runner.send(records)  # the whole poll fails to convert at once, so it goes record by record
    assert producer.produced == [("out", None, b"a"), ("out", None, b"c")]
    assert len(dlq.sent) == 1
    _, dlq_value, headers = dlq.sent[0]
    assert dlq_value == b'"bad"'  # the converter failed: a JSON rendering
    context = dict(headers)
    assert context["__connect.errors.stage"] == b"VALUE_CONVERTER"
    assert context["__connect.errors.topic"] == b"out"
    assert "__connect.errors.offset" not in context
    assert list(runner.offsets.pending.values()) == [(sp, {"n": 2})]  # the poll's last offset covers the skipped record
    assert runner.commit_offsets()
    assert store.get("src", [sp]) == [{"n": 2}]


def test_a_stopping_task_does_not_skip_a_record_it_was_retrying() -> None:
    import threading

    stop = threading.Event()
    stop.set()
    retry = RetryWithTolerance(ErrorHandlingConfig(retry_timeout_ms=-1, tolerance_all=True), stop_event=stop)
    with pytest.raises(ConnectError, match="stopped while retrying"):
        retry.execute(Stage.VALUE_CONVERTER, flaky(1))
    assert retry.total_records_skipped == 0


def test_relayed_metrics_start_at_zero_under_the_names_a_live_task_reports() -> None:
    from sluice.worker.errors import RelayedErrorMetrics, task_error_metrics

    relayed = RelayedErrorMetrics(("relayed", 0))
    live = RetryWithTolerance(ErrorHandlingConfig(), task_id=("live", 0))
    assert task_error_metrics(("relayed", 0)) == live.metrics() == dict.fromkeys(live.metrics(), 0)
    relayed.latest = {**relayed.latest, "total-retries": 3}
    assert task_error_metrics(("relayed", 0))["total-retries"] == 3  # type: ignore[index]
