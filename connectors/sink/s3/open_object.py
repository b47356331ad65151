"""The objects an S3 sink writes: a partition's records by column, and one open object with its sidecars.

An :class:`OpenObject` streams one object (and its keys/headers/timestamps/offsets sidecars) to
multipart uploads as records are appended; :class:`~sluice.connectors.sink.s3.writer.TopicPartitionWriter`
decides which object each record goes to and when objects are committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

from sluice.connectors.api import Headers, Schema, header_data
from sluice.connectors.s3_common.formats import JsonFormat, ObjectWriter, RecordFormat, json_default
from sluice.connectors.s3_common.layout import sidecar_key
from sluice.connectors.s3_common.parquet_format import ParquetObjectWriter
from sluice.connectors.s3_common.parquet_rows import UnfitValue
from sluice.connectors.s3_common.storage import ObjectStorage, ObjectUpload

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WriterSettings:
    """The rotation, memory and content settings of the sink (from its configuration)."""

    flush_size: int
    rotate_interval_ms: int = -1
    rotate_schedule_interval_ms: int = -1
    max_open_files: int = 100
    part_size: int = 25 * 1024 * 1024
    null_values: str = "fail"  # fail | ignore | write
    tombstone_partition: str = "tombstone"
    store_keys: bool = False
    store_headers: bool = False
    store_timestamps: bool = False
    store_offsets: bool = False
    timestamp_extractor: str = "Record"
    timestamp_field: str = "timestamp"
    timezone: str = "UTC"


@dataclass
class Columns:
    """The records of one Kafka partition from one put, by column (keys/headers/timestamps loaded lazily).

    With ``raw`` set, the values are the consumed JSON bytes in ``raw`` (checked by the runtime;
    their values are their schemaless parse) and ``values`` only tells which records are null:
    it holds ``None`` for a null and anything else otherwise, which is all the writer reads of it
    when the partitioner does not look into values. Objects then get the raw bytes
    (:meth:`~connectors.s3_common.formats.ObjectWriter.write_raw_json`).
    """

    topic: str
    partition: int
    offsets: Sequence[int]
    values: Sequence[Any]
    schemas: Sequence[Schema | None]
    keys: Callable[[], Sequence[Any]]
    timestamps: Callable[[], Sequence[int | None]]
    headers: Callable[[], Sequence[Headers | None]]
    raw: Sequence[bytes | None] | None = None
    #: Raw values read into typed columns (JSON with schemas, Avro; see
    #: :meth:`~connectors.s3_common.formats.ObjectWriter.write_table`): the Arrow table, one row per
    #: record, with ``schemas`` their value schema and ``decoded`` the decoded values, for an
    #: object that does not take the table.
    table: Any = None
    decoded: Callable[[], Sequence[Any]] | None = None
    #: Instead of ``table``: what reads ``values`` (the raw bytes, all of the value schema in
    #: ``schemas``) into that table later, a row group at a time on the upload threads
    #: (:meth:`~connectors.s3_common.parquet_format.ParquetObjectWriter.write_typed_raws`).
    read_later: Callable[[list[bytes]], Any] | None = None
    #: Whether ``keys`` gives each key as the JSON bytes of the value decoding it gives (``None``
    #: for a null key), for a JSON keys sidecar: the payloads of keys with schemas, as consumed.
    raw_keys: bool = False


def null_probe(raw: Sequence[bytes | None]) -> Sequence[Any]:
    """``raw`` JSON values with their nulls (a tombstone or the JSON text ``null``) as ``None``.

    The runtime's check guarantees no surrounding whitespace, so ``b"null"`` is the only spelling;
    the common batch without nulls costs two scans in C and no copy.
    """
    if None not in raw and b"null" not in raw:
        return raw
    return [None if v is None or v == b"null" else v for v in raw]


def _pick(column: Sequence[Any], index: Sequence[int] | slice) -> Sequence[Any]:
    if isinstance(index, slice):
        return column[index]
    return [column[i] for i in index]


def _rows_of(table: Any, index: Sequence[int] | slice) -> Any:
    if isinstance(index, slice):
        start, stop, _ = index.indices(table.num_rows)
        return table.slice(start, stop - start)
    return table.take(list(index))


class _Sidecar:
    def __init__(self, upload: ObjectUpload, writer: ObjectWriter, kind: str) -> None:
        self.upload = upload
        self.writer = writer
        self.kind = kind


class OpenObject:
    """One object being written: its upload, its format writer and its sidecars."""

    def __init__(
        self,
        key: str,
        encoded: str,
        start_offset: int,
        storage: ObjectStorage,
        fmt: RecordFormat,
        settings: WriterSettings,
        keys_format: RecordFormat,
        uploader: Executor | None = None,
    ) -> None:
        self.key = key
        self.encoded = encoded
        self.start_offset = start_offset
        self.count = 0
        self.upload = ObjectUpload(storage, key, settings.part_size, uploader)
        self.writer = fmt.writer(self.upload, key)
        self.sidecars: list[_Sidecar] = []
        self._closed = False
        #: The background upload of this object once it is queued (see TopicPartitionWriter.drain).
        self.upload_future: Future[None] | None = None
        for kind, enabled, sidecar_fmt in (
            ("keys", settings.store_keys, keys_format),
            ("headers", settings.store_headers, JSON_LINES),
            ("timestamps", settings.store_timestamps, JSON_LINES),
            ("offsets", settings.store_offsets, JSON_LINES),
        ):
            if enabled:
                skey = sidecar_key(key, fmt.extension, kind, sidecar_fmt.extension)
                upload = ObjectUpload(storage, skey, settings.part_size, uploader)
                self.sidecars.append(_Sidecar(upload, sidecar_fmt.writer(upload, skey), kind))

    def append(self, cols: Columns, index: Sequence[int] | slice, schema: Schema | None) -> None:
        # Storage failures surface here, before any upload takes a record of this batch.
        self.upload.check()
        for sidecar in self.sidecars:
            sidecar.upload.check()
        if cols.raw is not None:
            raws = _pick(cols.raw, index)
            self.writer.write_raw_json(raws)
            self.count += len(raws)
        elif cols.read_later is not None and schema is not None and isinstance(self.writer, ParquetObjectWriter):
            typed_raws = _pick(cols.values, index)
            self.writer.write_typed_raws(typed_raws, schema, cols.read_later)
            self.count += len(typed_raws)
        elif (
            cols.table is not None
            and schema is not None
            and self.writer.write_table(_rows_of(cols.table, index), schema)
        ):
            self.count += len(_pick(cols.offsets, index))
        else:
            values = _pick(cols.values if cols.decoded is None else cols.decoded(), index)
            try:
                self.writer.write(values, schema)
            except UnfitValue as exc:  # nothing of the call is kept: name the record for put()
                exc.offset = cols.offsets[index.start + exc.index if isinstance(index, slice) else index[exc.index]]
                raise
            self.count += len(values)
        for sidecar in self.sidecars:
            if sidecar.kind == "keys":
                keys = _pick(cols.keys(), index)
                if cols.raw_keys:
                    sidecar.writer.write_raw_json(keys)
                else:
                    sidecar.writer.write(keys, None)
            elif sidecar.kind == "headers":
                sidecar.writer.write([encode_headers(h) for h in _pick(cols.headers(), index)], None)
            elif sidecar.kind == "offsets":
                sidecar.writer.write(_pick(cols.offsets, index), None)
            else:
                sidecar.writer.write(_pick(cols.timestamps(), index), None)

    @property
    def memory_bytes(self) -> int:
        """Bytes this object holds in memory (upload buffers and format buffers)."""
        total = self.upload.buffered_bytes + self.writer.pending_bytes
        for sidecar in self.sidecars:
            total += sidecar.upload.buffered_bytes + sidecar.writer.pending_bytes
        return total

    def commit(self) -> None:
        """Finish the format and complete the uploads (sidecars first). Safe to retry."""
        if not self._closed:
            self.writer.close()
            for sidecar in self.sidecars:
                sidecar.writer.close()
            self._closed = True
        for sidecar in self.sidecars:
            sidecar.upload.commit()
        self.upload.commit()

    def abort(self) -> None:
        self.writer.discard()
        for sidecar in self.sidecars:
            sidecar.upload.abort()
        self.upload.abort()

    def delete_if_completed(self, storage: ObjectStorage) -> None:
        """Delete the object (and its sidecars) if its upload completed; after :meth:`abort`.
        Never raises: an object that cannot be deleted (no ``s3:DeleteObject`` permission) stays,
        and its records are then in the bucket twice, which the warning says."""
        for upload in (self.upload, *(sidecar.upload for sidecar in self.sidecars)):
            if upload.committed:
                try:
                    storage.delete_object(upload.key)
                except Exception as exc:  # noqa: BLE001 - best effort, logged: the records are written again anyway
                    log.warning(
                        "Could not delete %s, whose records are written again under other names: "
                        "they are in the bucket twice until it is deleted (%s)",
                        upload.key,
                        exc,
                    )


JSON_LINES = JsonFormat()


def encode_headers(headers: Headers | None) -> list[list[Any]]:
    """Headers as ``[[name, value], ...]``; bytes values as ``{"$bytes": base64}`` so they restore as bytes."""
    if not headers:
        return []
    out: list[list[Any]] = []
    for name, header in headers:
        value = header_data(header)  # a transform (ExtractNewRecordState's add.headers) may attach a schema
        if isinstance(value, (bytes, bytearray, memoryview)):
            value = {"$bytes": json_default(value)}
        out.append([name, value])
    return out
