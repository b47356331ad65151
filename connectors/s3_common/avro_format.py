"""Avro object container files (fastavro), with schemas as Confluent's ``AvroData`` makes them."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator, Sequence
from typing import Any

from sluice.connectors.api import DataError, Schema
from sluice.connectors.s3_common import require_module
from sluice.connectors.s3_common.object_format import ObjectWriter, Output, RecordFormat
from sluice.converters.avro_data import AvroData

#: Connect schemas become Avro schemas as Confluent's ``AvroData`` makes them (the AvroConverter's
#: mapping, ``connect.*`` attributes included), so the files read like Confluent's S3 sink's. Names
#: Avro refuses (a ``-`` in a topic prefix) are scrubbed to ``_``; ``connect.name`` keeps the original.
_AVRO_DATA = AvroData(scrub_invalid_names=True)


def avro_schema(schema: Schema) -> Any:
    """The Avro schema of a Connect schema (see :mod:`sluice.converters.avro_data`)."""
    return _AVRO_DATA.avro_schema(schema)


def infer_avro_schema(values: Sequence[Any]) -> Any:
    """An Avro schema for schemaless values, from the first values (every field nullable)."""
    sample = next((v for v in values if v is not None), None)
    if isinstance(sample, dict):
        fields = []
        for name in sample:
            column = [v.get(name) for v in values if isinstance(v, dict)]
            fields.append({"name": name, "type": ["null", _infer_avro_type(column)], "default": None})
        return {"type": "record", "name": "ConnectDefault", "fields": fields}
    return ["null", _infer_avro_type(list(values))]


def _infer_avro_type(column: Sequence[Any]) -> Any:
    sample = next((v for v in column if v is not None), None)
    if isinstance(sample, bool):
        return "boolean"
    if isinstance(sample, int):
        return "long"
    if isinstance(sample, float):
        return "double"
    if isinstance(sample, (bytes, bytearray)):
        return "bytes"
    if isinstance(sample, dict):
        inner = [x for v in column if isinstance(v, dict) for x in v.values()]
        return {"type": "map", "values": ["null", _infer_avro_type(inner)]}
    if isinstance(sample, list):
        inner = [x for v in column if isinstance(v, list) for x in v]
        return {"type": "array", "items": ["null", _infer_avro_type(inner)]}
    return "string"


#: fastavro's block size bound, set so high that blocks are only written by an explicit flush.
_NO_AUTO_BLOCK = 1 << 62


class AvroObjectWriter(ObjectWriter):
    def __init__(self, out: Output, codec: str, sync_marker: bytes) -> None:
        self.out = out
        self.codec = codec
        self.sync_marker = sync_marker
        self._writer: Any = None
        self._encode: Any = None

    def write(self, values: Sequence[Any], schema: Schema | None) -> None:
        if self._writer is None:
            fastavro_write = require_module("fastavro.write", "AvroFormat")
            if schema is not None:
                parsed = avro_schema(schema)
                # Connect values → Avro datums (logical values as Connect encodes them), checked per field.
                self._encode = _AVRO_DATA.encoder(schema)
            else:
                parsed = infer_avro_schema(values)
            # Each call's values form one block, written by the flush below, never part of it
            # before: a value that does not encode then leaves nothing of the call in the object.
            self._writer = fastavro_write.Writer(
                self.out, parsed, codec=self.codec, sync_marker=self.sync_marker, sync_interval=_NO_AUTO_BLOCK
            )
        writer, encode = self._writer, self._encode
        write = writer.write
        try:
            for value in values:
                write(value if encode is None else encode(value))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            writer.io.clear()  # the values of this call encoded so far (the block is not written)
            writer.block_count = 0
            raise DataError(f"AvroFormat cannot encode a value with the file's schema: {exc}") from None
        writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.flush()
            self._writer = None


class AvroFormat(RecordFormat):
    name = "avro"
    extension = ".avro"

    def __init__(self, codec: str = "null") -> None:
        require_module("fastavro", "AvroFormat")
        if codec == "snappy":
            require_module("cramjam", "avro.codec=snappy")
        self.codec = codec

    def writer(self, out: Output, key: str) -> ObjectWriter:
        # A sync marker derived from the key, not random, so a rewritten object is byte-identical.
        return AvroObjectWriter(out, self.codec, hashlib.md5(key.encode("utf-8")).digest())

    def read(self, data: bytes) -> Iterator[Any]:
        fastavro = require_module("fastavro", "AvroFormat")
        yield from fastavro.reader(io.BytesIO(data))
