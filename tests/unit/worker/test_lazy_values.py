"""Deferred value conversion (``SinkTask.lazy_values``) and raw value bytes on sink batches.

No broker: the runner's delivery step is fed fake consumed messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from connectors.api import ConnectError, SinkRecord, SinkRecordBatch
from converters.bytes import ByteArrayConverter
from converters.json import JsonConverter
from worker.runners.sink import SinkTaskRunner

from .test_errors import CollectingSinkTask, FakeDLQ, FakeMessage, sink_runner


def json_converter(schemas: bool = False) -> JsonConverter:
    converter = JsonConverter()
    converter.configure({"schemas.enable": str(schemas).lower()}, False)
    return converter


class TestCheckBatch:
    def test_valid_documents_and_nulls_are_json(self) -> None:
        assert json_converter().check_batch("t", [b'{"a": 1}', None, b"[1,2]", b'"s"', b"3.5"]) == "json"

    @pytest.mark.parametrize(
        "datas",
        [
            pytest.param([b"not json"], id="malformed"),
            pytest.param([b"1,[2", b"3]"], id="one value spilling into the next"),
            pytest.param([b"1,2"], id="two documents in one value"),
            pytest.param([b" 1"], id="surrounding whitespace"),
            pytest.param([b""], id="empty bytes (Jackson reads no value)"),
            pytest.param([b'"\xff"'], id="invalid UTF-8"),
        ],
    )
    def test_anything_per_record_parsing_could_disagree_with_is_not(self, datas: list[bytes]) -> None:
        assert json_converter().check_batch("t", datas) is None

    def test_an_envelope_is_never_deferred(self) -> None:
        assert json_converter(schemas=True).check_batch("t", [b'{"schema":null,"payload":1}']) is None

    def test_bytes_always_convert(self) -> None:
        assert ByteArrayConverter().check_batch("t", [b"\xff", None]) == "bytes"


class LazyTask(CollectingSinkTask):
    lazy_values = True

    def __init__(self, read_values: bool = True) -> None:
        super().__init__()
        self.read_values = read_values
        self.batches: list[SinkRecordBatch] = []

    def put(self, records: Sequence[SinkRecord]) -> None:
        if isinstance(records, SinkRecordBatch):  # record by record after a failed check
            self.batches.append(records)
        if self.read_values:
            super().put(records)


def lazy_runner(task: CollectingSinkTask, **kwargs: Any) -> SinkTaskRunner:
    runner = sink_runner(task, **kwargs)
    runner._value_converter = json_converter()
    return runner


def test_a_lazy_task_gets_unconverted_values_and_the_raw_bytes() -> None:
    task = LazyTask(read_values=False)
    runner = lazy_runner(task)
    runner._deliver([FakeMessage(0, b'{"a":1}'), FakeMessage(1, b"[2]")])
    (batch,) = task.batches
    assert batch.raw_format == "json" and not batch.values_converted
    assert batch.raw_values == [b'{"a":1}', b"[2]"]
    assert len(batch) == 2 and batch.offsets == [0, 1]
    assert batch.values == [{"a": 1}, [2]] and batch.values_converted


def test_reading_deferred_values_gives_what_eager_conversion_gives() -> None:
    eager_task, lazy_task = CollectingSinkTask(), LazyTask()
    messages = [FakeMessage(i, v) for i, v in enumerate([b'{"x":[1,{"y":null}]}', b"true", b'"\\u00e9"'])]
    eager = sink_runner(eager_task)
    eager._value_converter = json_converter()
    eager._deliver(messages)
    lazy_runner(lazy_task)._deliver(messages)
    assert lazy_task.put_batches == eager_task.put_batches


def test_a_batch_that_fails_the_check_is_converted_eagerly_under_errors_tolerance() -> None:
    task, dlq = LazyTask(), FakeDLQ()
    runner = lazy_runner(task, dlq=dlq, tolerance_all=True)
    runner._deliver([FakeMessage(0, b'{"ok":1}'), FakeMessage(1, b"{broken"), FakeMessage(2, b"2")])
    assert [r.value for r in task.put_batches[0]] == [{"ok": 1}, 2]
    assert [value for _, value, _ in dlq.sent] == [b"{broken"]


def test_without_tolerance_a_bad_record_still_fails_in_the_converter_stage() -> None:
    task = LazyTask()
    runner = lazy_runner(task)
    with pytest.raises(ConnectError, match="Tolerance exceeded") as info:
        runner._deliver([FakeMessage(0, b"1"), FakeMessage(1, b"{broken")])
    assert "DataError" in type(info.value.__cause__).__name__
    assert task.put_batches == []  # nothing of the batch was written


def test_a_conversion_that_fails_after_its_check_passed_is_redone_record_by_record() -> None:
    """1e400 is valid JSON to the checker but out of range for orjson: the runner must not lose
    or wrongly fail the batch; the bad record is isolated like any conversion failure."""
    task, dlq = LazyTask(), FakeDLQ()
    runner = lazy_runner(task, dlq=dlq, tolerance_all=True)
    runner._deliver([FakeMessage(0, b"1"), FakeMessage(1, b"1e400"), FakeMessage(2, b"3")])
    assert [r.value for r in task.put_batches[-1]] == [1, 3]
    assert [value for _, value, _ in dlq.sent] == [b"1e400"]


class ParsingTask(LazyTask):
    """A task that parses the raw JSON itself (as the JDBC sink's JSON fast path does)."""

    parses_raw_json = True


def test_a_task_that_parses_raw_json_gets_it_unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    task = ParsingTask(read_values=False)
    runner = lazy_runner(task)
    checked: list[object] = []
    monkeypatch.setattr(runner._value_converter, "check_batch", lambda topic, datas: checked.append(datas) or None)
    runner._deliver([FakeMessage(0, b'{"a":1}'), FakeMessage(1, b"{broken")])
    (batch,) = task.batches
    assert checked == []  # the converter never looked at the bytes
    assert batch.raw_format == "json" and batch.raw_values == [b'{"a":1}', b"{broken"]


class DecidingTask(LazyTask):
    """Decides in start() whether it parses the raw JSON (as the S3 sink does: Parquet yes, JSON lines no)."""

    def start(self, config: Any, context: Any) -> None:
        self.parses_raw_json = config.get("parse") == "yes"


@pytest.mark.parametrize(("setting", "unchecked"), [("yes", True), ("no", False)])
def test_a_task_may_decide_in_start_whether_it_gets_json_unchecked(setting: str, unchecked: bool) -> None:
    task = DecidingTask(read_values=False)
    runner = lazy_runner(task, tolerance_all=True)
    runner.task_config = {"parse": setting}
    runner._consumer_config = {"group.id": "g", "bootstrap.servers": "127.0.0.1:9"}  # never reached
    runner._initialize()
    try:
        runner._deliver([FakeMessage(0, b'{"a":1}'), FakeMessage(1, b"{broken")])
    finally:
        assert runner._consumer is not None
        runner._consumer.close()
    if unchecked:
        (batch,) = task.batches
        assert batch.raw_format == "json" and batch.raw_values == [b'{"a":1}', b"{broken"]
    else:  # checked: the bad value is found before put(), which gets the good record alone, not a batch
        assert task.batches == []


def test_an_unchecked_malformed_value_is_dead_lettered_when_the_task_reads_values() -> None:
    task, dlq = ParsingTask(), FakeDLQ()
    runner = lazy_runner(task, dlq=dlq, tolerance_all=True)
    runner._deliver([FakeMessage(0, b'{"ok":1}'), FakeMessage(1, b"{broken"), FakeMessage(2, b"NaN")])
    assert [r.value for r in task.put_batches[-1]] == [{"ok": 1}]
    assert [value for _, value, _ in dlq.sent] == [b"{broken", b"NaN"]


def test_an_unchecked_malformed_value_fails_the_task_without_tolerance() -> None:
    task = ParsingTask()
    runner = lazy_runner(task)
    with pytest.raises(ConnectError, match="Tolerance exceeded"):
        runner._deliver([FakeMessage(0, b"1"), FakeMessage(1, b"{broken")])
    assert task.put_batches == []


def test_with_schemas_the_converter_checks_even_for_a_task_that_parses_json() -> None:
    """Only schemaless JSON is handed over unchecked: an envelope must be converted anyway."""
    runner = lazy_runner(ParsingTask(read_values=False))
    runner._value_converter = json_converter(schemas=True)
    assert runner._value_converter.unchecked_format("t") is None
    runner._deliver([FakeMessage(0, b'{"schema":null,"payload":1}')])
    assert runner.task.batches[0].raw_format is None


def test_tasks_without_lazy_values_and_transformed_connectors_convert_eagerly() -> None:
    task = CollectingSinkTask()
    runner = lazy_runner(task)
    runner._deliver([FakeMessage(0, b"1")])
    (batch,) = task.put_batches
    assert [(r.kafka_offset, r.value) for r in batch] == [(0, 1)]
    assert lazy_runner(LazyTask(), transform=lambda records: records)._lazy is False
