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
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from sluice.connectors.api import Schema, SinkRecordBatch
from sluice.converters.connect_arrow import EnvelopeReader, read_avro_batch
from sluice.converters.connect_arrow import read_avro_values as _avro_reader

_AVRO_SCHEMAS = 64  # registry ids remembered


class TypedValues:
    """Reads batches of raw values into typed tables (one per task; called from the task thread)."""

    def __init__(self) -> None:
        self._envelopes: EnvelopeReader | None = None
        # Confluent's wire-format header (magic byte and schema id) → the value schema decoding gives.
        self._avro_schemas: OrderedDict[bytes, Schema] = OrderedDict()

    def read(self, batch: SinkRecordBatch) -> tuple[Any, Schema] | None:
        """``(table, value schema)`` of the batch's raw values, or ``None``: decode them."""
        wire, raws = batch.raw_format, batch.raw_values
        if wire is None or raws is None or not raws or None in raws:
            return None
        if wire.kind == "json" and wire.schemas:
            reader = self._envelopes
            if reader is None or reader.replace_null_with_default != wire.replace_null_with_default:
                reader = self._envelopes = EnvelopeReader(wire.replace_null_with_default)
            return reader.read(raws)
        if wire.kind != "avro" or _avro_reader is None:
            return None
        header = bytes(raws[0][:5])  # type: ignore[index]
        schema = self._avro_schemas.get(header)
        if schema is None:
            self._learn(batch, header)
            return None
        table = read_avro_batch(raws, batch.writer_schema)
        return None if table is None else (table, schema)

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
