"""Drives a :class:`~connectors.api.SourceTask`: poll → transform → convert → produce → store offsets.

The runner holds its other parts as collaborators, one module each: :class:`SourceOffsets`
(``source_offsets``: offsets polled and not yet stored, when to commit), :class:`SourceFailures`
(``source_errors``: delivery reports and what happens when records cannot go out, with the retry
and tolerance operator) and :class:`SourceTopics` (``source_topics``: scope, creation and use of
topics). Its lifecycle is :class:`~worker.runners.base.WorkerTask`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from itertools import repeat
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from sluice.connectors.api import (
    ConnectError,
    Converter,
    DataError,
    HeaderConverter,
    LocalFiles,
    RetriableError,
    Serialization,
    SourceRecord,
    SourceRecordBatch,
    SourceTask,
)
from sluice.connectors.api.metrics import ReportsFailure, ReportsMetrics
from sluice.offsets import OffsetStore, StoreOffsetReader
from sluice.worker.config.connector_scope import TopicScope
from sluice.worker.config.local_paths import NO_LOCAL_FILES
from sluice.worker.errors import DeadLetterQueue, ErrorHandlingConfig, Stage
from sluice.worker.observability.outages import DEFAULT_DEGRADED_AFTER_MS
from sluice.worker.observability.tracing import BatchTracer, Step, source_attributes
from sluice.worker.runners.base import TaskStatusListener, WorkerTask
from sluice.worker.runners.source_context import SourceTaskContextImpl
from sluice.worker.runners.source_errors import Outgoing, SourceFailures, Transform
from sluice.worker.runners.source_offsets import SourceOffsets
from sluice.worker.runners.source_topics import SourceTopics
from sluice.worker.runners.source_transactions import ExactlyOnce, SourceTransactions
from sluice.worker.runners.tapping import tap_source
from sluice.worker.status import ConnectorTaskId, TargetState
from sluice.worker.topic_creation import TopicCreator

log = logging.getLogger(__name__)


class SourceTaskRunner(WorkerTask):
    """Runs a source task with at-least-once delivery.

    Delivery order, each step only after the one before it:

    1. ``poll()`` the task for records: a list of them or a batch.
    2. Apply the transformation chain; a record a transform drops is done.
    3. Convert keys, values and headers to bytes with the connector's converters (unless the task
       returned them serialized, as the runtime offered through its context's ``serialization``).
    4. Hand every record to the producer (asynchronous: librdkafka batches and sends them).
    5. Remember the last ``source_offset`` polled of each ``source_partition`` as its pending offset.
    6. Every ``offset.flush.interval.ms``, and when stopping: snapshot the pending offsets, wait
       until the producer has delivered everything it was handed (``flush``), and only when every
       record was acknowledged write the snapshot to the offset store, then call ``task.commit()``.

    A delivery failure fails the task before any offset that covers the failed record is written,
    so a restart resumes from the last stored offsets: nothing is lost, and duplicates come only
    from the interval after the last commit. With exactly-once delivery (``transactions``, on a
    distributed worker with ``exactly.once.source.support=enabled``) steps 4-6 become
    :mod:`~worker.runners.source_transactions`' order: the producer fences older instances of the
    task before it starts, records go into a transaction, and at each ``transaction.boundary`` the
    offsets are written into the same transaction, which commits both or neither. Delivery reports are requested for errors only, so the
    happy path costs no Python callback per record.

    A poll takes one path, list or batch: steps 2-3 for all its records at once (a batch of one
    topic that nothing needs as records: a column at a time), then a tight produce loop. Only when
    that conversion fails does it go record by record, under ``errors.*``.

    One turn of the loop is :meth:`iteration` (steps 1-6); :meth:`send` is steps 2-5 for what one
    poll returned and :meth:`commit_offsets` step 6, so a test drives the runner with records of
    its own and without its thread (``producer_factory`` builds the producer :meth:`initialize`
    creates; a test may wrap it).
    """

    def __init__(
        self,
        task_id: ConnectorTaskId,
        task: SourceTask,
        task_config: Mapping[str, Any],
        *,
        listener: TaskStatusListener,
        initial_state: TargetState,
        producer_config: Mapping[str, Any],
        offset_store: OffsetStore,
        key_converter: Converter,
        value_converter: Converter,
        header_converter: HeaderConverter,
        transform: Transform | None = None,
        offset_flush_interval_ms: int = 60_000,
        offset_flush_timeout_ms: int = 5_000,
        errors: ErrorHandlingConfig | None = None,
        dlq: DeadLetterQueue | None = None,
        degraded_after_ms: int = DEFAULT_DEGRADED_AFTER_MS,
        topic_creator: TopicCreator | None = None,
        local_files: LocalFiles = NO_LOCAL_FILES,
        topic_scope: TopicScope | None = None,
        producer_factory: Callable[[dict[str, Any]], Producer] = Producer,
        exactly_once: ExactlyOnce | None = None,
    ) -> None:
        super().__init__(task_id, listener, initial_state, kind="source", degraded_after_ms=degraded_after_ms)
        self.task = task
        self._local_files = local_files  # what the task may open (connector.allowed.paths); no grant: nothing
        self.task_config = dict(task_config)
        self._producer_config, self._producer_factory = dict(producer_config), producer_factory
        self._offset_store = offset_store
        self._key_converter, self._value_converter = key_converter, value_converter
        self._transform = transform
        self._flush_timeout_s = offset_flush_timeout_ms / 1000
        self._producer: Producer | None = None
        self._wants_commit_record = type(task).commit_record is not SourceTask.commit_record
        # Records go out as polled (no transform or callback needs them as records): batches may be
        # converted by column, and the task may be offered to serialize them itself.
        self._as_polled = transform is None and not self._wants_commit_record
        self._serialization: Serialization | None = None
        self.records_produced = self.records_polled = 0
        self.errors, self.dlq = (errors if errors is not None else ErrorHandlingConfig()), dlq
        #: Offsets polled and not yet stored, and when the next commit is due.
        self.offsets = SourceOffsets(task_id.connector, offset_flush_interval_ms / 1000)
        #: The gate to the topics records go to (scope, creation, use).
        self.topics = SourceTopics(self.active_topics, topic_scope, topic_creator)
        #: Delivery reports and what happens when records cannot go out (DLQ, record-by-record paths).
        self.failures = SourceFailures(
            task_id, task, (key_converter, value_converter, header_converter), transform, self.topics,
            errors=self.errors, dlq=dlq, stop_event=self._stopping,
            commit_record=task.commit_record if self._wants_commit_record else None,
        )  # fmt: skip
        self.retry = self.failures.retry  #: the retry and tolerance operator (``errors.*``), shared with failures
        self._source_system = f"the system {type(task).__name__} reads from"
        self._reports_metrics = isinstance(task, ReportsMetrics)
        #: Exactly-once delivery (:mod:`~worker.runners.source_transactions`): ``None`` is at least once.
        self.transactions = SourceTransactions.of(exactly_once, str(task_id), self._flush_timeout_s)
        self._requests = self.transactions.requests if self.transactions else None
        self._in_flight: tuple[Future[int | None], bool, float] | None = None  # the commit being made
        self._commit_before_poll = type(task).commit is not SourceTask.commit  # else it overlaps the next poll

    def error_metrics(self) -> dict[str, int]:
        return self.retry.metrics()

    # -- lifecycle (runner thread) ----------------------------------------------------------------

    def initialize(self) -> None:
        """Create the producer, start the DLQ, and start the task (offering it the converters'
        wire formats when its own bytes may go out as they are)."""
        config = dict(self._producer_config)
        config["error_cb"] = self._on_client_error
        self._watch_kafka(config)
        if self._wants_commit_record:
            config["delivery.report.only.error"] = False
        else:
            config["on_delivery"] = self.failures.on_delivery
        try:
            self._producer = self._producer_factory(config)
        except KafkaException as exc:
            raise ConnectError(f"Invalid producer configuration: {exc.args[0].str()}") from exc
        if self.dlq is not None:
            self.dlq.start()
        if self.transactions is not None:
            # Fence older instances first, then read what they committed: nothing can change it now.
            self.transactions.start(self._producer)
            self._offset_store.read_to_end(self._flush_timeout_s * 6)
        reader = StoreOffsetReader(self._offset_store, self.id.connector)
        self._serialization = self._offered_serialization()
        context = SourceTaskContextImpl(self.id, reader, self._serialization, self._local_files, self._requests)
        self.task.start(self.task_config, context)
        self.offsets.reschedule()

    def _offered_serialization(self) -> Serialization | None:
        """What the converters write, offered to the task when its own bytes may go out as they are:
        nothing needs its records as Connect data on the way, and both converters declare a format."""
        if not self._as_polled:
            return None
        key, value = self._key_converter.wire_format(), self._value_converter.wire_format()
        if key.kind == "opaque" or value.kind == "opaque":
            return None
        return Serialization(key, value)

    def _on_stop_requested(self) -> None:
        self.task.stop()

    def _while_paused(self) -> None:
        # The task's own metrics (a CDC slot's growing lag, say) stay current while it is paused,
        # and what they find may fail it (ReportsFailure).
        if self._reports_metrics:
            self.metrics.ask_task(self.task, time.monotonic())
            if isinstance(self.task, ReportsFailure):
                failure = self.task.failure()
                if failure is not None:
                    raise failure

    def close(self) -> None:
        """Store the offsets of everything delivered (unless failed), then close the clients."""
        try:
            if self._producer is not None and not self.failed:
                self.commit_offsets()
        finally:
            self.topics.close()  # its admin client goes now, on this thread
            if self.transactions is not None:
                self.transactions.close()
            if self._producer is not None:
                self._producer.flush(self._flush_timeout_s)
                self._producer = None
            if self.dlq is not None:
                self.dlq.close(self._flush_timeout_s)

    # -- delivery reports -------------------------------------------------------------------------

    def _on_client_error(self, err: KafkaError) -> None:
        if err.fatal():
            self.failures.delivery_error = err
        elif not self._kafka_unreachable(err):
            log.warning("Kafka producer: %s", err.str())

    # -- main loop --------------------------------------------------------------------------------

    def execute(self) -> None:
        while not self.stopping:
            if not self.await_unpaused():
                break
            self.iteration()

    def iteration(self) -> None:
        """One turn of the main loop: poll (step 1), :meth:`send` what came (2-5), and
        :meth:`commit_offsets` (6) when an interval has passed."""
        producer = self._producer
        assert producer is not None, "initialize() first"
        if self._in_flight is not None and self._commit_before_poll:
            # SourceTask.commit() means "everything polled so far is stored": not once it polled again.
            self._settle_commit()
        started = time.monotonic()
        try:
            records = self.task.poll()
        except RetriableError as exc:
            # Logged by the tracker: when the outage starts, in summaries, and when it ends.
            log.debug("Retriable error from poll(), polling again: %s", exc)
            self._system_unreachable(self._source_system, exc)
            self.retry.total_retries += 1
            records = None
            self._stopping.wait(0.1)
        except Exception as exc:
            raise self.retry.unrecoverable(Stage.TASK_POLL, self.failures.task_class, exc) from exc
        else:
            self.outages.reached(self._source_system)
        self.failures.check_delivery()
        if records and not self._unfenced():
            # Out of contact with the group, possibly frozen mid-loop: the task may already run
            # elsewhere. Drop the batch; its offsets were never stored, so its next owner polls it again.
            return
        if records:
            poll_s = time.monotonic() - started
            produced = self.records_produced
            self.records_polled += len(records)
            tracer = self.tracer
            if tracer is None:
                self.send(records)
            else:
                self._send_traced(records, poll_s, tracer)
            self.metrics.batch(len(records), self.records_produced - produced, poll_s)
        else:
            producer.poll(0)
        if self._reports_metrics and started >= self.metrics.next_own:
            self.metrics.ask_task(self.task, started)
        if self.transactions is not None:
            self._transaction_boundary(bool(records))
        elif self.offsets.commit_due(time.monotonic()):
            self.commit_offsets()

    def _transaction_boundary(self, polled: bool) -> None:
        """Step 3 of exactly-once delivery: commit (or abort) where ``transaction.boundary`` says."""
        transactions, producer = self.transactions, self._producer
        assert transactions is not None and producer is not None
        self._transaction_action(transactions.due(polled, self._requests))

    def _transaction_action(self, action: str | None) -> None:
        if action == "commit":
            self.commit_offsets()
        elif action == "abort":
            assert self.transactions is not None and self._producer is not None
            self._settle_commit()
            self.transactions.abort(self._producer)
            self.offsets.take()  # the aborted records' offsets are never stored

    def send(self, polled: Sequence[SourceRecord]) -> None:
        """Steps 2-5 for what one poll returned: a list of records or a batch, the same way (a list
        cut where its task asked to commit or abort after a record, with ``transaction.boundary=connector``)."""
        if self._requests is not None and self._requests.at_record and not isinstance(polled, SourceRecordBatch):
            for part, action in self._requests.split(polled):
                self._hand_over(part, None, self._outgoing(part, None))
                self._transaction_action(action)
            return
        batch = polled if isinstance(polled, SourceRecordBatch) else None  # the columns, when there are
        self._hand_over(polled, batch, self._outgoing(polled, batch))

    def _send_traced(self, polled: Sequence[SourceRecord], poll_s: float, tracer: BatchTracer) -> None:
        """:meth:`send` with each step timed for the batch's trace (``produce``: handed to the
        producer, which delivers asynchronously)."""
        polled_at = time.time_ns()
        batch = polled if isinstance(polled, SourceRecordBatch) else None
        out = self._outgoing(polled, batch)
        converted = time.time_ns()
        self._hand_over(polled, batch, out)
        steps: list[Step] = [("poll", polled_at, None), ("convert", converted, None), ("produce", time.time_ns(), None)]
        topics = [out.topic] if out.topic is not None else out.topics or ()
        tracer.record(polled_at - int(poll_s * 1e9), steps, source_attributes(polled, len(out.values), topics))

    def _outgoing(self, polled: Sequence[SourceRecord], batch: SourceRecordBatch | None) -> Outgoing:
        """Steps 2 and 3."""
        out: Outgoing | None
        if batch is not None and batch.serialized:
            out = self._as_serialized(batch)
        else:
            out = self._serialize(polled, batch)
        if out is None:
            # Only now go record by record, to isolate the bad record(s) of this poll.
            out = self.failures.serialize_each(polled)
        return out

    def _hand_over(self, polled: Sequence[SourceRecord], batch: SourceRecordBatch | None, out: Outgoing) -> None:
        """Steps 4 and 5."""
        producer = self._producer
        assert producer is not None
        if out.values:
            if self.transactions is not None:
                self._settle_commit()
                self.transactions.begin(producer)
                self.transactions.size += len(out.values)
            self._produce(out)
            self.records_produced += len(out.values)
            tap_source(self.id, out, self._key_converter, self._value_converter)
        self.offsets.polled(polled, batch)
        producer.poll(0)

    def _as_serialized(self, batch: SourceRecordBatch) -> Outgoing:
        """Step 3 done by the task: its bytes go out as they are."""
        if self._serialization is None:
            raise ConnectError(
                f"{self.failures.task_class} returned serialized records, but the runtime did not offer to "
                "produce them as they are (its context's serialization is None)"
            )
        options = _partition_options(batch.partitions)
        return Outgoing(batch.topic, batch.topics, batch.keys, batch.values, options, batch)

    def _serialize(self, polled: Sequence[SourceRecord], batch: SourceRecordBatch | None) -> Outgoing | None:
        """Steps 2 and 3 for the whole poll at once; ``None`` when anything failed (the caller then
        goes record by record). A batch of one topic that no transform or callback needs as records
        is converted a column at a time, without building a record object."""
        dropped: list[SourceRecord] = []
        try:
            if batch is not None and self._as_polled and batch.topic is not None:
                return self._convert_columns(batch, batch.topic)
            records: Sequence[SourceRecord] = polled if batch is None else batch.records()
            origins: list[SourceRecord] | None = None
            if self._transform is not None and self._wants_commit_record:
                records, origins = self._transform_noting_drops(records, dropped)
            elif self._transform is not None:
                records = self._transform(list(records))
            out = self._convert_records(records, origins)
        except Exception:  # noqa: BLE001 - the caller then goes record by record
            return None
        for record in dropped:
            self.task.commit_record(record, None)
        return out

    def _transform_noting_drops(
        self, records: Sequence[SourceRecord], dropped: list[SourceRecord]
    ) -> tuple[list[SourceRecord], list[SourceRecord]]:
        """The chain applied record by record for a task that overrides ``commit_record``, which
        hears of each record it polled, as in Connect: the records out and, for each, the polled
        record it came from; a record the chain filters out goes to ``dropped``."""
        transform = self._transform
        assert transform is not None
        kept: list[SourceRecord] = []
        origins: list[SourceRecord] = []
        for record in records:
            out = transform([record])
            if out:
                kept.extend(out)
                origins.extend([record] * len(out))
            else:
                dropped.append(record)
        return kept, origins

    def _convert_columns(self, batch: SourceRecordBatch, topic: str) -> Outgoing:
        n = len(batch)
        values = self._value_converter.from_connect_batch(topic, [batch.value_schema] * n, batch.values)
        keys = None
        if batch.keys is not None or batch.key_schema is not None:
            key_values = batch.keys if batch.keys is not None else [None] * n
            keys = self._key_converter.from_connect_batch(topic, [batch.key_schema] * n, key_values)
        return Outgoing(topic, None, keys, values, _partition_options(batch.partitions), batch)

    def _convert_records(
        self, records: Sequence[SourceRecord], origins: Sequence[SourceRecord] | None = None
    ) -> Outgoing:
        if not records:
            return Outgoing("", None, None, [], None, records)
        topic = records[0].topic
        topics = None if all(r.topic == topic for r in records) else [r.topic for r in records]
        keys, values = self._convert(records, topics is None)
        failures = self.failures
        options = None
        if failures.commit_record is not None or any(
            r.partition is not None or r.timestamp is not None or r.headers for r in records
        ):
            polled = records if origins is None else origins  # what commit_record is called with
            options = [failures.options(r, failures.convert_headers(r), p) for r, p in zip(records, polled)]
        return Outgoing(topic if topics is None else None, topics, keys, values, options, records)

    def _produce(self, out: Outgoing) -> None:
        """Step 4: hand every record to the producer. The tight loops stop at the first full queue
        or refused record; the rest goes :meth:`SourceFailures.produce_carefully`."""
        producer = self._producer
        assert producer is not None
        produce = producer.produce
        keys, values = out.keys, out.values
        if out.topic is not None and out.options is None:  # the common case: one topic, nothing else
            topic = out.topic
            self.topics.use(topic)
            if keys is None:
                for i, v in enumerate(values):
                    try:
                        produce(topic, v)
                    except (BufferError, KafkaException):
                        self.failures.produce_carefully(producer, out, i)
                        return
            else:
                for i, (k, v) in enumerate(zip(keys, values)):
                    try:
                        produce(topic, v, k)
                    except (BufferError, KafkaException):
                        self.failures.produce_carefully(producer, out, i)
                        return
            return
        topics: Iterable[str] = out.topics if out.topics is not None else repeat(out.topic or "")
        rows = zip(topics, keys if keys is not None else repeat(None), values, out.options or repeat(None))
        last: str | None = None
        use = self.topics.use
        for i, (t, k, v, o) in enumerate(rows):
            if t is not last:  # an identity check: tasks reuse one topic string
                use(t)
                last = t
            try:
                if o is None:
                    produce(t, v, k)
                else:
                    produce(t, v, k, **o)
            except (BufferError, KafkaException):
                self.failures.produce_carefully(producer, out, i)
                return

    def _convert(
        self, records: Sequence[SourceRecord], same_topic: bool
    ) -> tuple[list[bytes | None] | None, list[bytes | None]]:
        topic = records[0].topic
        try:
            if same_topic:
                keys = None
                if any(r.key is not None or r.key_schema is not None for r in records):
                    keys = self._key_converter.from_connect_batch(
                        topic, [r.key_schema for r in records], [r.key for r in records]
                    )
                values = self._value_converter.from_connect_batch(
                    topic, [r.value_schema for r in records], [r.value for r in records]
                )
            else:
                kc = self._key_converter.from_connect_data
                vc = self._value_converter.from_connect_data
                keys = [kc(r.topic, r.key_schema, r.key) for r in records]
                values = [vc(r.topic, r.value_schema, r.value) for r in records]
        except DataError:
            raise
        except Exception as exc:
            raise DataError(f"Converter failed on a record for topic {topic!r}: {exc}") from exc
        return keys, values

    # -- offsets ----------------------------------------------------------------------------------

    def commit_offsets(self) -> bool:
        """Step 6: store the pending offsets once everything before them is acknowledged."""
        producer = self._producer
        assert producer is not None
        if self.transactions is not None:
            return self._commit_transaction(producer, self.transactions)
        started = time.monotonic()
        offsets, failures = self.offsets, self.failures
        offsets.reschedule(started)
        snapshot = offsets.take()
        remaining = producer.flush(self._flush_timeout_s)
        if self.dlq is not None and not self.dlq.flush(self._flush_timeout_s):
            remaining += 1  # skipped records are not in the DLQ yet: their offsets must wait
        if remaining > 0 or failures.delivery_error is not None:
            # Pending again, under anything newer (there is nothing newer: this thread is the only
            # producer); the next interval tries again.
            offsets.put_back(snapshot)
            failures.check_delivery()
            # While Kafka is known to be out of reach the outage's own lines say why, once.
            log.log(
                logging.DEBUG if self.outages.is_open(self._kafka) else logging.WARNING,
                "Failed to flush, timed out while waiting for producer to flush outstanding %d messages; "
                "offsets not committed this time",
                remaining,
            )
            self.metrics.committed(False, time.monotonic() - started)
            return False
        if snapshot:
            self.outages.reached(self._kafka)  # everything delivered: Kafka answers
        if snapshot and not self._unfenced():
            log.warning("Not storing source offsets of %s: the worker is out of contact with its group", self.id)
            self.metrics.committed(False, time.monotonic() - started)
            return False
        if snapshot:
            self._offset_store.put(self.id.connector, list(snapshot.values()))
            log.debug("Committed offsets for %d source partitions", len(snapshot))
        self.metrics.committed(True, time.monotonic() - started, skipped=not snapshot)
        try:
            self.task.commit()
        except Exception:
            log.exception("Exception in SourceTask.commit(); offsets were stored")
        return True

    def _commit_transaction(self, producer: Producer, transactions: SourceTransactions) -> bool:
        """Step 3 of exactly-once delivery (:mod:`~worker.runners.source_transactions`): the pending
        offsets into the open transaction, and commit it while the task polls on (the last one, when
        stopping, at once); a failure fails the task."""
        self._settle_commit()
        started = time.monotonic()
        self.failures.check_delivery()  # a record the broker refused: the transaction must not commit
        if self.dlq is not None and not self.dlq.flush(self._flush_timeout_s):
            self.metrics.committed(False, time.monotonic() - started)
            return False  # skipped records are not in the DLQ yet: their offsets wait
        if not self._unfenced():
            if self.stopping:  # stopped because of it: the transaction is left to be aborted
                log.warning("%s: out of contact with the group, its open transaction is not committed", self.id)
                return False
            raise ConnectError(f"{self.id} did not commit: the worker is out of contact with its group")
        snapshot = self.offsets.take()
        if self.stopping:
            self._committed(transactions.commit(producer, snapshot), bool(snapshot), started)
        else:
            in_flight = transactions.commit_later(producer, snapshot)
            self._in_flight = None if in_flight is None else (in_flight, bool(snapshot), started)
        return True

    def _settle_commit(self) -> None:
        """Wait for the commit in flight, if any; its failure fails the task here."""
        in_flight, self._in_flight = self._in_flight, None
        if in_flight is not None:
            future, stored, started = in_flight
            self._committed(future.result(), stored, started)

    def _committed(self, size: int | None, stored: bool, started: float) -> None:
        if size is not None:
            self.metrics.transaction(size)
        if stored:
            self.outages.reached(self._kafka)
        self.metrics.committed(True, time.monotonic() - started, skipped=not stored)
        try:
            self.task.commit()
        except Exception:
            log.exception("Exception in SourceTask.commit(); the transaction was committed")


def _partition_options(partitions: Sequence[int | None] | None) -> list[dict[str, Any] | None] | None:
    if partitions is None:
        return None
    return [None if p is None else {"partition": p} for p in partitions]
