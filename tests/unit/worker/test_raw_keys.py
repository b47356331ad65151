"""Raw keys for a task that takes raw typed values (``ValueFormat.RAW_TYPED``): a batch with raw
values carries the consumed key bytes too when the key converter writes JSON or Avro
(``SinkRecordBatch.raw_keys``), its keys decoded on first read; a key that does not decode is
given back like a value (``UnusableRawValues``) and delivered again decoded.

No broker: the builder is fed columns, the runner's delivery step fake consumed messages."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.connectors.api import INT64_SCHEMA, ConnectError, Converter, SchemaAndValue, ValueFormat, WireFormat
from sluice.converters.header import SimpleHeaderConverter
from sluice.converters.json import JsonConverter
from sluice.converters.string import StringConverter
from sluice.worker.runners.sink_batches import ReadColumns, SinkBatchBuilder

from .test_errors import FakeDLQ, FakeMessage, sink_runner
from .test_raw_formats import FakeAvroConverter, TypedTask
from .test_raw_values import RawTask

KEY = b'{"schema":{"type":"int64","optional":false},"payload":%d}'


def _json(**config: str) -> JsonConverter:
    converter = JsonConverter()
    converter.configure({"schemas.enable": "true", **config}, True)
    return converter


class CountingConverter(Converter):
    """JSON with schemas that counts the batches it decodes."""

    def __init__(self) -> None:
        self.inner = _json()
        self.batches = 0

    def from_connect_data(self, topic: str, schema: Any, value: Any, headers: Any = None) -> bytes | None:
        return self.inner.from_connect_data(topic, schema, value)

    def to_connect_data(self, topic: str, data: bytes | None, headers: Any = None) -> SchemaAndValue:
        return self.inner.to_connect_data(topic, data)

    def to_connect_batch(self, topic: str, datas: Any) -> tuple[list[Any], list[Any]]:
        self.batches += 1
        return self.inner.to_connect_batch(topic, datas)

    def wire_format(self) -> WireFormat:
        return self.inner.wire_format()


def _builder(keys: Converter) -> SinkBatchBuilder:
    headers = SimpleHeaderConverter()
    headers.configure({})
    values = JsonConverter()
    values.configure({"schemas.enable": "false"}, False)
    return SinkBatchBuilder(keys, values, headers)


_CONSUMED = ReadColumns([0, 0], [5, 6], [None, None], [None, None])


def test_the_builder_hands_raw_keys_over_with_raw_values_and_decodes_them_on_read() -> None:
    keys = CountingConverter()
    builder = _builder(keys)
    raw = builder.value_converter.wire_format()
    batch = builder.build("t", [KEY % 1, KEY % 2], [b'{"a":1}', b'{"a":2}'], _CONSUMED, raw, keys.wire_format())
    assert batch.raw_keys == [KEY % 1, KEY % 2] and batch.raw_key_format == WireFormat("json", schemas=True)
    assert batch.key_writer_schema is not None and len(batch) == 2 and keys.batches == 0
    assert batch.keys == [1, 2] and batch.key_schemas == [INT64_SCHEMA] * 2 and keys.batches == 1
    assert [r.key for r in batch] == [1, 2] and keys.batches == 1


@pytest.mark.parametrize("raw_values", [False, True], ids=["decoded-values", "raw-values"])
def test_the_builder_decodes_keys_at_once_otherwise(raw_values: bool) -> None:
    """Without raw values, or without a key format, the keys are converted while building."""
    keys = CountingConverter()
    builder = _builder(keys)
    raw = builder.value_converter.wire_format() if raw_values else None
    key_format = None if raw_values else keys.wire_format()
    batch = builder.build("t", [KEY % 1, KEY % 2], [b'{"a":1}', b'{"a":2}'], _CONSUMED, raw, key_format)
    assert batch.raw_keys is None and batch.raw_key_format is None and keys.batches == 1
    assert batch.keys == [1, 2] and (batch.raw_values is not None) is raw_values


class KeyedMessage(FakeMessage):
    def __init__(self, offset: int, key: bytes | None, value: bytes) -> None:
        super().__init__(offset, value)
        self._key = key

    def key(self) -> bytes | None:  # type: ignore[override]
        return self._key


def _values() -> JsonConverter:
    converter = JsonConverter()
    converter.configure({"schemas.enable": "false"}, False)
    return converter


def _runner(task: RawTask, keys: Converter, **kwargs: Any) -> Any:
    runner = sink_runner(task, value_converter=_values(), key_converter=keys, **kwargs)
    runner.start_task()
    return runner


@pytest.mark.parametrize(
    ("keys", "expected"),
    [(_json(), WireFormat("json", schemas=True)), (FakeAvroConverter(), WireFormat("avro"))],
    ids=["json-with-schemas", "avro"],
)
def test_a_typed_task_gets_raw_keys_in_the_formats_it_reads(keys: Converter, expected: WireFormat) -> None:
    task = TypedTask(read_values=False)
    key = KEY % 3 if isinstance(keys, JsonConverter) else b"\x00\x00\x00\x00\x07k3"
    _runner(task, keys).deliver([KeyedMessage(0, key, b'{"a":1}')])
    (batch,) = task.batches
    assert batch.raw_keys == [key] and batch.raw_key_format == expected
    assert batch.keys == [3 if isinstance(keys, JsonConverter) else "k3"]


def _string_keys() -> StringConverter:
    converter = StringConverter()
    converter.configure({}, True)
    return converter


@pytest.mark.parametrize(
    ("task", "keys"),
    [
        (TypedTask(read_values=False), _string_keys()),
        (TypedTask(read_values=False), _json(**{"decimal.format": "NUMERIC"})),
        (RawTask(read_values=False), _json()),
    ],
    ids=["string-keys", "numeric-decimals", "raw-json-task"],
)
def test_keys_come_decoded_unless_typed_and_in_such_a_format(task: RawTask, keys: Converter) -> None:
    key = b"k" if isinstance(keys, StringConverter) else KEY % 4
    _runner(task, keys).deliver([KeyedMessage(0, key, b'{"a":1}')])
    (batch,) = task.batches
    assert batch.raw_values is not None and batch.raw_keys is None and batch.raw_key_format is None
    assert batch.keys == ["k" if isinstance(keys, StringConverter) else 4]


def test_a_key_that_does_not_decode_is_delivered_again_decoded_and_dead_lettered() -> None:
    task, dlq = TypedTask(), FakeDLQ()  # reads every record (keys too)
    runner = _runner(task, _json(), dlq=dlq, tolerance_all=True)
    runner.deliver([KeyedMessage(0, KEY % 1, b'{"a":1}'), KeyedMessage(1, b"{broken", b'{"a":2}'),
                    KeyedMessage(2, KEY % 3, b'{"a":3}')])  # fmt: skip
    assert task.batches[0].raw_keys is not None  # refused when read: given back
    assert task.batches[-1].raw_keys is None  # delivered again, decoded
    assert [(r.key, r.value) for r in task.put_batches[-1]] == [(1, {"a": 1}), (3, {"a": 3})]
    assert [key for key, _, _ in dlq.sent] == [b"{broken"]


def test_without_tolerance_a_key_that_does_not_decode_fails_the_task_naming_it() -> None:
    task = TypedTask()
    runner = _runner(task, _json())
    with pytest.raises(ConnectError, match="Tolerance exceeded.* offset 1") as info:
        runner.deliver([KeyedMessage(0, KEY % 1, b'{"a":1}'), KeyedMessage(1, b"{broken", b'{"a":2}')])
    assert "DataError" in type(info.value.__cause__).__name__
    assert task.put_batches == []  # nothing of the batch was written


def test_a_typed_task_that_takes_the_values_decoded_gets_keys_decoded_too() -> None:
    """An opaque value converter: no raw values, so no raw keys either."""
    task = TypedTask(read_values=False)
    runner = sink_runner(task, value_converter=_string_keys(), key_converter=_json())
    runner.start_task()
    runner.deliver([KeyedMessage(0, KEY % 5, b"v")])
    (batch,) = task.batches
    assert batch.raw_values is None and batch.raw_keys is None and batch.keys == [5]
    assert ValueFormat(task.value_format) is ValueFormat.RAW_TYPED
