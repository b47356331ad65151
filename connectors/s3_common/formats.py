"""Object formats: how record values become the bytes of an object, and back.

The names follow Confluent's ``format.class`` values (``io.confluent.connect.s3.format.json.JsonFormat``
…) and the short forms ``json``, ``parquet``, ``avro``, ``bytearray``:

* JSON lines (``.json``, ``.json.gz`` with ``s3.compression.type=gzip``): one value per line as
  Connect's JsonConverter writes it without schemas (bytes as base64, Decimal as base64 or a
  number per ``json.decimal.format``, Timestamp/Date/Time as ms/days/ms).
* Parquet (``.parquet``, pyarrow; ``parquet.codec`` snappy/zstd/gzip/lz4/none): values must be
  structs. The Arrow schema comes from the Connect schema when there is one, else is inferred from
  the first row group and kept for the whole object.
* Avro (``.avro``, fastavro; ``avro.codec`` null/deflate/snappy/bzip2/xz/zstandard): the Avro
  schema comes from the Connect schema as Confluent's ``AvroData`` (the AvroConverter's mapping)
  makes it, else is inferred from the first values.
* Bytes (``.bin`` or ``format.bytearray.extension``): raw values joined by
  ``format.bytearray.separator`` (default a newline), gzip optional.

Writers are deterministic: the same values give the same bytes (gzip header without a time,
Avro sync markers derived from the object key), which the sink's exactly-once layout relies on.
"""

from __future__ import annotations

from sluice.connectors.s3_common.avro_format import AvroFormat, AvroObjectWriter, avro_schema, infer_avro_schema
from sluice.connectors.s3_common.line_formats import (
    ByteArrayFormat,
    BytesWriter,
    JsonFormat,
    JsonLinesWriter,
    decimal_base64,
    encode_json_lines,
    json_default,
)
from sluice.connectors.s3_common.object_format import (
    FORMAT_NAMES,
    FormatSettings,
    InvalidRawJson,
    ObjectWriter,
    Output,
    RecordFormat,
    decode_raw_values,
    short_format_name,
)
from sluice.connectors.s3_common.parquet_format import (
    PARQUET_BUFFER_BYTES,
    SCHEMA_SAMPLE_ROWS,
    ParquetFormat,
    ParquetObjectWriter,
    arrow_field,
    arrow_schema,
    arrow_type,
)

__all__ = [
    "FORMAT_NAMES",
    "PARQUET_BUFFER_BYTES",
    "SCHEMA_SAMPLE_ROWS",
    "AvroFormat",
    "AvroObjectWriter",
    "ByteArrayFormat",
    "BytesWriter",
    "FormatSettings",
    "InvalidRawJson",
    "JsonFormat",
    "JsonLinesWriter",
    "ObjectWriter",
    "Output",
    "ParquetFormat",
    "ParquetObjectWriter",
    "RecordFormat",
    "arrow_field",
    "arrow_schema",
    "arrow_type",
    "avro_schema",
    "decode_raw_values",
    "decimal_base64",
    "encode_json_lines",
    "infer_avro_schema",
    "json_default",
    "make_format",
    "short_format_name",
]


def make_format(settings: FormatSettings) -> RecordFormat:
    """The format ``settings`` names, checked (a missing optional package is a ConfigError)."""
    kind = short_format_name(settings.format)
    if kind == "json":
        return JsonFormat(settings.compression, settings.compression_level, settings.json_decimal_format)
    if kind == "bytearray":
        return ByteArrayFormat(
            settings.compression, settings.compression_level, settings.bytearray_extension, settings.bytearray_separator
        )
    if kind == "parquet":
        return ParquetFormat(settings.parquet_codec, settings.parquet_row_group_rows)
    return AvroFormat(settings.avro_codec)
