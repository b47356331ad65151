"""Raw values through transforms: a chain whose every transform keeps raw values
(``Transformation.keeps_raw_values``: ExtractNewRecordState on JSON with schemas) leaves a raw typed
task its raw values, rewritten; any other chain means decoded values, as before.

No broker: the runner's delivery step is fed fake consumed messages."""

from __future__ import annotations

from typing import Any

import orjson

from sluice.connectors.api import SinkRecordBatch, TopicPartition, Transformation, UnusableRawValues
from sluice.transforms import ExtractNewRecordState, InsertFieldValue, TopicNameMatches
from sluice.worker.execution.transform_chain import TransformChain, TransformStep
from sluice.worker.runners.sink import SinkTaskRunner

from ..transforms.support import configured
from .test_errors import FakeMessage, sink_runner
from .test_raw_formats import TypedTask

ROW = '{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"name"}],"optional":true,"name":"s.t.Value","field":"%s"}'
ENVELOPE = (
    '{"type":"struct","fields":[' + ROW % "before" + "," + ROW % "after" + ","
    '{"type":"string","optional":false,"field":"op"}],"optional":false,"name":"s.t.Envelope"}'
)


def event(op: str, before: dict[str, Any] | None, after: dict[str, Any] | None) -> bytes:
    return b'{"schema":%s,"payload":%s}' % (
        ENVELOPE.encode(),
        orjson.dumps({"before": before, "after": after, "op": op}),
    )


def chain(*transforms: Transformation, predicate: Any = None) -> TransformChain:
    return TransformChain([TransformStep(f"t{i}", t, predicate) for i, t in enumerate(transforms)])


def runner_with(task: TypedTask, transform: TransformChain) -> SinkTaskRunner:
    runner = sink_runner(task, transform=transform)  # JSON with schemas
    runner.start_task()
    return runner


MESSAGES = [
    FakeMessage(0, event("c", None, {"id": 1, "name": "a"})),
    FakeMessage(1, event("u", None, {"id": 1, "name": "b"})),
    FakeMessage(2, event("d", {"id": 1, "name": "b"}, None)),
    FakeMessage(3, None),  # type: ignore[arg-type] - the delete's tombstone
    FakeMessage(4, event("c", None, {"id": 2, "name": None})),
]


def test_unwrap_keeps_the_raw_values_of_a_raw_typed_task_rewritten() -> None:
    task = TypedTask(read_values=False)
    runner_with(task, chain(configured(ExtractNewRecordState))).deliver(MESSAGES)
    (batch,) = task.batches
    assert batch.raw_values is not None and batch.raw_format is not None and batch.raw_format.schemas
    assert batch.offsets == [0, 1, 2, 4]  # the tombstone dropped
    assert [None if v is None else orjson.loads(v)["payload"] for v in batch.raw_values] == [
        {"id": 1, "name": "a"},
        {"id": 1, "name": "b"},
        None,  # a delete: a null value under after's schema
        {"id": 2, "name": None},
    ]
    assert batch.values == [{"id": 1, "name": "a"}, {"id": 1, "name": "b"}, None, {"id": 2, "name": None}]


def test_any_other_chain_means_decoded_values() -> None:
    unwrap = configured(ExtractNewRecordState)
    is_t = configured(TopicNameMatches, pattern="in")
    for transform in (
        chain(unwrap, configured(InsertFieldValue, static_field="k", static_value="v")),
        chain(unwrap, predicate=is_t),
        chain(configured(ExtractNewRecordState, add_headers="op")),
    ):
        task = TypedTask()
        runner_with(task, transform).deliver(MESSAGES)
        assert [b.raw_values for b in task.batches] == [None]
        assert task.put_batches[0][0].value["id"] == 1


def test_a_batch_the_raw_path_cannot_take_is_decoded_and_transformed_record_by_record() -> None:
    task = TypedTask()
    odd = b'{"schema":null,"payload":{"op":"c","before":null,"after":{"id":3,"name":"x"}}}'
    runner_with(task, chain(configured(ExtractNewRecordState))).deliver([*MESSAGES, FakeMessage(5, odd)])
    (batch,) = task.batches
    assert batch.raw_values is None  # a schemaless event inside an envelope: left to the record path
    assert [r.value for r in task.put_batches[0]] == [
        {"id": 1, "name": "a"},
        {"id": 1, "name": "b"},
        None,
        {"id": 2, "name": None},
        {"id": 3, "name": "x"},
    ]


class GivesBackFrom(TypedTask):
    """Takes raw records before ``offset`` and gives the rest back, as a sink whose parser refused one."""

    def __init__(self, offset: int) -> None:
        super().__init__(read_values=False)
        self.offset = offset
        self.taken: list[tuple[int, Any]] = []

    def put(self, records: SinkRecordBatch) -> None:
        self.batches.append(records)
        if records.raw_values is None:
            self.taken += [(r.kafka_offset, r.value) for r in records]
            return
        self.taken += [(o, v) for o, v in zip(records.offsets, records.values) if o < self.offset]
        raise UnusableRawValues("the parser refused a value", {TopicPartition("in", 0): self.offset})


def test_records_given_back_from_a_rewritten_batch_come_again_decoded_and_transformed() -> None:
    task = GivesBackFrom(2)
    runner_with(task, chain(configured(ExtractNewRecordState))).deliver(MESSAGES)
    assert task.taken == [
        (0, {"id": 1, "name": "a"}),
        (1, {"id": 1, "name": "b"}),
        (2, None),
        (4, {"id": 2, "name": None}),
    ]
    assert task.batches[-1].raw_values is None
