"""The S3 sink task: records → objects named by (topic, partition, start offset), committed on rotation.

Guarantees, in the order the runtime drives them:

1. :meth:`S3SinkTask.put` hands each Kafka partition's records to its
   :class:`~connectors.sink.s3.writer.TopicPartitionWriter`, which streams them into multipart
   uploads (at most ``s3.part.size`` buffered per open object, at most
   ``partitioner.max.open.files`` open objects per partition) and completes the uploads when a
   rotation rule fires, on ``s3.upload.threads`` background threads so encoding goes on meanwhile.
2. :meth:`S3SinkTask.pre_commit` returns, per partition, only the offset after the last record
   that is inside a completed object, so the consumer group never passes data that is not in
   the bucket.
3. After a crash or a rebalance the new owner consumes from that offset and, because the writer's
   decisions depend only on the records, rewrites the same keys with the same bytes: each record
   ends up in exactly one object.

A storage failure in ``put`` is raised as ``RetriableError`` (throttling, 5xx, connection) or
``ConnectError`` (access denied, missing bucket). A retried ``put`` skips the records it already
buffered, so a retry never duplicates data inside an object.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from sluice.connectors.api import (
    ConnectError,
    SinkRecord,
    SinkRecordBatch,
    SinkTask,
    SinkTaskContext,
    TopicPartition,
    UnusableRawValues,
    UnwritableRecordError,
    ValueFormat,
)
from sluice.connectors.s3_common.formats import FormatSettings, InvalidRawJson, ParquetFormat, RecordFormat, make_format
from sluice.connectors.s3_common.layout import ObjectLayout
from sluice.connectors.s3_common.parquet_rows import UnfitValue
from sluice.connectors.s3_common.partitioners import Partitioner, extractor_reads_values, make_partitioner
from sluice.connectors.s3_common.storage import ObjectStorage, S3Storage
from sluice.connectors.sink.s3.batches import Keys, decoded, split_batch
from sluice.connectors.sink.s3.config import S3SinkConfig
from sluice.connectors.sink.s3.envelope_lines import EnvelopeLines
from sluice.connectors.sink.s3.typed_values import TypedValues
from sluice.connectors.sink.s3.writer import Columns, TopicPartitionWriter, WriterSettings
from sluice.converters.json_documents import first_malformed

log = logging.getLogger(__name__)


class S3SinkTask(SinkTask):
    """Writes consumed records to S3 objects; one :class:`TopicPartitionWriter` per partition.

    :meth:`start`, :meth:`open`, :meth:`put`, :meth:`pre_commit` and :meth:`close` run on the task
    thread; :meth:`stop` may come from a control thread and waits for a running ``put``.
    """

    version = "0.1.0"

    #: JSON lines and Parquet take the consumed bytes when nothing that places a record reads its
    #: value (set in :meth:`start`, see :meth:`_split`): JSON lines copies schemaless JSON and the
    #: payloads of JSON with schemas, Parquet reads both and Avro into columns. Every other case
    #: reads ``values`` in :meth:`_split`, before any writer changes state, so values that do not
    #: decode leave nothing half-written; so are keys, when a sidecar stores them.
    value_format = ValueFormat.CONNECT

    #: Builds the storage from the configuration; tests replace it with an in-memory bucket.
    storage_factory: ClassVar[Callable[[S3SinkConfig], ObjectStorage] | None] = None

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.writers: dict[TopicPartition, TopicPartitionWriter] = {}
        self.storage: ObjectStorage | None = None
        self._config: S3SinkConfig | None = None
        self._format: RecordFormat | None = None
        self._keys_format: RecordFormat | None = None
        self._partitioner: Partitioner | None = None
        self._layout = ObjectLayout()
        self._settings: WriterSettings | None = None
        self._uploader: ThreadPoolExecutor | None = None
        self._raw_json = False
        self._typed = TypedValues()  # reads JSON with schemas and Avro into columns for Parquet
        self._lines = EnvelopeLines()  # JSON with schemas as JSON lines: the payloads' bytes
        self._key_lines = EnvelopeLines()  # the same for keys, into a JSON keys sidecar

    # -- SPI --------------------------------------------------------------------------------------

    def start(self, config: Mapping[str, Any], context: SinkTaskContext) -> None:
        """Parse the configuration, build format and partitioner, check the bucket. Thread: the task thread."""
        self.context = context
        cfg = S3SinkConfig.from_task_config(config)
        self._config = cfg
        self._format = make_format(
            cfg.format_settings(
                parquet_row_group_rows=min(cfg.parquet_row_group_records, cfg.flush_size),
                json_decimal_format=cfg.json_decimal_format,
            )
        )
        self._keys_format = make_format(
            FormatSettings(
                format=cfg.keys_format_class,
                compression=cfg.s3_compression_type,
                json_decimal_format=cfg.json_decimal_format,
            )
        )
        self._partitioner = make_partitioner(cfg.partitioner_settings())
        self._layout = cfg.layout()
        self._settings = _writer_settings(cfg, self._partitioner)
        # Raw JSON bytes can go straight to the objects when the format takes them and nothing
        # that decides where a record goes looks into its value.
        self._raw_json = (
            self._format.name in ("json", "parquet")
            and not self._partitioner.reads_values
            and not (
                cfg.rotate_interval_ms > 0
                and not self._partitioner.time_based
                and extractor_reads_values(cfg.timestamp_extractor)
            )
        )
        # Parquet parses every raw value into columns, refusing what is not JSON, and reads JSON with
        # schemas and Avro into typed columns (typed_values.py); JSON lines copies schemaless JSON
        # into objects, checking it first, and the payloads of JSON with schemas when they are what
        # decoding writes (envelope_lines.py). Raw typed values come with raw keys, decoded only if
        # read: only a keys sidecar reads them.
        self.value_format = ValueFormat.RAW_TYPED if self._raw_json else ValueFormat.CONNECT
        self._lines = EnvelopeLines(cfg.json_decimal_format)
        self._key_lines = EnvelopeLines(cfg.json_decimal_format)
        if cfg.s3_upload_threads > 0:
            self._uploader = ThreadPoolExecutor(cfg.s3_upload_threads, thread_name_prefix="s3-upload")
            if isinstance(self._format, ParquetFormat):
                self._format.executor = self._uploader  # row groups of raw JSON encode there too
        factory = type(self).storage_factory
        if factory is not None:
            self.storage = factory(cfg)
        else:
            storage = S3Storage(cfg.connection())
            storage.check_bucket()  # a missing bucket or bad credentials fail the task now, by name
            self.storage = storage
        log.info(
            "Writing %s objects to bucket %s under %r (flush.size=%d)",
            self._format.name,
            cfg.s3_bucket_name,
            cfg.topics_dir,
            cfg.flush_size,
        )

    def open(self, partitions: Sequence[TopicPartition]) -> None:
        """New partitions start with an empty writer. Thread: the task thread."""
        with self._lock:
            for tp in partitions:
                old = self.writers.pop(tp, None)
                if old is not None:
                    old.abort()

    def put(self, records: SinkRecordBatch) -> None:
        """Buffer/upload the records, partition by partition. Thread: the task thread."""
        if not records:
            return
        given_back: dict[TopicPartition, int] = {}
        with self._lock:
            for tp, cols in self._split(records):
                try:
                    self._writer(tp, cols.topic).write(cols)
                except InvalidRawJson as exc:
                    given_back[tp] = self._give_back(tp, exc)
                except UnfitValue as exc:
                    # Refused before the writer kept any of it: the runtime applies errors.* to
                    # the record and offers the others again (those already buffered are skipped).
                    raise UnwritableRecordError(str(exc), _record_at(records, tp, exc.offset)) from exc
        if given_back:
            raise UnusableRawValues("raw values cannot be written as they were consumed", given_back)

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> Mapping[TopicPartition, int]:
        """The offsets whose records are all in completed objects. Thread: the task thread."""
        safe: dict[TopicPartition, int] = {}
        given_back: dict[TopicPartition, int] = {}
        with self._lock:
            for tp, consumed in offsets.items():
                writer = self.writers.get(tp)
                if writer is None:
                    safe[tp] = consumed
                    continue
                try:
                    writer.check_schedule()
                    writer.drain()
                except InvalidRawJson as exc:
                    given_back[tp] = self._give_back(tp, exc)
                    continue
                except ConnectError as exc:
                    # Not fatal here: the next put or pre-commit resumes the upload.
                    log.warning("Uploading the objects of %s-%d failed: %s", tp.topic, tp.partition, exc)
                offset = writer.safe_offset(consumed)
                if offset is not None:
                    safe[tp] = offset
        if given_back:
            raise UnusableRawValues("raw values cannot be written as they were consumed", given_back)
        return safe

    def end_of_input(self, offsets: Mapping[TopicPartition, int]) -> None:
        """A bounded range (a backfill) ended: upload each partition's open objects now instead of
        aborting them on close as a stream does, whose records would come again. They are the
        objects the stream would have written at their rotation: a key depends only on the start
        offset. Thread: the task thread."""
        with self._lock:
            for tp, writer in self.writers.items():
                if tp in offsets:
                    writer.rotate_all(offsets[tp])
                    writer.drain(wait=True)

    def close(self, partitions: Sequence[TopicPartition]) -> None:
        """Revoked partitions: abort their uploads; the next owner rewrites them. Thread: the task thread."""
        with self._lock:
            for tp in partitions:
                writer = self.writers.pop(tp, None)
                if writer is not None:
                    writer.abort()

    def stop(self) -> None:
        """Abort every open upload (what is not committed is re-consumed). Never raises. Thread: any."""
        with self._lock:
            for writer in self.writers.values():
                try:
                    writer.abort()
                except Exception:
                    log.warning("Aborting the uploads of %s-%d failed", writer.topic, writer.partition, exc_info=True)
            self.writers.clear()
            if self._uploader is not None:
                self._uploader.shutdown(wait=False)
                self._uploader = None

    # -- helpers ----------------------------------------------------------------------------------

    def _give_back(self, tp: TopicPartition, exc: InvalidRawJson) -> int:
        """A raw value of ``tp`` is not JSON, or a ``null`` the null handling missed (raw values
        come unchecked), or it does not fit its Parquet row group: drop the partition's open
        objects and answer the first offset not in a completed object, which the runtime delivers
        again decoded, so that the converter, ``errors.tolerance`` and ``behavior.on.null.values``
        deal with the bad record. The rewritten objects are the ones the decoded path would have
        written: the layout depends only on the records that reach the writer."""
        writer = self.writers.pop(tp)
        restart = writer.durable
        if restart is None:  # nothing was written: the value cannot have come from this partition
            raise exc
        writer.abort(delete_completed=True)
        log.warning("A value of %s-%d cannot be written as it was consumed: %s", tp.topic, tp.partition, exc)
        return restart

    @property
    def memory_bytes(self) -> int:
        """Bytes the task holds in buffers (for tests and metrics)."""
        return sum(w.memory_bytes for w in self.writers.values())

    def _writer(self, tp: TopicPartition, topic: str) -> TopicPartitionWriter:
        writer = self.writers.get(tp)
        if writer is None:
            if self.storage is None or self._format is None or self._partitioner is None or self._settings is None:
                raise ConnectError("The S3 sink task is not started")
            writer = self.writers[tp] = TopicPartitionWriter(
                topic,
                tp.partition,
                self.storage,
                self._format,
                self._partitioner,
                self._layout,
                self._settings,
                self._keys_format,
                uploader=self._uploader,
            )
        return writer

    def _split(self, records: SinkRecordBatch) -> list[tuple[TopicPartition, Columns]]:
        """The records by Kafka partition, as columns (without building records)."""
        keys = self._keys(records)
        raw = records.raw_values if self._raw_json else None
        wire = records.raw_format
        if raw is not None and wire is not None and not wire.schemaless_json:
            if not isinstance(self._format, ParquetFormat):
                # JSON lines: the payloads of JSON with schemas, if they are what decoding writes.
                lines = self._lines.read(raw, wire)
                if lines is None:
                    return decoded(records, wire, keys)
                payloads, schema = lines
                schemas = [None if p is None else schema for p in payloads]
                return split_batch(records, payloads, raw_schemas=schemas, keys=keys)
            # JSON with schemas or Avro for Parquet: typed now, or a row group at a time on the
            # upload threads when the values visibly share one schema (see typed_values.py).
            typed = self._typed.read(records)
            return split_batch(records, None, typed, keys=keys) if typed is not None else decoded(records, wire, keys)
        if raw is not None and not isinstance(self._format, ParquetFormat):
            bad = first_malformed(raw)
            if bad is not None:  # JSON lines copies the bytes: each must be one JSON document
                raise UnusableRawValues(
                    f"the value at offset {records.offsets[bad]} of {records.original_topic}-"
                    f"{records.partitions[bad]} is not one JSON document",
                    records.first_offsets(),
                )
        return split_batch(records, raw, keys=keys)

    def _keys(self, records: SinkRecordBatch) -> Keys:
        """What a keys sidecar writes of the batch's keys: the payloads of keys with schemas as
        consumed, for a JSON sidecar, when they are what decoding writes (see envelope_lines.py);
        else the keys decoded, read now, so that raw keys that do not decode fail before any
        writer changes. Without a keys sidecar nothing reads them."""
        if self._settings is None or not self._settings.store_keys:
            return Keys(lambda: records.keys)
        raw, wire = records.raw_keys, records.raw_key_format
        if raw is not None and wire is not None and self._keys_format is not None and self._keys_format.name == "json":
            lines = self._key_lines.read(raw, wire)
            if lines is not None:
                payloads = lines[0]
                return Keys(lambda: payloads, raw=True)
        records.keys  # noqa: B018 - decoded now (see above)
        return Keys(lambda: records.keys)


def _record_at(records: Sequence[SinkRecord], tp: TopicPartition, offset: int | None) -> SinkRecord:
    """The record of ``records`` consumed from ``tp`` at ``offset`` (a refused one: the failure
    path only, where building every record of a batch costs nothing that matters)."""
    for record in records:
        if record.kafka_offset == offset and record.topic_partition == tp:
            return record
    raise ConnectError(f"No record of {tp.topic}-{tp.partition} at offset {offset} in the batch")


def _writer_settings(cfg: S3SinkConfig, partitioner: Partitioner) -> WriterSettings:
    """The writer's rotation, memory and content settings from the sink's configuration."""
    return WriterSettings(
        flush_size=cfg.flush_size,
        rotate_interval_ms=cfg.rotate_interval_ms,
        rotate_schedule_interval_ms=cfg.rotate_schedule_interval_ms,
        max_open_files=cfg.partitioner_max_open_files,
        part_size=cfg.s3_part_size,
        null_values=cfg.behavior_on_null_values,
        tombstone_partition=cfg.tombstone_encoded_partition,
        store_keys=cfg.store_kafka_keys,
        store_headers=cfg.store_kafka_headers,
        store_timestamps=cfg.store_kafka_timestamps,
        store_offsets=(
            cfg.store_kafka_offsets if cfg.store_kafka_offsets is not None else _may_interleave(partitioner, cfg)
        ),
        timestamp_extractor=cfg.timestamp_extractor,
        timestamp_field=cfg.timestamp_field,
        timezone=cfg.timezone,
    )


def _may_interleave(partitioner: Partitioner, cfg: S3SinkConfig) -> bool:
    """Whether one Kafka partition's objects can interleave offsets (the restore then needs each
    record's offset to merge them back in order): only when records of a partition spread over
    several open directories, which a time-based partitioner with rotate.interval.ms never does
    (a bucket change commits every open object first)."""
    if partitioner.per_kafka_partition:
        return False
    return not (partitioner.time_based and cfg.rotate_interval_ms > 0)
