"""Sink runner: where each partition is consumed from and what is committed — the start position
of assigned partitions, rewinds, tracking the consumed offsets and the commit of what the task
says is durable (steps 5 and 6 of :class:`~worker.runners.sink.SinkTaskRunner`)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sluice.connectors.api import RetriableError, TopicPartition, UnusableRawValues
from sluice.worker.runners.sink_redelivery import SinkRedelivery
from sluice.worker.task_metrics import Lag, time_lag

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


class SinkOffsetTracking(SinkRedelivery):
    """Consumed and committed offsets (a base class of :class:`~worker.runners.sink.SinkTaskRunner`)."""

    commit_requested: bool
    _consumer_config: dict[str, Any]
    _committed: dict[TopicPartition, int]
    _consumed_ts: dict[tuple[str, int], int]
    _next_commit: float
    _flush_interval_s: float
    #: A pre_commit() raised RetriableError: the outage it reported ends at the next one that succeeds.
    _commit_outage: bool = False

    def _assign_from_committed(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        """Assign ``partitions`` at their committed offsets, and one without a commit at the start or
        end that ``auto.offset.reset`` names, as the Java consumer starts.

        Left to itself librdkafka looks the committed offsets up too, but for a partition without
        one it waits 100 ms before asking for the reset position: every new sink connector started
        a tenth of a second late. Only for the eager assignment protocol (the cooperative one
        assigns incrementally); if the lookup fails, librdkafka does it its own way.
        """
        start = _RESET_TO.get(str(self._consumer_config.get("auto.offset.reset", "earliest")).lower())
        strategy = str(self._consumer_config.get("partition.assignment.strategy", ""))
        if start is None or "cooperative" in strategy or not partitions:
            return
        try:
            committed = consumer.committed(partitions, timeout=_COMMITTED_TIMEOUT_S)
        except KafkaException as exc:
            log.debug("Looking up the committed offsets failed (%s); the consumer does it itself", exc)
            return
        for p, c in zip(partitions, committed, strict=True):
            p.offset = c.offset if c.offset >= 0 and c.error is None else start
        consumer.assign(partitions)

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._rewinds.update(offsets)

    def _apply_rewinds(self) -> None:
        if not self._rewinds or self._consumer is None:
            return
        for tp, offset in self._rewinds.items():
            if tp in self.assignment:
                self._consumer.seek(KafkaTopicPartition(tp.topic, tp.partition, offset))
                self._consumed[tp] = offset
        self._rewinds.clear()

    def _track_consumed(self, messages: list[Any]) -> None:
        """Remember the next offset of each partition in the batch, and its last record's timestamp
        (for the lag in seconds).

        Messages of one partition arrive in offset order, so scanning from the end finds each
        partition's last offset; with one assigned partition that is a single step.
        """
        consumed = self._consumed
        stamps = self._consumed_ts
        distinct = max(1, len(self.assignment))
        seen: set[tuple[str, int]] = set()
        for m in reversed(messages):
            tp = (m.topic(), m.partition())
            if tp not in seen:
                seen.add(tp)
                self.active_topics.add(tp[0])
                consumed[TopicPartition(*tp)] = m.offset() + 1
                stamp = m.timestamp()[1]
                if stamp >= 0:  # -1: the record has no timestamp (TIMESTAMP_NOT_AVAILABLE)
                    stamps[tp] = stamp
                if len(seen) >= distinct:
                    break

    def _paused_lag(self, consumer: Consumer) -> None:
        """The lag of paused partitions, whose ends librdkafka's statistics no longer follow: ask
        the brokers (about once a second, only while the task is paused)."""
        lag: list[Lag] = []
        now = time.time()
        for tp in sorted(self.assignment):
            position = self._consumed.get(tp, self._committed.get(tp))
            if position is None:
                continue
            try:
                _, end = consumer.get_watermark_offsets(KafkaTopicPartition(tp.topic, tp.partition), timeout=1.0, cached=False)
            except KafkaException:
                return  # keep the last figures; the next second asks again
            records = max(0, end - position)
            lag.append((tp.topic, tp.partition, records, time_lag(records, self._consumed_ts.get(tp), now)))
        self.metrics.lag = lag

    def _commit(self, partitions: Sequence[TopicPartition]) -> list[KafkaTopicPartition]:
        """Steps 5 and 6: ask the task what is durable and commit exactly that (returned)."""
        self.commit_requested = False
        self._next_commit = time.monotonic() + self._flush_interval_s
        consumer = self._consumer
        if consumer is None or not partitions:
            return []
        current = {tp: self._consumed[tp] for tp in partitions if tp in self._consumed}
        if not current:
            return []
        try:
            safe = self.task.pre_commit(current)
        except UnusableRawValues as unusable:
            self._redeliver_decoded(unusable)  # nothing is committed past what is consumed again
            return []
        except RetriableError as exc:
            # The task could not make its writes durable (a write it sent in the background failed
            # and retrying it failed too): an outage like a put()'s, and nothing is committed.
            self.retry.total_retries += 1
            self._system_unreachable(self._sink_system, exc)
            self._commit_outage = True
            return []
        if self._commit_outage:  # what failed at the last commit is durable now: the system answers
            self._commit_outage = False
            self.outages.reached(self._sink_system)
        to_commit = [
            KafkaTopicPartition(tp.topic, tp.partition, offset)
            for tp, offset in safe.items()
            if tp in current and self._committed.get(tp) != offset
        ]
        if not to_commit:
            self.metrics.committed(True, 0.0, skipped=True)
            return []
        started = time.monotonic()
        # Skipped and reported records covered by these offsets must be in the DLQ first.
        if self.dlq is not None and not self.dlq.flush(30.0):
            log.warning("Dead letter queue records still pending; offsets not committed this time")
            self.metrics.committed(False, time.monotonic() - started)
            return []
        try:
            consumer.commit(offsets=to_commit, asynchronous=False)
        except KafkaException as exc:
            err = exc.args[0]
            if err.code() == KafkaError._NO_OFFSET:
                return []
            # A failed commit only means more duplicates after a crash; the next interval retries.
            log.warning("Offset commit failed: %s", err.str())
            self.metrics.committed(False, time.monotonic() - started)
            return []
        for tp in to_commit:
            self._committed[TopicPartition(tp.topic, tp.partition)] = tp.offset
        self.metrics.committed(True, time.monotonic() - started)
        return to_commit
