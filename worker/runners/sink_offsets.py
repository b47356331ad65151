"""The sink runner's offset tracker: where each partition starts when assigned, what has been
consumed and committed, rewinds, and when the next commit is due (the bookkeeping of steps 5 and 6
of :class:`~worker.runners.sink.SinkTaskRunner`, which performs the commit itself)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sluice.connectors.api import TopicPartition
from sluice.worker.observability.task_metrics import Lag, consumer_lag, time_lag

log = logging.getLogger(__name__)

#: ``auto.offset.reset`` → where a partition without a committed offset starts (others: librdkafka decides).
_RESET_TO = {
    "earliest": OFFSET_BEGINNING,
    "smallest": OFFSET_BEGINNING,
    "beginning": OFFSET_BEGINNING,
    "latest": OFFSET_END,
    "largest": OFFSET_END,
    "end": OFFSET_END,
}
_COMMITTED_TIMEOUT_S = 10.0


class SinkOffsets:
    """One sink task's offsets, per partition. Runner thread only.

    ``active_topics`` is the runner's set of topics used (KIP-558), which tracking adds to.
    """

    def __init__(self, consumer_config: Mapping[str, Any], flush_interval_s: float, active_topics: set[str]) -> None:
        self._reset_to = _RESET_TO.get(str(consumer_config.get("auto.offset.reset", "earliest")).lower())
        self._cooperative = "cooperative" in str(consumer_config.get("partition.assignment.strategy", ""))
        self._read_committed = str(consumer_config.get("isolation.level", "")).lower() == "read_committed"
        self._flush_interval_s = flush_interval_s
        self._active_topics = active_topics
        #: The next offset to consume, per partition.
        self.consumed: dict[TopicPartition, int] = {}
        #: The timestamp (ms) of the last record consumed, per partition (for the lag in seconds).
        self.consumed_ts: dict[tuple[str, int], int] = {}
        #: What was last committed, per partition.
        self.committed: dict[TopicPartition, int] = {}
        #: Where partitions are to be consumed from again, applied before the next consume.
        self.rewinds: dict[TopicPartition, int] = {}
        #: The task asked for a commit (``SinkTaskContext.request_commit``).
        self.commit_requested = False
        self._next_commit = 0.0

    # -- assignment -------------------------------------------------------------------------------

    def assign_from_committed(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        """Assign ``partitions`` at their committed offsets, and one without a commit at the start or
        end that ``auto.offset.reset`` names, as the Java consumer starts.

        Left to itself librdkafka looks the committed offsets up too, but for a partition without
        one it waits 100 ms before asking for the reset position: every new sink connector started
        a tenth of a second late. Only for the eager assignment protocol (the cooperative one
        assigns incrementally); if the lookup fails, librdkafka does it its own way.
        """
        start = self._reset_to
        if start is None or self._cooperative or not partitions:
            return
        try:
            committed = consumer.committed(partitions, timeout=_COMMITTED_TIMEOUT_S)
        except KafkaException as exc:
            log.debug("Looking up the committed offsets failed (%s); the consumer does it itself", exc)
            return
        for p, c in zip(partitions, committed, strict=True):
            p.offset = c.offset if c.offset >= 0 and c.error is None else start
        consumer.assign(partitions)

    def forget(self, partitions: Iterable[TopicPartition], *, lost: bool = False) -> None:
        """Partitions revoked (or ``lost`` without a clean revoke, whose last commit is kept)."""
        for tp in partitions:
            self.consumed.pop(tp, None)
            self.consumed_ts.pop((tp.topic, tp.partition), None)
            if not lost:
                self.committed.pop(tp, None)

    # -- rewinds ----------------------------------------------------------------------------------

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Consume these partitions again from these offsets (the task's ``context.rewind``)."""
        self.rewinds.update(offsets)

    def rewind_back_to(self, tp: TopicPartition, offset: int) -> None:
        """Consume ``tp`` again from ``offset`` at the latest, and count nothing past it as
        consumed meanwhile (raw values given back)."""
        self.rewinds[tp] = min(offset, self.rewinds.get(tp, offset))
        self.consumed[tp] = min(offset, self.consumed.get(tp, offset))

    def apply_rewinds(self, consumer: Consumer, assignment: set[TopicPartition]) -> None:
        """Seek the consumer to the rewinds of assigned partitions (before the next consume)."""
        for tp, offset in self.rewinds.items():
            if tp in assignment:
                consumer.seek(KafkaTopicPartition(tp.topic, tp.partition, offset))
                self.consumed[tp] = offset
        self.rewinds.clear()

    # -- consumption ------------------------------------------------------------------------------

    def track(self, messages: list[Any], partitions: int) -> None:
        """Remember the next offset of each partition in the batch, and its last record's timestamp
        (for the lag in seconds).

        Messages of one partition arrive in offset order, so scanning from the end finds each
        partition's last offset; with one assigned partition (of ``partitions``) that is a single step.
        """
        consumed = self.consumed
        stamps = self.consumed_ts
        distinct = max(1, partitions)
        seen: set[tuple[str, int]] = set()
        for m in reversed(messages):
            tp = (m.topic(), m.partition())
            if tp not in seen:
                seen.add(tp)
                self._active_topics.add(tp[0])
                consumed[TopicPartition(*tp)] = m.offset() + 1
                stamp = m.timestamp()[1]
                if stamp >= 0:  # -1: the record has no timestamp (TIMESTAMP_NOT_AVAILABLE)
                    stamps[tp] = stamp
                if len(seen) >= distinct:
                    break

    def lag(self, stats: dict[str, Any]) -> list[Lag]:
        """The consumer lag of each partition from librdkafka's statistics."""
        positions = {(tp.topic, tp.partition): offset for tp, offset in self.consumed.items()}
        return consumer_lag(stats, positions, self._read_committed, self.consumed_ts)

    def paused_lag(self, consumer: Consumer, assignment: set[TopicPartition]) -> list[Lag] | None:
        """The lag of paused partitions, whose ends librdkafka's statistics no longer follow: asked
        of the brokers (about once a second, only while the task is paused). ``None`` when they
        did not answer: the last figures stay."""
        lag: list[Lag] = []
        now = time.time()
        for tp in sorted(assignment):
            position = self.consumed.get(tp, self.committed.get(tp))
            if position is None:
                continue
            try:
                _, end = consumer.get_watermark_offsets(
                    KafkaTopicPartition(tp.topic, tp.partition), timeout=1.0, cached=False
                )
            except KafkaException:
                return None
            records = max(0, end - position)
            lag.append(
                (
                    tp.topic,
                    tp.partition,
                    records,
                    time_lag(records, self.consumed_ts.get((tp.topic, tp.partition)), now),
                )
            )
        return lag

    # -- commits ----------------------------------------------------------------------------------

    def commit_due(self) -> bool:
        """Whether to commit now: asked for, or ``offset.flush.interval.ms`` since the last commit."""
        return self.commit_requested or time.monotonic() >= self._next_commit

    def reschedule(self) -> None:
        """The next commit is due ``offset.flush.interval.ms`` from now."""
        self._next_commit = time.monotonic() + self._flush_interval_s

    def commit_started(self) -> None:
        """A commit starts (or is skipped): a request is answered, the next one is an interval away."""
        self.commit_requested = False
        self.reschedule()

    def uncommitted(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """Step 5's offsets: the next offset of each of ``partitions`` consumed from."""
        consumed = self.consumed
        return {tp: consumed[tp] for tp in partitions if tp in consumed}

    def to_commit(
        self, safe: Mapping[TopicPartition, int], current: Mapping[TopicPartition, int]
    ) -> list[KafkaTopicPartition]:
        """Of what ``pre_commit`` returned as ``safe``, the offsets to commit: partitions it was
        asked about whose offset changed since the last commit."""
        committed = self.committed
        return [
            KafkaTopicPartition(tp.topic, tp.partition, offset)
            for tp, offset in safe.items()
            if tp in current and committed.get(tp) != offset
        ]

    def mark_committed(self, offsets: list[KafkaTopicPartition]) -> None:
        for tp in offsets:
            self.committed[TopicPartition(tp.topic, tp.partition)] = tp.offset
