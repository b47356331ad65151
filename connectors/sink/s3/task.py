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
    Headers,
    Schema,
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
from sluice.connectors.sink.s3.config import S3SinkConfig
from sluice.connectors.sink.s3.typed_values import LateTable, TypedValues
from sluice.connectors.sink.s3.writer import Columns, TopicPartitionWriter, WriterSettings, null_probe
from sluice.converters.json_documents import first_malformed

log = logging.getLogger(__name__)


class S3SinkTask(SinkTask):
    """Writes consumed records to S3 objects; one :class:`TopicPartitionWriter` per partition.

    :meth:`start`, :meth:`open`, :meth:`put`, :meth:`pre_commit` and :meth:`close` run on the task
    thread; :meth:`stop` may come from a control thread and waits for a running ``put``.
    """

    version = "0.1.0"

    #: JSON lines and Parquet write the consumed JSON bytes when nothing that places a record
    #: reads its value (set in :meth:`start`, see :meth:`_split`); every other case reads
    #: ``values`` in :meth:`_split`, before any writer changes state, so values that do not
    #: decode leave nothing half-written.
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

    # -- SPI --------------------------------------------------------------------------------------

    def start(self, config: Mapping[str, Any], context: SinkTaskContext) -> None:
        """Parse the configuration, build format and partitioner, check the bucket. Thread: the task thread."""
        self.context = context
        cfg = S3SinkConfig.from_task_config(config)
        self._config = cfg
        self._format = make_format(
            cfg.format_settings(parquet_row_group_rows=min(cfg.parquet_row_group_records, cfg.flush_size))
        )
        self._keys_format = make_format(
            FormatSettings(format=cfg.keys_format_class, compression=cfg.s3_compression_type)
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
        # Parquet parses every raw value into columns, refusing what is not JSON; JSON lines copies
        # the bytes into objects and checks them first (_check_raw).
        # Parquet also reads JSON with schemas and Avro into typed columns (typed_values.py).
        parquet = isinstance(self._format, ParquetFormat)
        self.value_format = (
            (ValueFormat.RAW_TYPED if parquet else ValueFormat.RAW_JSON) if self._raw_json else ValueFormat.CONNECT
        )
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
                    log.warning(
                        "Aborting the uploads of %s-%d failed", writer.topic, writer.partition, exc_info=True
                    )
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
        raw = records.raw_values if self._raw_json else None
        wire = records.raw_format
        if raw is not None and wire is not None and not wire.schemaless_json:
            # JSON with schemas or Avro (Parquet only): typed now, or a row group at a time on the
            # upload threads when the values visibly share one schema (see typed_values.py).
            typed = self._typed.read(records)
            return _split_batch(records, None, typed)
        if raw is not None and not isinstance(self._format, ParquetFormat):
            bad = first_malformed(raw)
            if bad is not None:  # JSON lines copies the bytes: each must be one JSON document
                raise UnusableRawValues(
                    f"the value at offset {records.offsets[bad]} of {records.original_topic}-"
                    f"{records.partitions[bad]} is not one JSON document",
                    records.first_offsets(),
                )
        return _split_batch(records, raw)


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


def _split_batch(
    batch: SinkRecordBatch,
    raw: Sequence[bytes | None] | None,
    typed: LateTable | tuple[Any, Schema] | None = None,
) -> list[tuple[TopicPartition, Columns]]:
    """The batch by Kafka partition. With ``raw`` (checked JSON bytes) the converted values and
    their schemas (all ``None``: schemaless) are never read; with ``typed`` (the values as a
    typed table and their schema, or their schema and what reads the table later) they are read
    only by an object that does not take the table; otherwise ``values`` is read here, before any
    writer sees the batch."""
    if isinstance(typed, LateTable):
        return _split_typed(batch, None, typed.schema, typed.read)
    if typed is not None:
        return _split_typed(batch, *typed)
    partitions = batch.partitions
    first = partitions[0]
    topic = batch.original_topic  # offsets are the consumed topic's
    if partitions.count(first) == len(partitions):  # the common case: one partition per batch
        cols = Columns(
            topic=batch.topic,
            partition=first,
            offsets=batch.offsets,
            values=batch.values if raw is None else null_probe(raw),
            schemas=batch.value_schemas if raw is None else (),
            keys=batch.keys,
            timestamps=lambda: batch.timestamps,
            headers=lambda: batch.headers,
            raw=raw,
        )
        return [(TopicPartition(topic, first), cols)]
    indices: dict[int, list[int]] = {}
    for i, p in enumerate(partitions):
        indices.setdefault(p, []).append(i)
    values = batch.values if raw is None else None
    schemas = batch.value_schemas if raw is None else None
    out = []
    for p, idx in indices.items():

        def pick(column: Callable[[], Sequence[Any]], idx: list[int] = idx) -> Callable[[], list[Any]]:
            return lambda: [column()[i] for i in idx]

        timestamps: Callable[[], Sequence[int | None]] = pick(lambda: batch.timestamps)
        headers: Callable[[], Sequence[Headers | None]] = pick(lambda: batch.headers)
        sub_raw = None if raw is None else [raw[i] for i in idx]
        cols = Columns(
            topic=batch.topic,
            partition=p,
            offsets=[batch.offsets[i] for i in idx],
            values=[values[i] for i in idx] if values is not None else null_probe(sub_raw),  # type: ignore[arg-type]
            schemas=[schemas[i] for i in idx] if schemas is not None else (),
            keys=[batch.keys[i] for i in idx],
            timestamps=timestamps,
            headers=headers,
            raw=sub_raw,
        )
        out.append((TopicPartition(topic, p), cols))
    return out


def _split_typed(
    batch: SinkRecordBatch, table: Any, schema: Schema, read_later: Callable[[list[bytes]], Any] | None = None
) -> list[tuple[TopicPartition, Columns]]:
    """The batch by Kafka partition, its values as rows of ``table`` (no nulls: the readers refuse
    tombstones), each partition's rows taken from it; or, with ``read_later``, its raw values
    read into such rows later."""
    partitions = batch.partitions
    raws = batch.raw_values
    assert raws is not None
    indices: dict[int, list[int]] = {}
    if partitions.count(partitions[0]) == len(partitions):  # the common case: one partition per batch
        indices[partitions[0]] = list(range(len(partitions)))
    else:
        for i, p in enumerate(partitions):
            indices.setdefault(p, []).append(i)
    out = []
    for p, idx in indices.items():
        whole = len(idx) == len(partitions)

        def pick(
            column: Callable[[], Sequence[Any]], idx: list[int] = idx, whole: bool = whole
        ) -> Callable[[], Sequence[Any]]:
            return column if whole else lambda: [column()[i] for i in idx]

        cols = Columns(
            topic=batch.topic,
            partition=p,
            offsets=batch.offsets if whole else [batch.offsets[i] for i in idx],
            values=raws if whole else [raws[i] for i in idx],  # never None: all the writer reads of them
            schemas=[schema] * len(idx),
            keys=batch.keys if whole else [batch.keys[i] for i in idx],
            timestamps=pick(lambda: batch.timestamps),
            headers=pick(lambda: batch.headers),
            table=table if whole or table is None else table.take(idx),
            decoded=pick(lambda: batch.values),
            read_later=read_later,
        )
        out.append((TopicPartition(batch.original_topic, p), cols))
    return out
