"""Raw values read into Arrow columns for Parquet objects: JSON with schemas and Avro.

The S3 sink takes a batch's consumed bytes (``value_format`` raw, see
:attr:`~connectors.api.SinkRecordBatch.raw_format`) and, for Parquet, reads them straight into a
table typed as decoding the values would type them, with the value schema decoding gives; the
writers then encode that table (:meth:`~connectors.s3_common.formats.ObjectWriter.write_table`)
and no Python object is built per record. A batch this cannot read exactly is decoded.

* JSON with schemas: the envelopes' payloads by the native parser, typed by their one schema
  (:class:`sluice.converters.connect_arrow.EnvelopeReader`, which parses each distinct schema once).
* Avro: the native Avro reader (:func:`sluice.converters.connect_arrow.read_avro_batch`). The
  value schema of a registry id is learnt from the first batch of that id, which is decoded: the
  converter maps an id to one Connect schema, so the later batches of the id share it.

Reading is the costly part, so it is done late when it can be (:class:`LateTable`): when every
value of a batch visibly has one schema — each envelope starts with the same ``schema`` text, each
Avro value with the same registry id — the value schema is known without reading the values,
which is all that placing and rotating records needs, and the Parquet writer reads each row group
on the sink's upload threads (:meth:`~connectors.s3_common.parquet_format.ParquetObjectWriter.
write_typed_raws`) while the task goes on. A row group the late reader refuses is delivered again
decoded (the sink raises :class:`~connectors.api.UnusableRawValues` for it, as for raw JSON row
groups), and its schema text or registry id is read at once from then on, as before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from itertools import repeat
from typing import Any, NamedTuple, cast

from sluice.connectors.api import DataError, Schema, SinkRecordBatch, Type, WireFormat
from sluice.connectors.s3_common.parquet_format import arrow_schema
from sluice.converters import json_arrow
from sluice.converters.connect_arrow import EnvelopeReader, arrow_type, read_avro_batch, typed_table
from sluice.converters.connect_arrow import read_avro_values as _avro_reader

_AVRO_SCHEMAS = 64  # registry ids remembered
_LATE_KEYS = 64  # schema texts and registry ids whose late reading is planned
_ENVELOPE_START = b'{"schema":'


class LateTable(NamedTuple):
    """A batch's raw values, all of the value schema ``schema``, whose typed table ``read`` gives
    later (any thread; ``None``: they must be decoded), a row group at a time."""

    schema: Schema
    read: Callable[[list[bytes]], Any]


class TypedValues:
    """Reads batches of raw values into typed tables (one per task; called from the task thread,
    the readers of :class:`LateTable` from any)."""

    def __init__(self) -> None:
        self._envelopes: EnvelopeReader | None = None
        # Confluent's wire-format header (magic byte and schema id) → the value schema decoding gives.
        self._avro_schemas: OrderedDict[bytes, Schema] = OrderedDict()
        #: Schema text (JSON) or wire-format header (Avro) → its late reader, ``None`` when the
        #: values of that key are read at once (see the module docstring).
        self._late: OrderedDict[bytes, LateTable | None] = OrderedDict()
        #: Keys whose late reader refused a row group (added from upload threads).
        self._refused: set[bytes] = set()
        #: What the envelopes of the last schema text read late start with (``{"schema":`` and the text).
        self._last_start: bytes | None = None

    def read(self, batch: SinkRecordBatch) -> LateTable | tuple[Any, Schema] | None:
        """The batch's raw values to be read late, or ``(table, value schema)`` read now, or
        ``None``: decode them. Tombstones (``None``) may be among values read late: the writer
        applies ``behavior.on.null.values`` to them and hands the reader the others."""
        wire, raws = batch.raw_format, batch.raw_values
        if wire is None or raws is None or not raws:
            return None
        values: list[bytes] = [r for r in raws if r is not None] if None in raws else raws  # type: ignore[assignment]
        if not values:
            return None
        if wire.kind == "json" and wire.schemas:
            reader = self._envelopes
            if reader is None or reader.replace_null_with_default != wire.replace_null_with_default:
                reader = self._envelopes = EnvelopeReader(wire.replace_null_with_default)
                self._late.clear()  # their readers replace nulls the other way
            late = self._late_envelopes(values, reader, wire)
            return late if late is not None or values is not raws else reader.read(raws)
        if wire.kind != "avro" or _avro_reader is None:
            return None
        header = bytes(values[0][:5])
        schema = self._avro_schemas.get(header)
        if schema is None:
            if values is raws:
                self._learn(batch, header)
            return None
        late = self._late_avro(values, header)
        if late is not None or values is not raws:
            return late
        table = read_avro_batch(raws, batch.writer_schema)
        if header not in self._late and table is not None and _parquet_schema(schema) == table.schema:
            self._remember(header, self._avro_reader(batch, header, schema))  # read late from now on
        return None if table is None else (table, schema)

    # -- JSON with schemas ------------------------------------------------------------------------

    def _late_envelopes(
        self, raws: Sequence[bytes | None], reader: EnvelopeReader, wire: WireFormat
    ) -> LateTable | None:
        """A late reader for envelopes that all start with the same ``schema`` text."""
        first = raws[0]
        if type(first) is not bytes or not first.startswith(_ENVELOPE_START):
            return None
        start = self._last_start
        if start is not None and first.startswith(start):
            # The previous batch's schema text: an object's extent is fixed by its own bytes, so
            # this envelope's schema is that text (the reader checks the rest, row group by row group).
            text = start[len(_ENVELOPE_START) :]
        else:
            envelopes = json_arrow.read_envelopes([first])  # one value: its schema text, cheaply
            if envelopes is None or len(envelopes.schemas) != 1:
                return None
            text = envelopes.schemas[0]
            start = _ENVELOPE_START + text
            if not first.startswith(start):
                return None
        if text in self._refused:
            return None
        if text in self._late:
            late = self._late[text]
        else:
            schema = reader.schema(text)
            late = None if schema is None or not _flat(schema) else self._envelope_reader(text, schema, wire)
            self._remember(text, late)
        if late is None:
            return None
        self._last_start = start
        try:  # a value of another schema text, or not bytes: read the batch at once
            same = all(map(bytes.startswith, raws, repeat(start)))  # type: ignore[arg-type]
        except TypeError:
            return None
        return late if same else None

    def _envelope_reader(self, text: bytes, schema: Schema, wire: WireFormat) -> LateTable:
        replace = wire.replace_null_with_default

        def read(raws: list[bytes]) -> Any:
            envelopes = json_arrow.read_envelopes(raws)
            table = None
            if envelopes is not None and envelopes.table is not None and list(envelopes.schemas) == [text]:
                table = typed_table(envelopes.table, schema, replace)
            if table is None:
                self._refused.add(text)
            return table

        return LateTable(schema, read)

    # -- Avro -------------------------------------------------------------------------------------

    def _late_avro(self, raws: list[bytes], header: bytes) -> LateTable | None:
        """The late reader of the registry id ``header``, if the values ``raws`` all have that header."""
        late = self._late.get(header)
        if late is None or header in self._refused:
            return None
        try:
            same = all(map(bytes.startswith, raws, repeat(header)))  # type: ignore[arg-type]
        except TypeError:
            return None
        return late if same else None

    def _avro_reader(self, batch: SinkRecordBatch, header: bytes, schema: Schema) -> LateTable | None:
        """A late reader for the values of the registry id ``header`` (its writer schema fetched now)."""
        if batch.writer_schema is None:
            return None
        try:
            writer_schema = cast("dict[str, Any]", batch.writer_schema(int.from_bytes(header[1:5], "big")))
        except DataError:
            return None

        def read(raws: list[bytes]) -> Any:
            table = _avro_reader(raws, writer_schema) if _avro_reader is not None else None
            if table is None:
                self._refused.add(header)
            return table

        return LateTable(schema, read)

    def _learn(self, batch: SinkRecordBatch, header: bytes) -> None:
        """Remember the value schema of the batch's registry id, from its values decoded (the
        caller writes those)."""
        raws = batch.raw_values
        assert raws is not None
        schemas = batch.value_schemas
        first = schemas[0]
        if first is None or len(header) != 5 or header[0] != 0:
            return
        if all(raw[:5] == header for raw in raws) and all(s is first or s == first for s in schemas):  # type: ignore[index]
            self._avro_schemas[header] = first
            if len(self._avro_schemas) > _AVRO_SCHEMAS:
                self._avro_schemas.popitem(last=False)

    def _remember(self, key: bytes, late: LateTable | None) -> None:
        self._late[key] = late
        if len(self._late) > _LATE_KEYS:
            old, _ = self._late.popitem(last=False)
            self._refused.discard(old)


def _flat(schema: Schema) -> bool:
    """Whether :func:`typed_table` may read values of ``schema`` into the Parquet writer's Arrow
    schema for it (else reading them late would only be refused, row group after row group)."""
    if schema.type is not Type.STRUCT or (schema.optional and schema.default is not None):
        return False
    kinds = [arrow_type(field.schema) for field in schema.fields]
    expected = _parquet_schema(schema)
    return expected is not None and all(k is not None and k == f.type for k, f in zip(kinds, expected, strict=True))


def _parquet_schema(schema: Schema) -> Any:
    """The Arrow schema the Parquet writer gives values of ``schema`` (``None``: not a struct)."""
    try:
        return arrow_schema(schema)
    except DataError:
        return None
