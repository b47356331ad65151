"""Object formats: how record values become the bytes of an object, and back.

The names follow Confluent's ``format.class`` values (``io.confluent.connect.s3.format.json.JsonFormat``
…) and the short forms ``json``, ``parquet``, ``avro``, ``bytearray``:

* JSON lines (``.json``, ``.json.gz`` with ``s3.compression.type=gzip``): one value per line as
  Connect's JsonConverter writes it without schemas (bytes as base64, Decimal as a number,
  Timestamp/Date/Time as ms/days/ms).
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

import abc
import base64
import datetime as dt
import decimal
import gzip
import hashlib
import io
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import Executor, Future
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from sluice.connectors.api import ConfigError, DataError, Schema, Type
from sluice.connectors.api.schema import Date, Decimal, Time, Timestamp
from sluice.connectors.s3_common import require_module
from sluice.connectors.s3_common.parquet_rows import RowShape, UnfitValue
from sluice.converters.avro_data import AvroData

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


# -- JSON -----------------------------------------------------------------------------------------

_JSON_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME


def json_default(value: Any) -> Any:
    """What orjson cannot encode itself, as Connect's JsonConverter (schemas disabled) writes it."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, decimal.Decimal):
        return orjson.Fragment(str(value).encode("ascii"))
    if isinstance(value, dt.datetime):
        return Timestamp.to_int(value)
    if isinstance(value, dt.date):
        return Date.to_int(value)
    if isinstance(value, dt.time):
        return Time.to_int(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"cannot encode a {type(value).__name__} as JSON")


def encode_json_lines(values: Sequence[Any]) -> bytes:
    """``values`` as JSON lines, each followed by a newline."""
    dumps = orjson.dumps
    try:
        lines = [dumps(v, default=json_default, option=_JSON_OPTIONS) for v in values]
    except TypeError as exc:
        raise DataError(f"JsonFormat cannot encode a value: {exc}") from None
    lines.append(b"")
    return b"\n".join(lines)


class _Compressed(ObjectWriter):
    """Base of line/byte writers with optional gzip."""

    def __init__(self, out: Output, compression: str, level: int) -> None:
        self.out = out
        self._gzip = zlib.compressobj(level if level >= 0 else 6, zlib.DEFLATED, 31) if compression == "gzip" else None

    def _emit(self, data: bytes) -> None:
        if self._gzip is not None:
            data = self._gzip.compress(data)
        if data:
            self.out.write(data)

    def close(self) -> None:
        if self._gzip is not None:
            tail = self._gzip.flush()
            self._gzip = None
            if tail:
                self.out.write(tail)


class JsonLinesWriter(_Compressed):
    def write(self, values: Sequence[Any], schema: Schema | None) -> None:
        self._emit(encode_json_lines(values))

    def write_raw_json(self, raws: Sequence[bytes | None]) -> None:
        """The consumed JSON bytes as they are, one per line: no decoding, no encoding.

        A value spread over several lines (pretty-printed JSON) is the one exception: it is
        re-encoded on one line, as :meth:`write` would write it. The choice depends only on the
        record, so a replay writes the same bytes. A tombstone is a ``null`` line.
        """
        lines: list[bytes] = raws if isinstance(raws, list) else list(raws)  # type: ignore[assignment,arg-type]
        if None in lines:
            lines = [b"null" if v is None else v for v in lines]
        if _spans_lines(lines):
            lines = [_one_line(v) for v in lines]
        # One write (the batch is in the object entirely or not at all), and the final newline
        # joined in rather than concatenated: ``blob + b"\n"`` would copy the whole batch again.
        self._emit(b"\n".join([*lines, b""]))


def _spans_lines(values: list[bytes]) -> bool:
    """Whether any value contains a newline: one memchr over the values joined, several times
    cheaper than counting the newlines of the newline-joined batch (``bytes.count`` has no
    vectorised path)."""
    return b"\n" in b"".join(values)


def _one_line(raw: bytes) -> bytes:
    if b"\n" not in raw:
        return raw
    return orjson.dumps(orjson.loads(raw), option=_JSON_OPTIONS)


class JsonFormat(RecordFormat):
    name = "json"

    def __init__(self, compression: str = "none", level: int = -1) -> None:
        self.compression = compression
        self.level = level
        self.extension = ".json.gz" if compression == "gzip" else ".json"

    def writer(self, out: Output, key: str) -> ObjectWriter:
        return JsonLinesWriter(out, self.compression, self.level)

    def read(self, data: bytes) -> Iterator[Any]:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        for line in data.split(b"\n"):
            if line:
                yield orjson.loads(line)


# -- raw bytes ------------------------------------------------------------------------------------


class BytesWriter(_Compressed):
    def __init__(self, out: Output, compression: str, level: int, separator: bytes) -> None:
        super().__init__(out, compression, level)
        self.separator = separator

    def write(self, values: Sequence[Any], schema: Schema | None) -> None:
        chunks: list[bytes] = []
        for value in values:
            if isinstance(value, (bytes, bytearray, memoryview)):
                chunks.append(bytes(value))
            elif isinstance(value, str):
                chunks.append(value.encode("utf-8"))
            elif value is None:
                chunks.append(b"")
            else:
                raise DataError(f"ByteArrayFormat needs bytes or string values, got {type(value).__name__}")
        chunks.append(b"")
        self._emit(self.separator.join(chunks))


class ByteArrayFormat(RecordFormat):
    name = "bytearray"

    def __init__(
        self, compression: str = "none", level: int = -1, extension: str = ".bin", separator: bytes = b"\n"
    ) -> None:
        self.compression = compression
        self.level = level
        self.separator = separator
        self.extension = extension + (".gz" if compression == "gzip" else "")

    def writer(self, out: Output, key: str) -> ObjectWriter:
        return BytesWriter(out, self.compression, self.level, self.separator)

    def read(self, data: bytes) -> Iterator[Any]:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        if not self.separator:
            yield data
            return
        items = data.split(self.separator)
        if items and items[-1] == b"":
            items.pop()
        yield from items


# -- Parquet --------------------------------------------------------------------------------------


def arrow_type(schema: Schema) -> Any:
    """The Arrow type of a Connect schema (logical types included)."""
    pa = require_module("pyarrow", "ParquetFormat")
    if schema.name == Decimal.LOGICAL_NAME:
        params = schema.parameters or {}
        precision = int(params.get("connect.decimal.precision", 38))
        return pa.decimal128(precision, Decimal.scale(schema))
    if schema.name == Date.LOGICAL_NAME:
        return pa.date32()
    if schema.name == Time.LOGICAL_NAME:
        return pa.time32("ms")
    if schema.name == Timestamp.LOGICAL_NAME:
        return pa.timestamp("ms", tz="UTC")
    simple = {
        Type.INT8: pa.int8(),
        Type.INT16: pa.int16(),
        Type.INT32: pa.int32(),
        Type.INT64: pa.int64(),
        Type.FLOAT32: pa.float32(),
        Type.FLOAT64: pa.float64(),
        Type.BOOLEAN: pa.bool_(),
        Type.STRING: pa.string(),
        Type.BYTES: pa.binary(),
    }
    if schema.type in simple:
        return simple[schema.type]
    if schema.type is Type.ARRAY:
        assert schema.value_schema is not None
        return pa.list_(arrow_field("element", schema.value_schema))
    if schema.type is Type.MAP:
        assert schema.key_schema is not None and schema.value_schema is not None
        return pa.map_(arrow_type(schema.key_schema), arrow_field("value", schema.value_schema))
    return pa.struct([arrow_field(f.name, f.schema) for f in schema.fields])


def arrow_field(name: str, schema: Schema) -> Any:
    pa = require_module("pyarrow", "ParquetFormat")
    return pa.field(name, arrow_type(schema), nullable=schema.optional)


def arrow_schema(schema: Schema) -> Any:
    """The Arrow schema of a Connect struct schema."""
    pa = require_module("pyarrow", "ParquetFormat")
    if schema.type is not Type.STRUCT:
        raise DataError(f"ParquetFormat needs struct values, but the value schema is {schema.type.value}")
    return pa.schema([arrow_field(f.name, f.schema) for f in schema.fields])


def _rows_to_table(pa: Any, rows: list[Any], schema: Any) -> Any:
    """``rows`` (dicts) as an Arrow table, built column by column.

    One list comprehension per field and one ``pa.array`` per column cost well under half of
    ``Table.from_pylist``, which walks every row dict in C++ one value at a time. Rows that do
    not all have the same fields (or are not dicts) take ``from_pylist``, whose semantics
    (missing fields are null, extra fields ignored, names from the first row) this matches.
    """
    if schema is not None:
        names = schema.names
    elif rows and type(rows[0]) is dict:
        names = list(rows[0])
    else:
        return pa.Table.from_pylist(rows, schema=schema)
    try:
        columns = {name: [row[name] for row in rows] for name in names}
    except (KeyError, TypeError):
        return pa.Table.from_pylist(rows, schema=schema)
    return pa.Table.from_pydict(columns, schema=schema)


#: Rows decoded in Python to infer a Parquet schema for raw JSON (see ParquetObjectWriter).
SCHEMA_SAMPLE_ROWS = 1_000


class ParquetObjectWriter(ObjectWriter):
    """Holds rows until a row group is full, then encodes it into the output.

    Row groups are cut at exactly ``row_group_rows`` rows whatever the batch sizes, so the bytes of
    an object depend only on its records (a replay after a crash rewrites it identically).

    Values that arrive as raw JSON (:meth:`write_raw_json`) are parsed straight into Arrow columns,
    with no Python object per value: by the native parser (:mod:`sluice.converters.json_arrow`) when it is
    installed and the values are flat objects, else by pyarrow's JSON reader (about 30 % less CPU
    than decoding them and building columns from dicts; the native parser takes a quarter of
    that). The schema is the one the decoded path would use: the object's schema once it has one; for the first row group, the schema Arrow infers
    from the first ``SCHEMA_SAMPLE_ROWS`` decoded rows. Any row the reader cannot convert exactly
    to that schema (a type that differs, a field the schema does not have, a value that is not
    an object) makes that row group take the decoded path instead, so the file and its errors are
    the same as if every value had been decoded.

    Schemaless values are checked against the object's shape (:class:`~connectors.s3_common.
    parquet_rows.RowShape`: an object, fields that keep their kind) before they are kept, so a
    value that would fail the object's commit, or become a row of nulls, is refused with its write:
    decoded values by :meth:`write` (:class:`UnfitValue`, naming its position), raw ones when the
    readers refuse their row group and it is decoded, as :class:`InvalidRawJson`, which has the
    sink deliver them again decoded. Good raw row groups never reach the check.
    """

    def __init__(self, out: Output, codec: str, row_group_rows: int, executor: Executor | None = None) -> None:
        self.out = out
        self.codec = None if codec == "none" else codec
        self.row_group_rows = row_group_rows
        self.executor = executor
        self._rows: list[Any] = []
        self._raw: list[bytes] = []
        self._schema: Any = None
        self._connect_schema: Schema | None = None
        self._writer: Any = None
        self._sink: Any = None
        self._pending_estimate = 0
        #: The raw row group being encoded on the executor (at most one: row groups stay in order).
        self._job: Future[None] | None = None
        self._job_rows: list[bytes] = []
        self._job_bytes = 0
        #: What schemaless rows must keep: learnt from the first rows, then the schema's own.
        self._shape = RowShape(row_group_rows)

    @property
    def pending_bytes(self) -> int:
        buffered = self._sink.tell() - self.out.tell() if self._sink is not None else 0
        return self._pending_estimate + self._job_bytes + buffered

    def write(self, values: Sequence[Any], schema: Schema | None) -> None:
        if schema is not None and self._schema is None:
            self._schema = arrow_schema(schema)
            self._connect_schema = schema
        # Keep the order: what came raw before these is decoded with them.
        pending = decode_raw_values(self._raw) if self._raw else []
        if schema is None:  # a Connect schema was enforced by the converter
            self._check_rows(pending, values)
        if self._raw:
            self._rows.extend(pending)
            self._raw = []
            self._pending_estimate = 100 * len(self._rows)
        self._rows.extend(values)
        self._pending_estimate += 100 * len(values)
        rows = self.row_group_rows
        while len(self._rows) >= rows:
            group, self._rows = self._rows[:rows], self._rows[rows:]
            self._pending_estimate = 100 * len(self._rows)
            self._finish_job()
            self._encode(self._table(group))

    def write_raw_json(self, raws: Sequence[bytes | None]) -> None:
        if self._rows or None in raws:
            try:
                super().write_raw_json(raws)  # decoded rows are waiting (or a tombstone to refuse)
            except UnfitValue as exc:
                raise InvalidRawJson(str(exc)) from None
            return
        self._raw.extend(raws)  # type: ignore[arg-type]
        # The raw bytes held, summed once per batch (on the task thread, where each pass over the
        # values costs); a row group's share is estimated from the mean size.
        self._pending_estimate += sum(map(len, raws))  # type: ignore[arg-type]
        rows = self.row_group_rows
        while len(self._raw) >= rows:
            share = self._pending_estimate * rows // len(self._raw)
            group, self._raw = self._raw[:rows], self._raw[rows:]
            self._pending_estimate -= share
            self._finish_job()
            if self.executor is None:
                self._encode_raw(group)
            else:
                # The group is parsed and encoded without the GIL: the task goes on consuming meanwhile.
                self._job_rows, self._job_bytes = group, share
                self._job = self.executor.submit(self._encode_raw, group)

    def _encode_raw(self, group: list[bytes]) -> None:
        self._encode(self._raw_table(group))

    def _finish_job(self) -> None:
        """Wait for the row group on the executor (encoding it here if no thread started it);
        its error, if any, is raised here, and again at every later call."""
        job = self._job
        if job is None:
            return
        if job.cancel():
            self._encode_raw(self._job_rows)
        else:
            job.result()
        self._job, self._job_rows, self._job_bytes = None, [], 0

    def _check_rows(self, pending: list[Any], values: Sequence[Any]) -> None:
        """Refuse the first schemaless value that cannot be a row of the object, before anything
        of the write is kept: :class:`UnfitValue` for one of ``values``, :class:`InvalidRawJson`
        for one of ``pending`` (raw values decoded now, which came in earlier writes)."""
        if self._job is not None and self._schema is None:
            self._finish_job()  # the first row group, on a thread, settles the schema
        if not pending:
            self._shape.check(values)
            return
        try:
            self._shape.check([*pending, *values])
        except UnfitValue as exc:
            if exc.index < len(pending):
                raise InvalidRawJson(str(exc)) from None
            raise UnfitValue(str(exc), exc.index - len(pending)) from None

    def _table(self, rows: list[Any]) -> Any:
        pa = require_module("pyarrow", "ParquetFormat")
        try:
            return _rows_to_table(pa, rows, self._schema)
        except (pa.ArrowException, TypeError, ValueError, AttributeError, OverflowError) as exc:
            if not all(isinstance(r, dict) for r in rows):
                raise DataError("ParquetFormat needs struct (dict) values") from None
            raise DataError(f"ParquetFormat cannot convert the values to the file's schema: {exc}") from None

    def _raw_table(self, raws: list[bytes]) -> Any:
        """The Arrow table of a row group of raw JSON values (see the class docstring)."""
        table = _read_json_rows(raws, self._schema)
        if table is None:
            values = decode_raw_values(raws)
            if None in values:
                raise InvalidRawJson("A raw value is a JSON null with whitespace around it")
            # Checked here, on the slow path only: a row group the readers took is all objects of
            # the schema's types. Refused, the values are delivered again decoded (see the class).
            shape = RowShape(len(values)) if self._schema is None else RowShape.of_schema(self._schema)
            try:
                shape.check(values)
            except UnfitValue as exc:
                raise InvalidRawJson(str(exc)) from None
            return self._table(values)
        return table

    def _encode(self, table: Any) -> None:
        pa = require_module("pyarrow", "ParquetFormat")
        pq = require_module("pyarrow.parquet", "ParquetFormat")
        if self._schema is None:
            self._schema = table.schema
            self._shape = RowShape.of_schema(table.schema)
        if self._writer is None:
            # pyarrow writes a row group in dozens of small pieces; each one handed to a Python
            # file takes the GIL, which a background encoder then waits for behind the task
            # thread (up to the 5 ms switch interval each time). A native buffer in between
            # passes them on in large writes.
            self._sink = pa.BufferedOutputStream(pa.PythonFile(self.out, mode="w"), buffer_size=PARQUET_BUFFER_BYTES)
            self._writer = pq.ParquetWriter(self._sink, self._schema, compression=self.codec or "none")
        self._writer.write_table(table, row_group_size=max(table.num_rows, 1))

    def discard(self) -> None:
        job = self._job
        if job is not None and not job.cancel():
            futures_wait([job])  # never leave a thread writing into an aborted upload
        self._job, self._job_rows, self._job_bytes = None, [], 0
        self._rows, self._raw, self._pending_estimate = [], [], 0

    def close(self) -> None:
        self._finish_job()
        if self._raw:
            raws, self._raw = self._raw, []
            self._encode(self._raw_table(raws))
        if self._rows:
            rows, self._rows = self._rows, []
            self._encode(self._table(rows))
        self._pending_estimate = 0
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._sink.detach()  # the last buffered bytes go to the output, which stays open
            self._sink = None


def _read_json_rows(raws: list[bytes], schema: Any) -> Any:
    """``raws`` (one JSON object each) as an Arrow table of ``schema`` (inferred from a decoded
    sample when ``None``), or ``None`` when they do not convert to it exactly."""
    pa = require_module("pyarrow", "ParquetFormat")
    pa_json = require_module("pyarrow.json", "ParquetFormat")
    if not raws:
        return None
    if schema is None:
        try:  # a sample that is not JSON: the caller decodes the rows, which names the problem
            sample = [orjson.loads(v) for v in raws[:SCHEMA_SAMPLE_ROWS]]
            schema = _rows_to_table(pa, sample, None).schema
        except (pa.ArrowException, TypeError, ValueError, AttributeError, OverflowError):
            return None
    table = _read_native(pa, raws, schema)
    if table is not None:
        return table
    if _spans_lines(raws):
        return None  # a value spans lines; the reader would need newlines_in_values (slower)
    blob = b"\n".join(raws)
    try:
        table = pa_json.read_json(
            pa.BufferReader(blob),
            # One thread: the caller is a background thread already, and on a busy machine the
            # reader's own pool costs more CPU than it saves (measured on 2 shared cores).
            read_options=pa_json.ReadOptions(use_threads=False, block_size=_JSON_BLOCK_SIZE),
            parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"),
        )
    except (pa.ArrowException, ValueError, TypeError):
        return None
    if table.num_rows != len(raws) or table.schema != schema:
        return None
    # One chunk per column, like a table built from Python lists: the encoded pages then do not
    # depend on how the reader split its input.
    return table.combine_chunks()


def _read_native(pa: Any, raws: list[bytes], schema: Any) -> Any:
    """``raws`` as a table of ``schema`` by the native parser (:mod:`sluice.converters.json_arrow`), or
    ``None`` if it is not installed, refuses the batch, or reads a member with another type.

    Like pyarrow's reader given ``schema``: members the values lack are nulls, a member missing
    from ``schema`` refuses the batch, and integers in a double field become doubles (the nearest
    one, as parsing their digits as a double gives)."""
    from sluice.converters import json_arrow  # here: importing it loads pyarrow (the s3 extra)

    table = json_arrow.read_flat_objects(raws)
    if table is None:
        return None
    names = set(schema.names)
    if any(name not in names for name in table.column_names):
        return None
    n = table.num_rows
    arrays = []
    for field in schema:
        if field.name not in table.column_names:
            column = pa.nulls(n, field.type)
        else:
            column = table.column(field.name).chunk(0)
            if pa.types.is_null(column.type):
                column = pa.nulls(n, field.type)
            elif pa.types.is_int64(column.type) and pa.types.is_float64(field.type):
                column = column.cast(pa.float64(), safe=False)
            elif column.type != field.type:
                return None
        if not field.nullable and column.null_count:
            return None
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=schema)


_JSON_BLOCK_SIZE = 1 << 20
#: Encoded Parquet bytes gathered natively before they are written to the object's upload.
PARQUET_BUFFER_BYTES = 1 << 20


class ParquetFormat(RecordFormat):
    name = "parquet"
    extension = ".parquet"

    def __init__(self, codec: str = "snappy", row_group_rows: int = 50_000) -> None:
        require_module("pyarrow.parquet", "ParquetFormat")
        self.codec = codec
        self.row_group_rows = row_group_rows
        #: Where writers encode row groups of raw JSON while the caller goes on (the sink sets its
        #: upload threads); ``None`` encodes them in the writing thread.
        self.executor: Executor | None = None

    def writer(self, out: Output, key: str) -> ObjectWriter:
        return ParquetObjectWriter(out, self.codec, self.row_group_rows, self.executor)

    def read(self, data: bytes) -> Iterator[Any]:
        pq = require_module("pyarrow.parquet", "ParquetFormat")
        table = pq.read_table(io.BytesIO(data))
        map_columns = [f.name for f in table.schema if str(f.type).startswith("map<")]
        for row in table.to_pylist():
            for name in map_columns:  # Arrow gives maps back as lists of pairs
                if row.get(name) is not None:
                    row[name] = dict(row[name])
            yield row


# -- Avro -----------------------------------------------------------------------------------------


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


def make_format(settings: FormatSettings) -> RecordFormat:
    """The format ``settings`` names, checked (a missing optional package is a ConfigError)."""
    kind = short_format_name(settings.format)
    if kind == "json":
        return JsonFormat(settings.compression, settings.compression_level)
    if kind == "bytearray":
        return ByteArrayFormat(
            settings.compression, settings.compression_level, settings.bytearray_extension, settings.bytearray_separator
        )
    if kind == "parquet":
        return ParquetFormat(settings.parquet_codec, settings.parquet_row_group_rows)
    return AvroFormat(settings.avro_codec)
