"""The sink runner's redelivery policy: whether batches carry raw values, and what happens to raw
values a task could not use (``UnusableRawValues``): delivered again decoded, from the batch at
hand or by consuming those partitions again."""

from __future__ import annotations

import logging
from collections.abc import Set
from typing import Any

from sluice.connectors.api import SinkRecordBatch, TopicPartition, UnusableRawValues, ValueFormat, WireFormat
from sluice.worker.runners.sink_batches import SinkBatchBuilder
from sluice.worker.runners.sink_errors import Transform
from sluice.worker.runners.sink_offsets import SinkOffsets

log = logging.getLogger(__name__)


class RawValuesRedelivery:
    """Raw values for a task that asks for them, and their redelivery decoded. Runner thread only.

    ``task_name`` names the task in the log; ``converters``: the builder of the task's batches,
    whose converters say what their bytes are; ``transform``: the transform chain that runs, if
    any (values stay raw through it only when it keeps them).
    """

    def __init__(
        self, task_name: str, converters: SinkBatchBuilder, offsets: SinkOffsets, *, transform: Transform | None
    ) -> None:
        self._task_name = task_name
        self._converters = converters
        self._offsets = offsets
        self._transform = transform
        #: The value converter's wire format when batches carry raw values (``None``: they do not).
        self.format: WireFormat | None = None
        #: The key converter's wire format when batches with raw values carry raw keys too.
        self.key_format: WireFormat | None = None
        #: Partitions consumed again after UnusableRawValues: their records are delivered decoded
        #: until the consumer is past this offset again.
        self.decode_until: dict[TopicPartition, int] = {}

    def adopt(self, value_format: ValueFormat) -> None:
        """Decide, once the task started, whether its batches carry raw values (:attr:`format`):
        the task asked (its ``SinkTask.value_format``, which it may set in ``start()``), the value
        converter's bytes are what the task asked for, and the transform chain, if any, keeps
        values in that format raw (``Transformation.keeps_raw_values``).
        A ``raw_typed`` task's batches with raw values carry raw keys too (:attr:`key_format`)
        when the key converter's bytes are what raw typed values may be."""
        wanted = ValueFormat(value_format)
        self.format = self.key_format = None
        if wanted is ValueFormat.CONNECT:
            return
        wire = self._converters.value_converter.wire_format()
        if self._transform is not None and not self._transform.keeps_raw_values(wire):
            return
        if wanted is ValueFormat.RAW_BYTES or wire.schemaless_json:
            self.format = wire
        elif wanted is ValueFormat.RAW_TYPED and _typed(wire):
            self.format = wire
        if wanted is ValueFormat.RAW_TYPED and self.format is not None:
            keys = self._converters.key_converter.wire_format()
            self.key_format = keys if _typed(keys) else None

    def format_for(self, messages: list[Any]) -> WireFormat | None:
        """The raw format for a batch of ``messages`` (of one topic): ``None`` when the values are
        to be decoded, also for records inside a range given back (see :meth:`redeliver`)."""
        raw = self.format
        if raw is None or (self.decode_until and self._decoding(messages)):
            return None
        return raw

    def rewound(self, batch: SinkRecordBatch) -> bool:
        """Whether ``batch`` holds records of a partition about to be consumed again (it is skipped:
        they come again, decoded)."""
        rewinds = self._offsets.rewinds
        if not rewinds:
            return False
        topic = batch.original_topic
        return any(TopicPartition(topic, p) in rewinds for p in set(batch.partitions))

    def give_back(self, unusable: UnusableRawValues, consumed: list[Any], assignment: Set[TopicPartition]) -> list[Any]:
        """``put`` could not use raw values from ``unusable.offsets`` on. When those are all in the
        batch at hand, return its messages from there on, to be put again decoded now; otherwise (a
        task that wrote earlier batches in the background) :meth:`redeliver` them and return none."""
        first: dict[TopicPartition, int] = {}
        for m in consumed:
            first.setdefault(TopicPartition(m.topic(), m.partition()), m.offset())
        if any(tp not in first or offset < first[tp] for tp, offset in unusable.offsets.items()):
            self.redeliver(unusable, assignment)
            return []
        self._log(unusable, "delivering them again, decoded")
        offsets = unusable.offsets
        return [m for m in consumed if m.offset() >= offsets.get(TopicPartition(m.topic(), m.partition()), 1 << 62)]

    def redeliver(self, unusable: UnusableRawValues, assignment: Set[TopicPartition]) -> None:
        """The task could not use raw values from ``unusable.offsets`` on: consume those partitions
        again from there and deliver the records decoded (record by record where conversion fails,
        under ``errors.*``) until past what had been consumed; commits stop there meanwhile."""
        offsets = self._offsets
        for tp, offset in unusable.offsets.items():
            if tp not in assignment:
                continue
            consumed = offsets.consumed.get(tp, offset)
            self.decode_until[tp] = max(consumed, self.decode_until.get(tp, 0))
            offsets.rewind_back_to(tp, offset)
        self._log(unusable, "consuming them again, decoded")

    def forget(self, partitions: list[TopicPartition]) -> None:
        """Partitions revoked or lost."""
        for tp in partitions:
            self.decode_until.pop(tp, None)

    def _log(self, unusable: UnusableRawValues, then: str) -> None:
        where = ", ".join(f"{tp.topic}-{tp.partition} from offset {o}" for tp, o in sorted(unusable.offsets.items()))
        log.warning("%s could not use the raw values of %s (%s): %s", self._task_name, where, unusable, then)

    def _decoding(self, messages: list[Any]) -> bool:
        """Whether ``messages`` reach into a range given back (delivered decoded); ranges the
        consumer has passed are forgotten."""
        until = self.decode_until
        inside = False
        for m in messages:
            tp = TopicPartition(m.topic(), m.partition())
            end = until.get(tp)
            if end is None:
                continue
            if m.offset() < end:
                inside = True
            elif m.offset() + 1 >= end:
                del until[tp]
        return inside


def _typed(wire: WireFormat) -> bool:
    """Whether ``wire`` is a format raw typed values come in: JSON (schemaless, or with schemas
    and decimals as base64) or Avro."""
    return wire.schemaless_json or (wire.kind == "json" and wire.decimal_format == "BASE64") or wire.kind == "avro"
