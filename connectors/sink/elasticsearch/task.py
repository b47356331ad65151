"""The Elasticsearch sink task: records → documents → ``_bulk`` requests, committing only what landed.

Order of events, as the runtime drives them:

1. :meth:`ElasticsearchSinkTask.put` makes sure each topic's index (or data stream) exists, with a
   mapping from the record schema unless ``schema.ignore``; builds the records' actions
   (:mod:`.documents`) and queues them in the :class:`~.bulk.BulkProcessor`, whose lanes send them.
   Records that cannot become documents are dropped (``drop.invalid.message``), reported to the
   dead-letter queue, or fail the task, in that order of preference.
2. When more than ``max.buffered.records`` are queued, put() waits for room, at most
   :data:`ROOM_WAIT_S`; if there is none by then, it pauses every assigned partition and asks for
   an early commit; each pre_commit then checks the buffer and resumes consumption once it has room
   again. Memory stays bounded however slow the cluster is.
3. :meth:`pre_commit` reports refused documents first (``behavior.on.malformed.documents`` warn or
   ignore), then returns, per partition, the offset before which every action is settled; with
   ``flush.synchronously`` it first waits for all of them (at most ``flush.timeout.ms``).
4. :meth:`close` (partitions revoked, or the task stopping) waits for what is in flight, within
   ``flush.timeout.ms`` and at most 30 s; :meth:`stop` drops what is left. What was never acknowledged is consumed
   again by the next owner, and since document ids derive from keys or Kafka coordinates, writing
   it twice leaves the same documents.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from sluice.connectors.api import (
    ConnectError,
    DataError,
    RetriableError,
    SinkRecordBatch,
    SinkTask,
    SinkTaskContext,
    TopicPartition,
    UnwritableRecordError,
    ValueFormat,
)
from sluice.connectors.sink.elasticsearch import envelopes
from sluice.connectors.sink.elasticsearch.bulk import BulkProcessor
from sluice.connectors.sink.elasticsearch.client import FatalHttpError, SearchClient, TransientHttpError
from sluice.connectors.sink.elasticsearch.config import DataStreamType, ElasticsearchSinkConfig
from sluice.connectors.sink.elasticsearch.documents import ActionBuilder, Chunk, Rejected, Target
from sluice.connectors.sink.elasticsearch.mapping import index_name, mapping_for
from sluice.converters import avro_arrow

log = logging.getLogger(__name__)

#: Longest wait in close() for in-flight requests of revoked partitions.
CLOSE_TIMEOUT_S = 30.0
#: Longest wait in put() for room in a full buffer before pausing consumption: one turn of the
#: runner's loop while paused (its consume timeout). A cluster a little slower than the topic then
#: keeps the lanes busy: paused, they ran dry before the next turn resumed consumption, and the
#: sink indexed a third fewer documents per second than with a buffer that never filled.
ROOM_WAIT_S = 0.5


class ElasticsearchSinkTask(SinkTask):
    """Writes records as documents; see the module docstring for the guarantees.

    :meth:`start`, :meth:`put`, :meth:`pre_commit`, :meth:`close` run on the task thread; :meth:`stop`
    may come from a control thread.
    """

    version = "0.1.0"

    #: Builds the HTTP client from the configuration (tests may substitute one).
    client_factory: ClassVar[Any] = SearchClient

    def __init__(self) -> None:
        self._config: ElasticsearchSinkConfig | None = None
        self._processor: BulkProcessor | None = None
        self._builder: ActionBuilder | None = None
        self._targets: dict[str, Target] = {}
        self._ready: set[str] = set()
        self._paused = False
        self._stopped = threading.Event()
        self.tombstones_ignored = 0  # null values not applied, each logged

    # -- SPI ----------------------------------------------------------------------------------------

    def start(self, config: Mapping[str, Any], context: SinkTaskContext) -> None:
        """Parse the configuration and start the sending lanes. Thread: the task thread."""
        self.context = context
        cfg = ElasticsearchSinkConfig.from_task_config(config)
        self._config = cfg
        client = type(self).client_factory(cfg)
        self._client = client
        self._processor = BulkProcessor(cfg, client)
        self._processor.report_refused = getattr(context, "errant_record_reporter", None) is not None
        self._builder = ActionBuilder(cfg, self._processor.lanes)
        if avro_arrow.available() or envelopes.available():
            # Avro values and JsonConverter envelopes then come raw (keys too) and become documents
            # and ids natively (others, and anything the native readers refuse, are decoded).
            self.value_format = ValueFormat.RAW_TYPED
        log.info(
            "Writing documents to %s (write.method=%s, %d lanes, batch.size=%d)",
            ", ".join(cfg.connection_url),
            cfg.write_method.value,
            self._processor.lanes,
            cfg.batch_size,
        )

    def put(self, records: SinkRecordBatch) -> None:
        """Queue the records' actions; pause consumption when the buffer is full. Thread: the task thread."""
        processor, builder = self._require()
        processor.raise_failure()
        processor.process_reports(self._report)
        if not records:
            return
        topic = records.topic
        target = self._target(topic, records)
        built = builder.build(topic, records, target)
        if built.rejected:
            self._handle_rejected(built.rejected)
        if built.skipped:
            self.tombstones_ignored += built.skipped
            log.warning(
                "Ignored %d tombstone(s) (null values) of topic %s (behavior.on.null.values=%s; "
                "with autogenerated ids a tombstone has no document to delete)",
                built.skipped,
                topic,
                self._cfg.behavior_on_null_values.value,
            )
        processor.submit(built)
        limit = self._cfg.max_buffered_records
        if processor.buffered >= limit and not self._paused:
            if processor.wait_for_room(limit, ROOM_WAIT_S, self._report):
                return
            assignment = self.context.assignment()
            if assignment:
                log.info(
                    "%d records buffered (max.buffered.records=%d): pausing consumption until requests complete",
                    processor.buffered,
                    self._cfg.max_buffered_records,
                )
                self.context.pause(*assignment)
                self._paused = True
                self.context.request_commit()  # pre_commit checks the buffer and resumes

    def flush(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Wait until every buffered action is settled (at most ``flush.timeout.ms``). Thread: the task thread."""
        processor, _ = self._require()
        timeout = self._cfg.flush_timeout_ms / 1000
        if not processor.wait_drained(timeout, self._report):
            raise ConnectError(
                f"{processor.buffered} records were not written within flush.timeout.ms={self._cfg.flush_timeout_ms}"
            )

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]:
        """The offsets whose records are all settled. Thread: the task thread."""
        processor, _ = self._require()
        processor.process_reports(self._report)
        processor.raise_failure()
        if self._cfg.flush_synchronously:
            self.flush(offsets)
        else:
            processor.request_flush()
        self._maybe_resume(processor)
        return processor.committable(offsets)

    def close(self, partitions: Sequence[TopicPartition]) -> None:
        """Partitions were revoked: let their in-flight requests finish, then forget them."""
        processor = self._processor
        if processor is None:
            return
        # Bounded well below flush.timeout.ms: a rebalance or shutdown must not hang on a dead cluster.
        timeout = min(self._cfg.flush_timeout_ms / 1000, CLOSE_TIMEOUT_S)
        try:
            if processor.failure is None and not processor.wait_drained(timeout, self._report):
                log.warning("Buffered records were not all written before the partitions were revoked")
        except ConnectError as exc:
            log.warning("Closing partitions after a failure: %s", exc)
        processor.forget(partitions)
        if self._paused:
            remaining = self.context.assignment() - set(partitions)
            if remaining:
                self.context.resume(*remaining)
            self._paused = False

    def stop(self) -> None:
        """Stop the lanes; never raises. Thread: any."""
        self._stopped.set()
        processor = self._processor
        if processor is not None:
            processor.close()

    # -- helpers ------------------------------------------------------------------------------------

    @property
    def _cfg(self) -> ElasticsearchSinkConfig:
        assert self._config is not None
        return self._config

    @property
    def documents_written(self) -> int:
        return self._processor.documents_written if self._processor is not None else 0

    def _require(self) -> tuple[BulkProcessor, ActionBuilder]:
        if self._processor is None or self._builder is None:
            raise ConnectError("The Elasticsearch sink task is not started")
        return self._processor, self._builder

    def _maybe_resume(self, processor: BulkProcessor) -> None:
        if not self._paused:
            return
        if processor.buffered < self._cfg.max_buffered_records:
            assignment = self.context.assignment()
            if assignment:
                self.context.resume(*assignment)
            self._paused = False
            log.info("Buffer has room again (%d records): resuming consumption", processor.buffered)
        else:
            self.context.request_commit()  # look again at the next loop turn

    def _target(self, topic: str, records: SinkRecordBatch) -> Target:
        """Where ``topic`` goes, creating the index or data stream (with a mapping) the first time."""
        target = self._targets.get(topic)
        if target is None:
            cfg = self._cfg
            if cfg.data_stream_type is not DataStreamType.NONE:
                namespace = cfg.data_stream_namespace.replace("${topic}", topic)
                name = index_name(f"{cfg.data_stream_type.value}-{cfg.data_stream_dataset}-{namespace}")
                target = Target(name, data_stream=True)
            else:
                target = Target(index_name(topic))
                if not target.name:
                    raise ConnectError(f"Topic {topic!r} does not give a valid index name; rename it with RegexRouter")
            self._targets[topic] = target
        if target.name not in self._ready:
            self._prepare(topic, target, records)
            self._ready.add(target.name)
        return target

    def _prepare(self, topic: str, target: Target, records: SinkRecordBatch) -> None:
        cfg = self._cfg
        mappings = None
        if not cfg.ignores_schema(topic):
            schemas = records.value_schemas
            schema = next((s for s in schemas if s is not None), None)
            mappings = mapping_for(schema)
            if mappings is None:
                log.info("Topic %r has no struct schema: %s uses dynamic mapping", topic, target.name)
        try:
            if target.data_stream:
                if not self._client.data_stream_exists(target.name):
                    self._client.create_data_stream(target.name, mappings)
                    log.info("Created data stream %s", target.name)
            elif not self._client.index_exists(target.name):
                self._client.create_index(target.name, mappings)
                log.info("Created index %s%s", target.name, " with a mapping from the record schema" if mappings else "")
            elif mappings and self._client.mapping_is_empty(target.name):
                self._client.put_mapping(target.name, mappings)
        except TransientHttpError as exc:
            # The runtime offers the same records again after a backoff, with consumption paused.
            raise RetriableError(f"Cannot reach the cluster to prepare {target.name!r}: {exc}") from exc
        except FatalHttpError as exc:
            raise ConnectError(str(exc)) from exc

    def _handle_rejected(self, rejected: list[Rejected]) -> None:
        reporter = self.context.errant_record_reporter
        for item in rejected:
            record = item.chunk.record(item.index)
            where = f"topic {record.topic!r} partition {record.partition} offset {record.kafka_offset}"
            if self._cfg.drop_invalid_message and not item.null:
                log.warning("Dropping an invalid record at %s (drop.invalid.message=true): %s", where, item.reason)
                continue
            if reporter is None:
                hint = "" if item.null else "; set drop.invalid.message=true or errors.tolerance=all to skip such records"
                raise UnwritableRecordError(f"Cannot write the record at {where}: {item.reason}{hint}", record)
            reporter.report(record, DataError(item.reason))

    def _report(self, chunk: Chunk, index: int, reason: str) -> None:
        reporter = self.context.errant_record_reporter
        if reporter is not None:
            reporter.report(chunk.record(index), DataError(f"The server refused the document: {reason}"))
