"""Drives a :class:`~connectors.api.SinkTask`: consume → convert → transform → put → commit.

The runner holds its other parts as collaborators, one module each, as Kafka Connect's
``WorkerSinkTask`` holds its ``RetryWithToleranceOperator``: :class:`SinkOffsets` (``sink_offsets``:
consumed and committed offsets, rewinds, when to commit), :class:`RawValuesRedelivery`
(``sink_redelivery``: raw values, and those given back), :class:`SinkFailures` (``sink_errors``:
what happens when records cannot be used, with the retry and tolerance operator) and
:class:`SinkBatchBuilder` (``sink_batches``: consumed messages → the batch ``put`` receives). Its
lifecycle is :class:`~worker.runners.base.WorkerTask`'s.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from sluice.connectors.api import (
    ConnectError,
    Converter,
    DataError,
    ErrantRecordReporter,
    HeaderConverter,
    LocalFiles,
    RetriableError,
    SinkRecordBatch,
    SinkTask,
    TopicPartition,
    UnusableRawValues,
    UnwritableRecordError,
)
from sluice.worker.config.local_paths import NO_LOCAL_FILES
from sluice.worker.errors import DeadLetterQueue, ErrorHandlingConfig, Stage, ToleranceExceeded
from sluice.worker.observability.outages import DEFAULT_DEGRADED_AFTER_MS
from sluice.worker.observability.tracing import BatchTracer, Step, commit_attributes, sink_attributes
from sluice.worker.runners.base import TaskStatusListener, WorkerTask
from sluice.worker.runners.sink_batches import ConsumedMessages, SinkBatchBuilder, one_topic
from sluice.worker.runners.sink_errors import (
    RefusedBatch,
    SinkErrantRecordReporter,
    SinkFailures,
    Transform,
    batches_of,
)
from sluice.worker.runners.sink_offsets import SinkOffsets
from sluice.worker.runners.sink_redelivery import RawValuesRedelivery
from sluice.worker.runners.tapping import tap_sink
from sluice.worker.status import ConnectorTaskId, TargetState

log = logging.getLogger(__name__)

__all__ = ["SinkErrantRecordReporter", "SinkTaskContextImpl", "SinkTaskRunner"]


#: Consumer errors for a subscribed topic that does not exist: not a reason to fail the task.
_MISSING_TOPIC = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})
#: The batch ``put()`` gets when a poll came back short (:meth:`SinkTaskRunner.caught_up`).
_NOTHING = SinkRecordBatch.of([])


class SinkTaskContextImpl:
    """The context a sink task sees; every call comes from the task thread."""

    def __init__(self, runner: SinkTaskRunner) -> None:
        self._runner = runner

    @property
    def connector_name(self) -> str:
        return self._runner.id.connector

    @property
    def task_id(self) -> int:
        return self._runner.id.task

    @property
    def local_files(self) -> LocalFiles:
        return self._runner.local_files

    def assignment(self) -> set[TopicPartition]:
        return set(self._runner.assignment)

    def pause(self, *partitions: TopicPartition) -> None:
        self._runner.pause_partitions(partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        self._runner.resume_partitions(partitions)

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        self._runner.rewind(offsets)

    def request_commit(self) -> None:
        self._runner.offsets.commit_requested = True

    @property
    def errant_record_reporter(self) -> ErrantRecordReporter | None:
        return self._runner.failures.errant_record_reporter


class SinkTaskRunner(WorkerTask):
    """Runs a sink task with at-least-once delivery.

    Delivery order, each step only after the one before it:

    1. ``consume()`` a batch of messages from the assigned partitions.
    2. Convert keys, values and headers into Connect data.
    3. Apply the transformation chain.
    4. ``put()`` the records into the task (a ``RetriableError`` re-offers the same batch after a
       backoff, with consumption paused); when ``consume()`` returned fewer messages than it
       may, ``put()`` an empty batch too (:meth:`caught_up`), so a task that holds batches back
       writes them.
    5. Every ``offset.flush.interval.ms``, on ``request_commit()``, before partitions are revoked
       and when stopping: call ``pre_commit()`` with the next offset of everything consumed; the
       task makes its data durable and returns the offsets that are safe.
    6. Commit exactly those offsets to the consumer group ``connect-<connector>``, synchronously.

    A crash between 4 and 6 re-delivers the records since the last commit: duplicates, never loss.

    One turn of the loop is :meth:`iteration` (steps 1-6); :meth:`deliver` is steps 2-4 for what
    one ``consume()`` returned and :meth:`commit` steps 5-6, so a test drives the runner with
    messages of its own and without its thread (``consumer_factory`` builds the consumer that
    :meth:`initialize` subscribes; a test may hand in a fake).
    """

    def __init__(
        self,
        task_id: ConnectorTaskId,
        task: SinkTask,
        task_config: Mapping[str, Any],
        *,
        listener: TaskStatusListener,
        initial_state: TargetState,
        consumer_config: Mapping[str, Any],
        topics: Sequence[str],
        topics_regex: str | None,
        key_converter: Converter,
        value_converter: Converter,
        header_converter: HeaderConverter,
        transform: Transform | None = None,
        offset_flush_interval_ms: int = 60_000,
        batch_size: int = 2_000,
        errant_record_reporter: ErrantRecordReporter | None = None,
        errors: ErrorHandlingConfig | None = None,
        dlq: DeadLetterQueue | None = None,
        degraded_after_ms: int = DEFAULT_DEGRADED_AFTER_MS,
        local_files: LocalFiles = NO_LOCAL_FILES,
        consumer_factory: Callable[[dict[str, Any]], Consumer] = Consumer,
    ) -> None:
        super().__init__(task_id, listener, initial_state, kind="sink", degraded_after_ms=degraded_after_ms)
        self.task = task
        #: The files the task may open (connector.allowed.paths); without a grant, none.
        self.local_files = local_files
        self.task_config = dict(task_config)
        self._consumer_config = dict(consumer_config)
        self._consumer_factory = consumer_factory
        self._topics, self._topics_regex = list(topics), topics_regex
        # Subscribed to one topic by name: every batch is of that topic, nothing to look at per record.
        self._one_topic = len(self._topics) == 1 and not topics_regex
        self._transform, self._batch_size = transform, batch_size
        self._consumer: Consumer | None = None
        self.assignment: set[TopicPartition] = set()
        self._paused_by_task: set[TopicPartition] = set()
        self._closing = False
        self.records_put = 0
        self.errors = errors if errors is not None else ErrorHandlingConfig()
        self.dlq = dlq
        #: Consumed messages → the batches ``put`` receives, with the task's converters.
        self.batches = SinkBatchBuilder(key_converter, value_converter, header_converter)
        #: Consumed and committed offsets, rewinds, and when the next commit is due.
        offsets = self.offsets = SinkOffsets(self._consumer_config, offset_flush_interval_ms / 1000, self.active_topics)
        #: Raw values (and keys) for a task that asks for them, and those it gives back.
        task_name = type(task).__name__
        self.redelivery = RawValuesRedelivery(task_name, self.batches, offsets, transform=transform)
        #: What happens when records cannot be used (DLQ, record-by-record paths).
        self.failures = SinkFailures(
            task_id, task, self.batches, transform, errors=self.errors, dlq=dlq,
            reporter=errant_record_reporter, stop_event=self._stopping,
        )  # fmt: skip
        #: The retry and tolerance operator (``errors.*``), shared with :attr:`failures`.
        self.retry = self.failures.retry
        self._sink_system = f"the system {task_name} writes to"
        #: A pre_commit() raised RetriableError: the outage it reported ends at the next one that succeeds.
        self._commit_outage = False

    def error_metrics(self) -> dict[str, int]:
        return self.retry.metrics()

    # -- lifecycle (runner thread) ----------------------------------------------------------------

    def initialize(self) -> None:
        """Create the consumer, start the DLQ and the task (:meth:`start_task`), and subscribe."""
        config = dict(self._consumer_config)
        config["error_cb"] = self._on_client_error
        self._watch_kafka(config)
        try:
            self._consumer = consumer = self._consumer_factory(config)
        except KafkaException as exc:
            raise ConnectError(f"Invalid consumer configuration: {exc.args[0].str()}") from exc
        if self.dlq is not None:
            self.dlq.start()
        self.start_task()
        subscription = list(self._topics)
        if self._topics_regex:
            # librdkafka treats a leading ^ as a regex; Connect's topics.regex must match the whole name.
            # A plain group: librdkafka compiles with POSIX regcomp (extended), which refuses "(?:".
            subscription = [f"^({self._topics_regex})$"]
            re.compile(self._topics_regex)
        consumer.subscribe(subscription, on_assign=self.on_assign, on_revoke=self.on_revoke, on_lost=self.on_lost)
        self.offsets.reschedule()

    def start_task(self) -> None:
        """Start the task with its context; then decide whether its batches carry raw values (a
        task may set ``value_format`` in ``start()``)."""
        self.task.start(self.task_config, SinkTaskContextImpl(self))
        self.redelivery.adopt(self.task.value_format)

    def _on_kafka_stats(self, stats_json: str) -> None:
        """Also the consumer lag for ``GET /metrics`` (once per statistics interval, not per batch)."""
        super()._on_kafka_stats(stats_json)
        if self._target is TargetState.PAUSED:
            return  # paused partitions are not fetched, so their ends go stale: _while_paused asks
        try:
            stats = orjson.loads(stats_json)
        except orjson.JSONDecodeError:
            return
        self.metrics.lag = self.offsets.lag(stats)

    def _on_client_error(self, err: KafkaError) -> None:
        if not self._kafka_unreachable(err):
            log.warning("Kafka consumer: %s", err.str())

    def close(self) -> None:
        """Commit and close the assigned partitions (unless failed), close the consumer, stop the task."""
        consumer = self._consumer
        if consumer is None:
            return
        try:
            if self.assignment:
                if not self.failed:
                    self.commit()
                self.task.close(sorted(self.assignment))
        finally:
            # Leaving the group revokes the partitions again; they are committed and closed already.
            self._closing = True
            self.assignment = set()
            try:
                consumer.close()
            finally:
                self._consumer = None
                try:
                    self.task.stop()
                finally:
                    if self.dlq is not None:
                        self.dlq.close()

    # -- rebalance callbacks (the consumer calls them inside consume(), on the runner thread) -------

    def on_assign(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        self.offsets.assign_from_committed(consumer, partitions)
        tps = [TopicPartition(p.topic, p.partition) for p in partitions]
        self.assignment.update(tps)
        self.metrics.partitions = len(self.assignment)
        log.info("Assigned partitions %s", ", ".join(f"{t.topic}-{t.partition}" for t in tps))
        self.task.open(tps)

    def on_revoke(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        tps = [TopicPartition(p.topic, p.partition) for p in partitions]
        if not tps or self._closing:
            return
        try:
            self.commit(tps)
        finally:
            self.task.close(tps)
            self._forget(tps, lost=False)

    def on_lost(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        tps = [TopicPartition(p.topic, p.partition) for p in partitions]
        if self._closing:
            return
        log.warning("Partitions lost without a clean revoke: %s", tps)
        self.task.close(tps)
        self._forget(tps, lost=True)

    def _forget(self, tps: list[TopicPartition], *, lost: bool) -> None:
        self.assignment.difference_update(tps)
        self.offsets.forget(tps, lost=lost)
        self.redelivery.forget(tps)
        self.metrics.partitions = len(self.assignment)

    # -- task context support ---------------------------------------------------------------------

    def pause_partitions(self, partitions: Sequence[TopicPartition]) -> None:
        self._paused_by_task.update(partitions)
        if self._consumer is not None and partitions:
            self._consumer.pause([KafkaTopicPartition(t.topic, t.partition) for t in partitions])

    def resume_partitions(self, partitions: Sequence[TopicPartition]) -> None:
        self._paused_by_task.difference_update(partitions)
        if self._consumer is not None and partitions:
            self._consumer.resume([KafkaTopicPartition(t.topic, t.partition) for t in partitions])

    def rewind(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.offsets.rewind(offsets)

    # -- pause ------------------------------------------------------------------------------------

    def _on_paused(self) -> None:
        if self._consumer is not None and self.assignment:
            self._consumer.pause([KafkaTopicPartition(t.topic, t.partition) for t in self.assignment])

    def _while_paused(self) -> None:
        # Keep calling the consumer so the group does not evict us (max.poll.interval.ms).
        if self._consumer is not None:
            self._consumer.consume(num_messages=1, timeout=0)
            lag = self.offsets.paused_lag(self._consumer, self.assignment)
            if lag is not None:
                self.metrics.lag = lag

    def _on_resumed(self) -> None:
        self._resume_active()

    def _resume_active(self) -> None:
        """Resume the assigned partitions the task has not paused itself."""
        if self._consumer is not None:
            active = self.assignment - self._paused_by_task
            if active:
                self._consumer.resume([KafkaTopicPartition(t.topic, t.partition) for t in active])

    # -- main loop --------------------------------------------------------------------------------

    def execute(self) -> None:
        while not self.stopping:
            if not self.await_unpaused():
                break
            self.iteration()

    def iteration(self) -> None:
        """One turn of the main loop: apply rewinds, consume (step 1), :meth:`deliver` (2-4), and
        :meth:`commit` (5-6) when an interval has passed or the task asked."""
        consumer = self._consumer
        assert consumer is not None, "initialize() first"
        offsets = self.offsets
        if offsets.rewinds:
            offsets.apply_rewinds(consumer, self.assignment)
        tracer = self.tracer
        if tracer is not None:
            self._iteration_traced(consumer, tracer)
            return
        messages = consumer.consume(num_messages=self._batch_size, timeout=0.5)
        if messages:
            self.outages.reached(self._kafka)  # fetched: Kafka answers
            self.deliver(messages)
        if len(messages) < self._batch_size:
            self.caught_up()
        if offsets.commit_due():
            self.commit()

    def _iteration_traced(self, consumer: Consumer, tracer: BatchTracer) -> None:
        """:meth:`iteration` with each step timed for the batch's trace."""
        started = time.time_ns()
        messages = consumer.consume(num_messages=self._batch_size, timeout=0.5)
        if messages:
            self.outages.reached(self._kafka)  # fetched: Kafka answers
            good = self._usable(messages)
            if good:
                consumed = time.time_ns()
                batches = self._converted(good)
                attributes = sink_attributes(good, self.offsets.consumed, len(self.assignment))
                converted = time.time_ns()
                self._put_all(good, batches)
                steps: list[Step] = [
                    ("consume", consumed, None),
                    ("convert", converted, None),
                    ("put", time.time_ns(), None),
                ]
                tracer.record(started, steps, attributes)
        if len(messages) < self._batch_size:
            self.caught_up()
        if self.offsets.commit_due():
            begun = time.time_ns()
            committed = self.commit()
            if committed:
                tracer.commit(begun, time.time_ns(), commit_attributes(committed))

    def deliver(self, messages: list[Any]) -> None:
        """Steps 2-4 for what one ``consume()`` returned (``confluent_kafka.Message`` s, or
        anything with their methods)."""
        good = self._usable(messages)
        if good:
            self._put_all(good, self._converted(good))

    def _usable(self, messages: list[Any]) -> list[Any]:
        """The messages without an error; an error other than the end of a partition or a missing
        topic fails the task."""
        good = [m for m in messages if m.error() is None]
        if len(good) != len(messages):
            for m in messages:
                err = m.error()
                if err is None or err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.code() in _MISSING_TOPIC and not err.fatal():
                    self.failures.topic_missing(m.topic(), err)
                    continue
                where = f"topic {m.topic()!r} partition {m.partition()}"
                raise self.retry.unrecoverable(
                    Stage.KAFKA_CONSUME, "confluent_kafka.Consumer", KafkaException(err), where
                )
        return good

    def _converted(self, good: list[Any]) -> list[tuple[SinkRecordBatch, list[Any]]]:
        """Steps 2 and 3: batches of one topic each, with the messages they came from."""
        self.offsets.track(good, len(self.assignment))
        try:
            batches = self._convert(good)
            if self._transform is not None:
                batches = self._transformed(batches)
        except Exception:  # noqa: BLE001 - any failure of the whole-batch path: record by record, under errors.*
            # Only now go record by record, to isolate the bad record(s) of this poll.
            batches = batches_of(self.failures.convert_each(good), good)
        return batches

    def _convert(self, messages: list[Any]) -> list[tuple[SinkRecordBatch, list[Any]]]:
        """Step 2, one batch per topic (see :class:`SinkBatchBuilder`)."""
        topic = messages[0].topic()
        if not self._one_topic and not one_topic(messages, topic):
            by_topic: dict[str, list[Any]] = {}
            for m in messages:
                by_topic.setdefault(m.topic(), []).append(m)
            return [pair for group in by_topic.values() for pair in self._convert(group)]
        keys = [m.key() for m in messages]
        values = [m.value() for m in messages]
        raw = self.redelivery.format_for(messages)
        batch = self.batches.build(topic, keys, values, ConsumedMessages(messages), raw, self.redelivery.key_format)
        return [(batch, messages)]

    def _transformed(self, batches: list[tuple[SinkRecordBatch, list[Any]]]) -> list[tuple[SinkRecordBatch, list[Any]]]:
        """Step 3: a batch a transform turned into records of several topics is put per topic."""
        transform = self._transform
        assert transform is not None
        out: list[tuple[SinkRecordBatch, list[Any]]] = []
        for batch, consumed in batches:
            result = transform(batch)
            if isinstance(result, SinkRecordBatch):
                out.append((result, consumed))
            elif result:
                out.extend(batches_of(result, consumed))
        return out

    def _put_all(self, good: list[Any], batches: list[tuple[SinkRecordBatch, list[Any]]]) -> None:
        """Step 4 for every batch of one ``consume()``."""
        started, put_before = time.monotonic(), self.records_put
        failures, redelivery = self.failures, self.redelivery
        for batch, consumed in batches:
            if redelivery.rewound(batch):
                continue  # given back by UnusableRawValues: consumed again, decoded
            failures.messages = consumed  # where a refused record's consumed bytes are found
            tap_sink(self.id, batch)
            try:
                self._put_recovering(batch)
            except UnusableRawValues as unusable:
                again = redelivery.give_back(unusable, consumed, self.assignment)
                if again:
                    self._put_decoded(again)
            finally:
                failures.messages = []
        self.metrics.batch(len(good), self.records_put - put_before, time.monotonic() - started)

    def caught_up(self) -> None:
        """Step 4 with no records: ``consume()`` returned fewer messages than it may (nothing
        more waits to be consumed), so ``put()`` gets an empty batch, as Connect's runtime gives
        one for a poll that returned nothing. A task that holds batches back to write them
        together (the JDBC sink) writes them now; waiting for a fuller batch would only add latency."""
        try:
            self._put(_NOTHING)
        except UnusableRawValues as earlier:  # about records of an earlier put
            self.redelivery.redeliver(earlier, self.assignment)
        except RefusedBatch as refused:
            if not isinstance(refused.error, UnwritableRecordError):  # no record of its own to look in
                raise self.retry.unrecoverable(Stage.TASK_PUT, self.failures.task_class, refused.error) from refused
            self.failures.recover([], refused.error, self._put)  # the record it names, under errors.*

    def _put_decoded(self, messages: list[Any]) -> None:
        """Records the task gave back from the batch at hand, put again decoded."""
        self.failures.messages = messages
        try:
            for part, _ in batches_of(self.failures.convert_each(messages), messages):
                self._put_recovering(part)
        except UnusableRawValues as earlier:  # about records of an earlier put after all
            self.redelivery.redeliver(earlier, self.assignment)

    def _put_recovering(self, batch: SinkRecordBatch) -> None:
        """Step 4: :meth:`_put`, recovering from refusals (:meth:`SinkFailures.recover`). A batch
        with raw values that the task refuses is converted record by record first (the refusal may
        be about the raw form)."""
        if not len(batch):
            return
        try:
            self._put(batch)
        except RefusedBatch as refused:
            failures = self.failures
            records = failures.convert_each(failures.messages) if batch.raw_values is not None else list(batch)
            failures.recover(records, refused.error, self._put)

    def _put(self, records: SinkRecordBatch) -> None:
        """``put()``, retried while it raises ``RetriableError`` (consumption paused meanwhile); a
        ``DataError`` raises :class:`RefusedBatch` (nothing of the batch was written)."""
        backoff = 0.1
        paused = False
        try:
            while True:
                try:
                    self.task.put(records)
                    self.records_put += len(records)
                    self.outages.reached(self._sink_system)
                    return
                except RetriableError as exc:
                    self.retry.total_retries += 1
                    if self.stopping:
                        raise ConnectError("Task stopped while retrying put()") from exc
                    # Logged by the tracker: when the outage starts, in summaries, and when it ends.
                    log.debug("put() failed with a retriable error, retrying in %.1fs: %s", backoff, exc)
                    self._system_unreachable(self._sink_system, exc)
                    if not paused and self._consumer is not None and self.assignment:
                        self._consumer.pause([KafkaTopicPartition(t.topic, t.partition) for t in self.assignment])
                        paused = True
                    self._stopping.wait(backoff)
                    if self._consumer is not None:
                        self._consumer.consume(num_messages=1, timeout=0)
                    backoff = min(backoff * 2, 10.0)
                except (ToleranceExceeded, UnusableRawValues):
                    raise  # the errant record reporter failed the task already; the runtime redelivers
                except Exception as exc:
                    if isinstance(exc, DataError):
                        raise RefusedBatch(exc) from exc  # nothing of the batch was written (SinkTask.put)
                    raise self.retry.unrecoverable(Stage.TASK_PUT, self.failures.task_class, exc) from exc
        finally:
            if paused:
                self._resume_active()

    # -- offsets ----------------------------------------------------------------------------------

    def commit(self, partitions: Sequence[TopicPartition] | None = None) -> list[KafkaTopicPartition]:
        """Steps 5 and 6 for ``partitions`` (every assigned one by default): ask the task what is
        durable and commit exactly that (returned)."""
        offsets = self.offsets
        offsets.commit_started()
        consumer = self._consumer
        if partitions is None:
            partitions = sorted(self.assignment)
        if consumer is None or not partitions:
            return []
        current = offsets.uncommitted(partitions)
        if not current:
            return []
        try:
            safe = self.task.pre_commit(current)
        except UnusableRawValues as unusable:
            self.redelivery.redeliver(unusable, self.assignment)  # nothing is committed past what is consumed again
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
        to_commit = offsets.to_commit(safe, current)
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
        offsets.mark_committed(to_commit)
        self.metrics.committed(True, time.monotonic() - started)
        return to_commit
