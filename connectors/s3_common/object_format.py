"""The object format SPI of the S3 connectors: settings, the writer and format base classes.

A :class:`RecordFormat` names a file extension, makes one :class:`ObjectWriter` per object and
reads objects back; the formats themselves are in :mod:`~sluice.connectors.s3_common.line_formats`
(JSON lines, raw bytes), :mod:`~sluice.connectors.s3_common.parquet_format` and
:mod:`~sluice.connectors.s3_common.avro_format`; :func:`~sluice.connectors.s3_common.formats.make_format`
picks one.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from sluice.connectors.api import ConfigError, DataError, Schema

_FORMAT_PREFIX = "io.confluent.connect.s3.format."
FORMAT_NAMES = {
    "json": "JsonFormat",
    "parquet": "ParquetFormat",
    "avro": "AvroFormat",
    "bytearray": "ByteArrayFormat",
}


def short_format_name(name: str) -> str:
    """``io.confluent.connect.s3.format.json.JsonFormat`` / ``JsonFormat`` / ``json`` → ``json``."""
    short = name.removeprefix(_FORMAT_PREFIX).rsplit(".", 1)[-1].lower().removesuffix("format")
    if short in ("bytes", "bytearray", "raw"):
        return "bytearray"
    if short in FORMAT_NAMES:
        return short
    raise ConfigError(
        f"Unknown format {name!r}: use one of {', '.join(_FORMAT_PREFIX + k + '.' + v for k, v in FORMAT_NAMES.items())} "
        f"or the short names {', '.join(FORMAT_NAMES)}",
        key="format.class",
    )


@dataclass(frozen=True)
class FormatSettings:
    """The format-related keys of a connector configuration."""

    format: str = "json"
    compression: str = "none"  # s3.compression.type, for json and bytearray
    compression_level: int = -1
    parquet_codec: str = "snappy"
    avro_codec: str = "null"
    bytearray_extension: str = ".bin"
    bytearray_separator: bytes = b"\n"
    #: ``json.decimal.format``: Decimals in JSON lines as ``BASE64`` (Connect's default) or ``NUMERIC``.
    json_decimal_format: str = "BASE64"
    #: Parquet rows held in memory before they are encoded as a row group.
    parquet_row_group_rows: int = 50_000


class Output(Protocol):
    """Where a writer puts its bytes (an :class:`~connectors.s3_common.storage.ObjectUpload`)."""

    def write(self, data: bytes) -> int: ...

    def tell(self) -> int: ...


class ObjectWriter(abc.ABC):
    """Encodes the values of one object into an :class:`Output`, batch by batch."""

    @abc.abstractmethod
    def write(self, values: Sequence[Any], schema: Schema | None) -> None:
        """Encode one batch of values into the object."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Write whatever the format keeps back (compressor tail, last row group, footer)."""

    def discard(self) -> None:  # noqa: B027 - optional hook
        """The object is dropped: stop any background work (the output is thrown away)."""

    def write_raw_json(self, raws: Sequence[bytes | None]) -> None:
        """Encode one batch of values given as the JSON bytes they were consumed as.

        Each item is one complete JSON document, already checked by the runtime (no surrounding
        whitespace), and its value is exactly its schemaless parse; ``None`` is a tombstone. Formats
        that can use the bytes as they are override this; the others decode them here. Parquet
        parses every value itself, so the S3 sink takes its values unchecked: there, bytes that
        turn out not to be JSON raise :class:`InvalidRawJson`.
        """
        self.write(decode_raw_values(raws), None)

    def write_table(self, table: Any, schema: Schema) -> bool:
        """Encode one batch of struct values of ``schema`` given as an Arrow table: its fields as
        columns typed as decoding the values types them (raw values a fast path read, see
        :mod:`sluice.converters.connect_arrow`). ``False`` when the format does not take it that
        way (the default): the caller writes the decoded values instead."""
        return False

    @property
    def pending_bytes(self) -> int:
        """A rough size of what the writer holds in memory, not yet written to the output."""
        return 0


class RecordFormat(abc.ABC):
    """A format: its file extension, a writer factory and a reader."""

    name = ""
    extension = ""

    @abc.abstractmethod
    def writer(self, out: Output, key: str) -> ObjectWriter:
        """A writer for one new object called ``key``."""

    @abc.abstractmethod
    def read(self, data: bytes) -> Iterator[Any]:
        """The values stored in an object, in order."""


class InvalidRawJson(DataError):
    """A raw value cannot be written as it was consumed: it is not JSON, or is a JSON ``null``
    spelled with whitespace around it (which the sink's null handling looks for only as ``null``)
    — only possible for raw values, which come unchecked
    (:attr:`~connectors.api.SinkTask.value_format`) — or it does not fit the Parquet object's
    schema, which shows only when its row group is parsed, after its ``put()``. The sink then gives
    them back (:class:`~connectors.api.UnusableRawValues`) and the runtime delivers them decoded, so the runtime's error handling, ``behavior.on.null.values``
    and the writer's own check of decoded values (:class:`UnfitValue`) see the record as they
    would have on the decoded path."""


def decode_raw_values(raws: Sequence[bytes | None]) -> list[Any]:
    """The values of raw JSON bytes (``None``, a tombstone, stays ``None``), as the JsonConverter
    reads them; bytes that are not JSON raise :class:`InvalidRawJson`."""
    loads = orjson.loads
    try:
        return [None if v is None else loads(v) for v in raws]
    except orjson.JSONDecodeError as exc:
        raise InvalidRawJson(f"A value handed over unchecked is not JSON: {exc}") from None


def spans_lines(values: list[bytes]) -> bool:
    """Whether any value contains a newline: one memchr over the values joined, several times
    cheaper than counting the newlines of the newline-joined batch (``bytes.count`` has no
    vectorised path)."""
    return b"\n" in b"".join(values)
