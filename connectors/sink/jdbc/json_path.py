"""The JDBC sink's raw fast path: a chunk of undecoded values as COPY data, and the helper
thread that sends a chunk while the task returns to the runtime.

The values are read into Arrow columns by the format the value converter writes: schemaless JSON
(:func:`.pgjson.read_json_lines`), JSON with schemas (the payloads, typed by the schema as the
converter would, :mod:`sluice.converters.connect_arrow`) or Avro (the native Avro reader).

With ``pk.mode=record_key`` the raw keys are read the same way (JSON with schemas or Avro; a
struct's fields, or a primitive key as one column), and their columns come first.

An upsert keeps the last record of each key, as the ordinary path does; a tombstone (null value)
is left out, or with ``delete.enabled`` deletes its key's row when it is the key's last record
(:func:`takes_tombstones` says when the ordinary path's result is the same).

The rows and columns are those the ordinary path would write; a batch the fast path cannot take
exactly goes the ordinary way (see :mod:`sluice.connectors.sink.jdbc.task` for the pipelining).
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from sluice.connectors.api import Schema, SinkRecordBatch, Type, WireFormat
from sluice.connectors.jdbc_common.errors import describe
from sluice.connectors.jdbc_common.types import timezone
from sluice.connectors.sink.jdbc.config import DEFAULT_KEY_FIELD, InsertMode, JdbcSinkConfig, PkMode
from sluice.connectors.sink.jdbc.pgjson import COPY_BINARY, JsonColumns, keyed_columns, read_json_lines, typed_columns
from sluice.connectors.sink.jdbc.rows import TopicRecords
from sluice.connectors.sink.jdbc.tables import TableManager
from sluice.connectors.sink.jdbc.writer import DELETED_COLUMN, CopyTransaction, PipelinedWriter
from sluice.converters import json_arrow
from sluice.converters.connect_arrow import EnvelopeReader, read_avro_batch, typed_table

log = logging.getLogger(__name__)

JSON_RETRY_AFTER = 20  # batches the JSON fast path sits out after one it could not take
# How JsonConverter envelopes begin, and the member that ends them (a primitive key's payload).
_ENVELOPE, _PAYLOAD = b'{"schema":', b',"payload":'


class JsonFastPath:
    """Renders chunks as COPY data from their consumed JSON bytes, and counts what it rendered.

    After a batch it could not take it sits out a few batches before trying again (a topic it
    never fits costs little).
    """

    def __init__(self) -> None:
        #: Whether the task's settings allow the fast path (set by the task's ``start``).
        self.enabled = False
        #: Batches still to sit out.
        self.skip = 0
        #: Records sent this way (a failed send is rewritten the ordinary way) …
        self.records = 0
        #: … of which as COPY binary data.
        self.records_binary = 0
        # Parse JSON-with-schemas envelopes of values and of keys, each distinct schema once (made
        # on the first such batch).
        self._envelopes: EnvelopeReader | None = None
        self._key_envelopes: EnvelopeReader | None = None

    def sit_out(self) -> None:
        """Leave the next few batches to the ordinary path."""
        self.skip = JSON_RETRY_AFTER

    def read(self, raws: Sequence[bytes | None], batch: SinkRecordBatch, cfg: JdbcSinkConfig) -> JsonColumns | None:
        """Raw values of ``batch`` (all or some of them) as columns, by the format they are in
        (``None``: decode them)."""
        wire = batch.raw_format
        if wire is None or wire.schemaless_json:
            return read_json_lines(raws)
        table = self._typed(raws, wire, batch.writer_schema, keys=False)
        return None if table is None else typed_columns(table, timezone(cfg.db_timezone) is _dt.UTC)

    def read_keys(
        self, raws: Sequence[bytes | None] | None, batch: SinkRecordBatch, cfg: JdbcSinkConfig
    ) -> tuple[JsonColumns, list[str]] | None:
        """Raw keys of ``batch`` (all or some of them) as typed columns and the key columns' names
        as the ordinary path names them (``rows.py``): the ``pk.fields`` (or every field) of a struct
        key, or the one ``pk.fields`` name (``__connect_key`` by default) of a primitive key.
        ``None``: decode them (schemaless keys among others)."""
        wire = batch.raw_key_format
        if not raws or wire is None or wire.schemaless_json or None in raws:
            return None
        table = self._typed(raws, wire, batch.key_writer_schema, keys=True)
        if table is not None:
            wanted = list(cfg.pk_fields) or list(table.column_names)
        else:
            wanted = [cfg.pk_fields[0] if cfg.pk_fields else DEFAULT_KEY_FIELD]
            table = self._primitive_keys(raws, wire, batch.key_writer_schema, wanted[0])
        columns = None if table is None else typed_columns(table, timezone(cfg.db_timezone) is _dt.UTC)
        return None if columns is None else (columns, wanted)

    def _typed(
        self, raws: Sequence[bytes | None], wire: WireFormat, writer_schema: Callable[[int], Any] | None, *, keys: bool
    ) -> Any | None:
        """Envelopes of struct payloads or Avro records as a typed Arrow table (``None``: not such)."""
        if wire.kind == "json" and wire.schemas:
            read = self._envelope_reader(wire, keys=keys).read(raws)
            return None if read is None else read[0]
        if wire.kind == "avro":
            return read_avro_batch(raws, writer_schema)
        return None

    def _envelope_reader(self, wire: WireFormat, *, keys: bool) -> EnvelopeReader:
        reader = self._key_envelopes if keys else self._envelopes
        if reader is None or reader.replace_null_with_default != wire.replace_null_with_default:
            reader = EnvelopeReader(wire.replace_null_with_default)
            if keys:
                self._key_envelopes = reader
            else:
                self._envelopes = reader
        return reader

    def _primitive_keys(
        self, raws: Sequence[bytes | None], wire: WireFormat, writer_schema: Callable[[int], Any] | None, name: str
    ) -> Any | None:
        """Keys of a primitive schema as a typed table of one column, ``name``: read as the field of
        a struct (JSON: each payload's text as the member of an object; Avro: the body as a record
        of one field, whose encoding is the field's)."""
        if wire.kind == "avro":
            if writer_schema is None:
                return None
            lookup = writer_schema

            def as_record(schema_id: int) -> Any:
                return {"type": "record", "name": "Key", "fields": [{"name": "key", "type": lookup(schema_id)}]}

            table = read_avro_batch(raws, as_record)
            return None if table is None else table.rename_columns([name])
        if not (wire.kind == "json" and wire.schemas):
            return None
        return primitive_envelopes(raws, self._envelope_reader(wire, keys=True), name)

    def try_prepare(
        self, group: TopicRecords, cfg: JdbcSinkConfig, writer: PipelinedWriter, tables: TableManager
    ) -> CopyTransaction | None:
        """:meth:`prepare`, which never fails a batch the ordinary path can write: an
        error there is logged, the batch goes the ordinary way, and so do the next few."""
        try:
            return self.prepare(group, cfg, writer, tables)
        except Exception as exc:  # noqa: BLE001 - any failure falls back to the ordinary path, logged
            log.warning("The JSON fast path failed, writing the batch the ordinary way: %s", describe(exc))
            self.skip = JSON_RETRY_AFTER
            return None

    def prepare(
        self, group: TopicRecords, cfg: JdbcSinkConfig, writer: PipelinedWriter, tables: TableManager
    ) -> CopyTransaction | None:
        """The chunk as COPY data (binary or CSV) rendered from the consumed JSON bytes (:mod:`.pgjson`), or
        ``None`` when this batch must take the ordinary path (which then decodes the values).

        Rows and columns are those the ordinary path would write: one column per field of the
        objects, the key columns first (``pk.mode=record_key``: the key's, then the value fields
        but those; ``record_value``: the ``pk.fields``, or every field), the last record of each key
        for upserts, in the batch's order. Tombstones are left out (the task counts and logs them
        once the chunk commits) or, for upserts with ``delete.enabled``, delete the row of a key
        whose last record they are, in the same transaction (:meth:`.PipelinedWriter.prepare_copy_changes`).
        """
        if not undecoded_json(group):
            return None
        if self.skip:
            self.skip -= 1
            return None
        batch = group.batch
        table = cfg.table_name(group.topic)
        types = writer.column_types(table)
        raws = batch.raw_values  # type: ignore[union-attr]
        if types is None or raws is None:  # the table's types are read by the first ordinary write
            return None
        live = None  # the records that are not tombstones (None: every one)
        if None in raws:
            live = [i for i, raw in enumerate(raws) if raw is not None]
            if not takes_tombstones(batch, cfg, values=bool(live)):  # type: ignore[arg-type]
                return None
        parsed, key_fields = self._columns(batch, cfg, live)  # type: ignore[arg-type]
        if parsed is None:
            self.skip = JSON_RETRY_AFTER
            return None
        fields = [f for f in parsed.fields if f != DELETED_COLUMN]
        if cfg.pk_mode is PkMode.RECORD_VALUE:
            key_fields = list(cfg.pk_fields) or list(fields)
            if any(k not in fields for k in key_fields):
                return None  # the ordinary path names the missing field
            fields = key_fields + [f for f in fields if f not in key_fields]
        names = tables.known_names(table, fields)
        if names is None:  # a field the table lacks (auto.evolve) or a table not seen yet
            return None
        if cfg.insert_mode is InsertMode.UPSERT and not parsed.unique(key_fields):
            parsed = parsed.last_of_each(key_fields)
        column_types = {f: types.get(n, "") for f, n in zip(fields, names)}
        copy = None if parsed is None else copy_changes(parsed, fields, column_types)
        if copy is None:
            self.skip = JSON_RETRY_AFTER
            return None
        data, options, deletes = copy
        keys = names[: len(key_fields)]
        if deletes:
            prepared: CopyTransaction | None = writer.prepare_copy_changes(table, names, keys, data, options)
        else:
            prepared = writer.prepare_copy_data(table, names, keys, data, options, cfg.insert_mode)
        if prepared is not None:
            self.records += len(group)
            if options == COPY_BINARY:
                self.records_binary += len(group)
        return prepared

    def tombstones_left_out(self, groups: list[TopicRecords]) -> dict[str, list[int]]:
        """Per topic, the offsets of the tombstones in ``groups``, a chunk this path sent with
        ``delete.enabled=false``, which left them out (for the task to count and log once it commits;
        the ordinary path, which counts its own, sends no chunk with tombstones)."""
        found: dict[str, list[int]] = {}
        for group in groups:
            raws = group.batch.raw_values if group.batch is not None else None
            if raws is not None and None in raws:
                offsets = group.offsets
                found.setdefault(group.topic, []).extend(offsets[i] for i, raw in enumerate(raws) if raw is None)
        return found

    def _columns(
        self, batch: SinkRecordBatch, cfg: JdbcSinkConfig, live: list[int] | None
    ) -> tuple[JsonColumns | None, list[str]]:
        """The batch's columns (the key's first for ``pk.mode=record_key``) and the key columns
        among them (``[]`` for the other modes: :meth:`prepare` picks them). ``live``: the records
        that are not tombstones (``None``: every one); the tombstones are left out, or with
        ``delete.enabled`` are rows marked deleted (:func:`.pgjson.keyed_columns`)."""
        raws, key_raws = batch.raw_values, batch.raw_keys
        assert raws is not None
        deletes = live is not None and cfg.delete_enabled
        if live is not None:
            raws = [raws[i] for i in live]
            if key_raws is not None and not deletes:
                key_raws = [key_raws[i] for i in live]
        values = self.read(raws, batch, cfg) if raws else None  # none: only tombstones, as deletes
        if (values is None and raws) or cfg.pk_mode is not PkMode.RECORD_KEY:
            return values, []
        keys = self.read_keys(key_raws, batch, cfg)
        if keys is None:
            return None, []
        key_columns, key_fields = keys
        return keyed_columns(key_columns, key_fields, values, live if deletes else None), key_fields


def takes_tombstones(batch: SinkRecordBatch, cfg: JdbcSinkConfig, *, values: bool) -> bool:
    """Whether a batch with tombstones comes this way, the result being the ordinary path's: with
    ``delete.enabled``, in ``upsert`` mode (the last record of each key upserts or deletes its row;
    ``insert`` mode applies the runs of records and of tombstones in turn); else, the tombstones
    left out, when some record is not one (``values``), in ``upsert`` mode or for values with
    schemas (in ``insert`` mode the ordinary path writes each run between tombstones apart, with
    the fields of its own records when schemaless)."""
    if cfg.delete_enabled:
        return cfg.insert_mode is InsertMode.UPSERT
    wire = batch.raw_format
    schemas = wire is not None and not wire.schemaless_json
    return values and (cfg.insert_mode is InsertMode.UPSERT or schemas)


def copy_changes(parsed: JsonColumns, fields: list[str], types: dict[str, str]) -> tuple[bytes, str, bool] | None:
    """:meth:`.JsonColumns.copy_data` of ``fields``, and whether it ends with
    :data:`~.writer.DELETED_COLUMN` (when a row is marked deleted: a key's last record was a tombstone)."""
    if not parsed.has_deletes():
        copy = parsed.copy_data(fields, types)
        return None if copy is None else (*copy, False)
    copy = parsed.copy_data([*fields, DELETED_COLUMN], {**types, DELETED_COLUMN: "bool"})
    return None if copy is None else (*copy, True)


def primitive_envelopes(raws: Sequence[bytes | None], reader: EnvelopeReader, name: str) -> Any | None:
    """JsonConverter envelopes of a primitive schema as a typed table of one column, ``name``, or
    ``None``: unless every envelope starts with the first one's bytes up to its payload, the
    payload texts become the member ``name`` of one object each, which the native parser reads
    (refusing any payload that is not a primitive written alone) and the schema types."""
    first = raws[0]
    assert first is not None
    cut = first.rfind(_PAYLOAD)  # a primitive payload holds no such text: the last one is the envelope's
    if cut < 0 or not first.startswith(_ENVELOPE) or not first.endswith(b"}"):
        return None
    schema = reader.schema(first[len(_ENVELOPE) : cut])
    if schema is None or schema.type is Type.STRUCT:
        return None
    prefix = first[: cut + len(_PAYLOAD)]
    start = len(prefix)
    if not all(raw.startswith(prefix) and raw.endswith(b"}") for raw in raws):  # type: ignore[union-attr]
        return None
    member = b"{" + orjson.dumps(name) + b":"
    table = json_arrow.read_flat_objects([member + raw[start:] for raw in raws])  # type: ignore[index]
    if table is None:
        return None
    return typed_table(table, Schema.struct([(name, schema)]), reader.replace_null_with_default)


def undecoded_json(group: TopicRecords) -> bool:
    """Whether ``group`` is a whole batch with its raw JSON values."""
    batch = group.batch
    return batch is not None and batch.raw_values is not None


class PreparedChunk:
    """A chunk rendered for :meth:`JdbcSinkTask._send`: its records and the writer's statements."""

    __slots__ = ("groups", "statements")

    def __init__(self, groups: list[TopicRecords], statements: Any) -> None:
        self.groups = groups
        self.statements = statements


class HelperJob:
    """One chunk's run on the task's :class:`Helper` thread."""

    __slots__ = ("groups", "_sent", "_done", "_send", "_resets", "_context")

    def __init__(
        self, groups: list[TopicRecords], send: Callable[[list[TopicRecords], int], bool], resets: int
    ) -> None:
        self.groups = groups
        self._sent = False
        self._done = threading.Event()
        self._send, self._resets = send, resets
        self._context = contextvars.copy_context()  # the helper logs with the task's [connector|task-N] context

    def run(self) -> None:
        """Helper thread: send the chunk (a failure leaves it to the task thread, logged)."""
        try:
            self._sent = self._context.run(self._send, self.groups, self._resets)
        except Exception:  # a bug: the task thread writes the chunk the ordinary way
            log.exception("The JSON fast path's helper failed; writing the batch the ordinary way")
        finally:
            self._done.set()

    def result(self) -> bool:
        """Whether the chunk was sent (its outcome is then the task's chunk in flight)."""
        self._done.wait()
        return self._sent

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the helper; ``True`` if it is done."""
        return self._done.wait(timeout)

    def done(self) -> bool:
        return self._done.is_set()


class Helper:
    """The thread a task's :class:`HelperJob` s run on, one at a time: started once, not per
    chunk (starting a thread costs a tenth of a millisecond and more while the task thread holds
    the GIL). A daemon: a worker that exits never waits for it."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[HelperJob | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="jdbc-sink-json", daemon=True)
        self._thread.start()

    def submit(self, job: HelperJob) -> HelperJob:
        self._jobs.put(job)
        return job

    def close(self) -> None:
        """End the thread once the job it may be running is done (without waiting for it)."""
        self._jobs.put(None)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            job.run()
