"""Raw values for a task that takes them typed (``ValueFormat.RAW_TYPED``): JSON with schemas and
Avro come raw with their wire format (``SinkRecordBatch.raw_format``), and Avro with the way to
its writer schemas (``SinkRecordBatch.writer_schema``).

No broker: the runner's delivery step is fed fake consumed messages."""

from __future__ import annotations

from typing import Any

import pytest

from sluice.connectors.api import Converter, DataError, SchemaAndValue, ValueFormat, WireFormat
from sluice.converters.json import JsonConverter

from .test_errors import FakeMessage, sink_runner
from .test_raw_values import RawTask, passthrough


class TypedTask(RawTask):
    value_format = ValueFormat.RAW_TYPED


class FakeAvroConverter(Converter):
    """Confluent's wire format with one registered schema (id 7); decodes a body as its text."""

    def from_connect_data(self, topic: str, schema: Any, value: Any, headers: Any = None) -> bytes | None:
        raise NotImplementedError

    def to_connect_data(self, topic: str, data: bytes | None, headers: Any = None) -> SchemaAndValue:
        return SchemaAndValue(None, None if data is None else data[5:].decode())

    def wire_format(self) -> WireFormat:
        return WireFormat("avro")

    def writer_schema(self, schema_id: int) -> dict[str, Any]:
        if schema_id != 7:
            raise DataError(f"no schema {schema_id}")
        return {"type": "string"}


def _json(**config: str) -> JsonConverter:
    converter = JsonConverter()
    converter.configure(config, False)
    return converter


def _runner(task: RawTask, converter: Converter, transform: Any = None) -> Any:
    runner = sink_runner(task, value_converter=converter, transform=transform)
    runner.start_task()  # the task says what it takes, then the runner decides
    return runner


def test_json_with_schemas_comes_raw_with_its_wire_format() -> None:
    task = TypedTask(read_values=False)
    envelope = b'{"schema":{"type":"int32","optional":false},"payload":5}'
    _runner(task, _json(**{"schemas.enable": "true", "replace.null.with.default": "false"})).deliver(
        [FakeMessage(0, envelope)]
    )
    (batch,) = task.batches
    assert batch.raw_values == [envelope]
    assert batch.raw_format == WireFormat("json", schemas=True, replace_null_with_default=False)
    assert batch.values == [5]


def test_schemaless_json_comes_raw_as_before() -> None:
    task = TypedTask(read_values=False)
    _runner(task, _json(**{"schemas.enable": "false"})).deliver([FakeMessage(0, b'{"a":1}')])
    assert task.batches[0].raw_format is not None and task.batches[0].raw_format.schemaless_json


def test_avro_comes_raw_with_the_registry_lookup() -> None:
    task = TypedTask(read_values=False)
    body = b"\x00\x00\x00\x00\x07hello"
    _runner(task, FakeAvroConverter()).deliver([FakeMessage(0, body)])
    (batch,) = task.batches
    assert batch.raw_values == [body] and batch.raw_format == WireFormat("avro")
    assert batch.writer_schema is not None and batch.writer_schema(7) == {"type": "string"}
    assert batch.values == ["hello"]


@pytest.mark.parametrize(
    "converter",
    [_json(**{"schemas.enable": "true", "decimal.format": "NUMERIC"}), FakeAvroConverter()],
    ids=["numeric-decimals", "avro"],
)
def test_a_raw_json_task_gets_what_it_cannot_parse_decoded(converter: Converter) -> None:
    task = RawTask(read_values=False)  # ValueFormat.RAW_JSON
    body = b"\x00\x00\x00\x00\x07hi" if isinstance(converter, FakeAvroConverter) else b'{"schema":null,"payload":1}'
    _runner(task, converter).deliver([FakeMessage(0, body)])
    assert task.batches[0].raw_values is None and task.batches[0].raw_format is None


def test_numeric_decimals_are_decoded_for_a_typed_task_too() -> None:
    task = TypedTask(read_values=False)
    converter = _json(**{"schemas.enable": "true", "decimal.format": "NUMERIC"})
    _runner(task, converter).deliver([FakeMessage(0, b'{"schema":null,"payload":1}')])
    assert task.batches[0].raw_values is None


def test_a_transform_means_decoded_values() -> None:
    task = TypedTask(read_values=False)
    _runner(task, FakeAvroConverter(), transform=passthrough()).deliver(
        [FakeMessage(0, b"\x00\x00\x00\x00\x07x")]
    )
    assert task.batches[0].raw_values is None


def test_a_converter_without_schema_ids_says_so() -> None:
    with pytest.raises(DataError, match="does not name schemas by id"):
        _json().writer_schema(1)
