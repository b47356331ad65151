"""Sink runner: raw values a task could not use (``UnusableRawValues``) given back and delivered
again decoded, from the batch at hand or by consuming those partitions again."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from sluice.connectors.api import SinkRecordBatch, TopicPartition, UnusableRawValues
from sluice.worker.runners.sink_errors import SinkErrorHandling, _batches

log = logging.getLogger(__name__)


class SinkRedelivery(SinkErrorHandling):
    """Giving raw values back (a base class of :class:`~worker.runners.sink.SinkTaskRunner`)."""

    _consumed: dict[TopicPartition, int]
    _rewinds: dict[TopicPartition, int]
    _decode_until: dict[TopicPartition, int]

    def _give_back(self, unusable: UnusableRawValues, consumed: list[Any]) -> None:
        """``put`` could not use raw values from ``unusable.offsets`` on. When those are all in the
        batch at hand, put them again decoded now; otherwise (a task that wrote earlier batches
        in the background) consume them again (:meth:`_redeliver_decoded`)."""
        first: dict[TopicPartition, int] = {}
        for m in consumed:
            first.setdefault(TopicPartition(m.topic(), m.partition()), m.offset())
        if any(tp not in first or offset < first[tp] for tp, offset in unusable.offsets.items()):
            self._redeliver_decoded(unusable)
            return
        self._log_give_back(unusable, "delivering them again, decoded")
        offsets = unusable.offsets
        again = [m for m in consumed if m.offset() >= offsets.get(TopicPartition(m.topic(), m.partition()), 1 << 62)]
        self._messages = again
        try:
            for part, _ in _batches(self._convert_each(again), again):
                self._put_recovering(part)
        except UnusableRawValues as earlier:  # about records of an earlier put after all
            self._redeliver_decoded(earlier)

    def _redeliver_decoded(self, unusable: UnusableRawValues) -> None:
        """The task could not use raw values from ``unusable.offsets`` on: consume those partitions
        again from there and deliver the records decoded (record by record where conversion fails,
        under ``errors.*``) until past what had been consumed; commits stop there meanwhile."""
        for tp, offset in unusable.offsets.items():
            if tp not in self.assignment:
                continue
            consumed = self._consumed.get(tp, offset)
            self._decode_until[tp] = max(consumed, self._decode_until.get(tp, 0))
            self._rewinds[tp] = min(offset, self._rewinds.get(tp, offset))
            self._consumed[tp] = min(offset, consumed)
        self._log_give_back(unusable, "consuming them again, decoded")

    def _log_give_back(self, unusable: UnusableRawValues, then: str) -> None:
        where = ", ".join(f"{tp.topic}-{tp.partition} from offset {o}" for tp, o in sorted(unusable.offsets.items()))
        log.warning("%s could not use the raw values of %s (%s): %s", type(self.task).__name__, where, unusable, then)

    def _decoding(self, messages: list[Any]) -> bool:
        """Whether ``messages`` reach into a range given back by UnusableRawValues (delivered
        decoded); ranges the consumer has passed are forgotten."""
        until = self._decode_until
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


def _rewound(batch: SinkRecordBatch, rewinds: Mapping[TopicPartition, int]) -> bool:
    """Whether ``batch`` holds records of a partition about to be consumed again."""
    topic = batch.original_topic
    return any(TopicPartition(topic, p) in rewinds for p in set(batch.partitions))
