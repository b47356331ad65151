"""Raw values for sink tasks that ask for them (``SinkTask.value_format``), and the runtime's
recovery when a task cannot use them (``UnusableRawValues``).

No broker: the runner's delivery step is fed fake consumed messages."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.connectors.api import (
    ConnectError,
    SinkRecordBatch,
    TopicPartition,
    Transformation,
    UnusableRawValues,
    ValueFormat,
)
from sluice.converters.bytes import ByteArrayConverter
from sluice.converters.json import JsonConverter
from sluice.converters.json_documents import first_malformed
from sluice.worker.execution.transform_chain import TransformChain, TransformStep
from sluice.worker.runners.sink import SinkTaskRunner

from .test_errors import CollectingSinkTask, FakeDLQ, FakeMessage, sink_runner, started

TP = TopicPartition("in", 0)


class NoChange(Transformation):
    """A transform that keeps every record as it is (and raw values raw: it does not say so)."""

    def apply(self, record: Any) -> Any:
        return record


def passthrough() -> TransformChain:
    return TransformChain([TransformStep("same", NoChange())])


def json_converter(schemas: bool = False) -> JsonConverter:
    converter = JsonConverter()
    converter.configure({"schemas.enable": str(schemas).lower()}, False)
    return converter


class TestWireFormat:
    def test_json_declares_its_envelope_and_decimals(self) -> None:
        assert json_converter().wire_format().schemaless_json
        declared = json_converter(schemas=True).wire_format()
        assert (declared.kind, declared.schemas, declared.decimal_format) == ("json", True, "BASE64")
        assert ByteArrayConverter().wire_format().kind == "bytes"

    def test_first_malformed_names_the_first_value_that_is_not_one_document(self) -> None:
        assert first_malformed([b'{"a": 1}', None, b"[1,2]", b'"s"', b"3.5"]) is None
        assert first_malformed([b"1", b"{broken", b"2 3"]) == 1
        assert first_malformed([b"1", b" 2"]) == 1  # stray whitespace: Jackson reads it differently
        assert first_malformed([b"1", b'"\xff"']) == 1  # not UTF-8


class RawTask(CollectingSinkTask):
    """Takes raw JSON; reads the values (decoding them) only when asked to."""

    value_format = ValueFormat.RAW_JSON

    def __init__(self, read_values: bool = True) -> None:
        super().__init__()
        self.read_values = read_values
        self.batches: list[SinkRecordBatch] = []

    def put(self, records: SinkRecordBatch) -> None:
        if not records:
            return  # the runtime's "caught up" put
        self.batches.append(records)
        if self.read_values:
            super().put(records)


def raw_runner(task: CollectingSinkTask, **kwargs: Any) -> SinkTaskRunner:
    """A runner of schemaless JSON whose task has started (which decides whether it takes raw values)."""
    runner = sink_runner(task, value_converter=json_converter(), **kwargs)
    runner.start_task()
    return runner


def test_a_raw_task_gets_the_consumed_bytes_and_values_decoded_on_read() -> None:
    task = RawTask(read_values=False)
    raw_runner(task).deliver([FakeMessage(0, b'{"a":1}'), FakeMessage(1, b"[2]")])
    (batch,) = task.batches
    assert batch.raw_values == [b'{"a":1}', b"[2]"]
    assert len(batch) == 2 and batch.offsets == [0, 1]
    assert batch.values == [{"a": 1}, [2]]


def test_decoded_raw_values_are_what_eager_conversion_gives() -> None:
    eager_task, raw_task = CollectingSinkTask(), RawTask()
    messages = [FakeMessage(i, v) for i, v in enumerate([b'{"x":[1,{"y":null}]}', b"true", b'"\\u00e9"'])]
    eager = sink_runner(eager_task, value_converter=json_converter())
    eager.deliver(messages)
    raw_runner(raw_task).deliver(messages)
    assert raw_task.put_batches == eager_task.put_batches


@pytest.mark.parametrize("bad", [b"{broken", b"1e400"])  # 1e400: JSON, but out of range for orjson
def test_values_that_do_not_decode_are_delivered_again_decoded_and_dead_lettered(bad: bytes) -> None:
    task, dlq = RawTask(), FakeDLQ()
    runner = raw_runner(task, dlq=dlq, tolerance_all=True)
    runner.deliver([FakeMessage(0, b'{"ok":1}'), FakeMessage(1, bad), FakeMessage(2, b"2")])
    assert [r.value for r in task.put_batches[-1]] == [{"ok": 1}, 2]
    assert task.batches[-1].raw_values is None  # the second delivery is decoded
    assert [value for _, value, _ in dlq.sent] == [bad]


def test_without_tolerance_a_value_that_does_not_decode_fails_in_the_converter_stage() -> None:
    task = RawTask()
    runner = raw_runner(task)
    with pytest.raises(ConnectError, match="Tolerance exceeded") as info:
        runner.deliver([FakeMessage(0, b"1"), FakeMessage(1, b"{broken")])
    assert "DataError" in type(info.value.__cause__).__name__
    assert task.put_batches == []  # nothing of the batch was written


class GivesBackFrom(RawTask):
    """Takes the records before ``offset`` and gives the rest back, as a sink whose parser refused one."""

    def __init__(self, offset: int) -> None:
        super().__init__(read_values=False)
        self.offset = offset
        self.taken: list[int] = []

    def put(self, records: SinkRecordBatch) -> None:
        if not records:
            return  # the runtime's "caught up" put
        self.batches.append(records)
        if records.raw_values is None:
            self.taken += [r.kafka_offset for r in records]
            return
        self.taken += [o for o in records.offsets if o < self.offset]
        raise UnusableRawValues("the parser refused a value", {TP: self.offset})


def test_a_task_gives_back_records_from_an_offset_and_gets_them_decoded() -> None:
    task = GivesBackFrom(2)
    raw_runner(task).deliver([FakeMessage(i, b"%d" % i) for i in range(4)])
    assert task.taken == [0, 1, 2, 3]  # each once
    assert task.batches[-1].raw_values is None and task.batches[-1].values == [2, 3]


def test_records_given_back_from_an_earlier_batch_are_consumed_again_decoded() -> None:
    """A task that writes in the background learns of a bad raw value after its put returned: the
    runner seeks the partition back, commits nothing past it, and delivers decoded until past
    what had been consumed; then raw values resume."""
    task = GivesBackFrom(0)
    runner, consumer = started(task, 0, value_converter=json_converter())
    consumer.fed.append([FakeMessage(i, b"%d" % i) for i in range(2, 4)])  # gives back from 0: not in hand
    runner.iteration()
    assert runner.offsets.rewinds == {TP: 0}
    runner.commit()
    assert consumer.commits == [[("in", 0, 0)]]  # nothing past what is consumed again
    consumer.fed.append([FakeMessage(i, b"%d" % i) for i in range(0, 3)])
    runner.iteration()
    assert consumer.seeks == [("in", 0, 0)] and not runner.offsets.rewinds
    assert task.batches[-1].raw_values is None  # still inside what had been consumed: decoded
    consumer.fed.append([FakeMessage(i, b"%d" % i) for i in range(4, 6)])
    runner.iteration()
    assert task.batches[-1].raw_values is not None  # past it: raw again


class GivesBackAtCommit(RawTask):
    def pre_commit(self, offsets: Any) -> Any:
        raise UnusableRawValues("a row group did not parse", {TP: 1})


def test_records_given_back_at_pre_commit_are_not_committed() -> None:
    runner, consumer = started(GivesBackAtCommit(read_values=False), 0, value_converter=json_converter())
    runner.deliver([FakeMessage(i, b"%d" % i) for i in range(3)])
    runner.commit()
    assert consumer.commits == [] and runner.offsets.rewinds == {TP: 1} and runner.offsets.consumed[TP] == 1


class DecidingTask(RawTask):
    """Decides in start() whether it takes raw values (as the S3 sink does: JSON lines and Parquet, not Avro)."""

    def start(self, config: Any, context: Any) -> None:
        self.value_format = ValueFormat.RAW_JSON if config.get("raw") == "yes" else ValueFormat.CONNECT


@pytest.mark.parametrize(("setting", "raw"), [("yes", True), ("no", False)])
def test_a_task_may_decide_in_start_whether_it_takes_raw_values(setting: str, raw: bool) -> None:
    task = DecidingTask(read_values=False)
    runner, _ = started(task, 0, value_converter=json_converter(), config={"raw": setting})
    runner.deliver([FakeMessage(0, b'{"a":1}')])
    assert (task.batches[0].raw_values is not None) is raw


def test_only_schemaless_json_is_handed_over_raw() -> None:
    """An envelope must be read anyway: JSON with schemas is decoded for a raw-JSON task."""
    task = RawTask(read_values=False)
    runner = sink_runner(task)  # JsonConverter with schemas.enable=true
    runner.start_task()
    runner.deliver([FakeMessage(0, b'{"schema":null,"payload":1}')])
    assert task.batches[0].raw_values is None and task.batches[0].values == [1]


def test_connect_tasks_and_transformed_connectors_get_decoded_values() -> None:
    task = CollectingSinkTask()
    runner = raw_runner(task)
    runner.deliver([FakeMessage(0, b"1")])
    (batch,) = task.put_batches
    assert [(r.kafka_offset, r.value) for r in batch] == [(0, 1)]
    transformed = RawTask()
    raw_runner(transformed, transform=passthrough()).deliver([FakeMessage(0, b"1")])
    assert transformed.batches[0].raw_values is None
