"""Parquet objects (pyarrow): Connect schemas as Arrow schemas, row groups from values or raw JSON.

Values must be structs. The Arrow schema comes from the Connect schema when there is one, else is
inferred from the first row group and kept for the whole object.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, Future
from concurrent.futures import wait as futures_wait
from functools import partial
from typing import Any

import orjson

from sluice.connectors.api import DataError, Schema, Type
from sluice.connectors.api.schema import Decimal
from sluice.connectors.s3_common import require_module
from sluice.connectors.s3_common.object_format import (
    InvalidRawJson,
    ObjectWriter,
    Output,
    RecordFormat,
    decode_raw_values,
    spans_lines,
)
from sluice.connectors.s3_common.parquet_rows import RowShape, UnfitValue


def arrow_type(schema: Schema) -> Any:
    """The Arrow type of a Connect schema (logical types included)."""
    pa = require_module("pyarrow", "ParquetFormat")
    if schema.name == Decimal.LOGICAL_NAME:
        params = schema.parameters or {}
        precision = int(params.get("connect.decimal.precision", 38))
        return pa.decimal128(precision, Decimal.scale(schema))
    from sluice.converters import connect_arrow  # here: importing it loads pyarrow (the s3 extra)

    flat = connect_arrow.arrow_type(schema)  # primitives and the other logical types: one mapping for every path
    if flat is not None:
        return flat
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

    Raw JSON with schemas and Avro come as typed tables (:meth:`write_table`), or as their raw
    bytes with a reader (:meth:`write_typed_raws`) that reads each row group on the executor, like
    the raw JSON ones; a row group that reader refuses raises :class:`InvalidRawJson` as well.
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
        #: The row group being encoded on the executor (at most one: row groups stay in order).
        self._job: Future[None] | None = None
        self._job_bytes = 0
        #: What the job runs (reading and encoding a row group), run here if it never started.
        self._job_run: Callable[[], None] | None = None
        #: What schemaless rows must keep: learnt from the first rows, then the schema's own.
        self._shape = RowShape(row_group_rows)
        #: Tables of typed rows (write_table) not encoded yet, and their row count.
        self._tables: list[Any] = []
        self._table_rows = 0
        #: Raw values to be read into typed rows (write_typed_raws) not encoded yet, and their reader.
        self._typed: list[bytes] = []
        self._typed_read: Callable[[list[bytes]], Any] | None = None

    @property
    def pending_bytes(self) -> int:
        buffered = self._sink.tell() - self.out.tell() if self._sink is not None else 0
        return self._pending_estimate + self._job_bytes + buffered

    def write(self, values: Sequence[Any], schema: Schema | None) -> None:
        if schema is not None and self._schema is None:
            self._schema = arrow_schema(schema)
            self._connect_schema = schema
        self._typed_as_table()
        if self._tables:  # typed rows came before these: they go first, as rows of the same schema
            tables, self._tables, self._table_rows = self._tables, [], 0
            self._rows.extend(row for table in tables for row in table.to_pylist())
            self._pending_estimate = 100 * len(self._rows)
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
        if self._rows or self._typed or None in raws:
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
            # The group is parsed and encoded without the GIL: the task goes on consuming meanwhile.
            self._run_later(partial(self._encode_raw, group), share)

    def write_table(self, table: Any, schema: Schema) -> bool:
        """Rows already typed as the decoded path types them, taken when their Arrow schema is the
        object's (the first write's): cut into the same row groups as rows written by :meth:`write`."""
        if self._schema is None:
            self._schema = arrow_schema(schema)
            self._connect_schema = schema
        self._typed_as_table()
        if table.schema != self._schema or self._raw:
            return False
        if self._rows:  # decoded rows are waiting: these follow them as rows
            self.write(table.to_pylist(), schema)
            return True
        pa = require_module("pyarrow", "ParquetFormat")
        self._tables.append(table)
        self._table_rows += table.num_rows
        self._pending_estimate += table.nbytes
        rows = self.row_group_rows
        if self._table_rows >= rows:
            whole = pa.concat_tables(self._tables)
            start = 0
            while whole.num_rows - start >= rows:
                self._encode_later(whole.slice(start, rows))
                start += rows
            rest = whole.slice(start)
            self._tables, self._table_rows = ([rest], rest.num_rows) if rest.num_rows else ([], 0)
            self._pending_estimate = rest.nbytes if rest.num_rows else 0
        return True

    def write_typed_raws(self, raws: Sequence[bytes], schema: Schema, read: Callable[[list[bytes]], Any]) -> None:
        """Raw values of the value schema ``schema`` that ``read`` gives as a typed table later
        (:class:`~connectors.sink.s3.typed_values.LateTable`), a row group at a time, on the
        executor: cut into the same row groups as :meth:`write_table` would cut their table. A row
        group ``read`` refuses (``None``) or types otherwise than the object raises
        :class:`InvalidRawJson` then, at a later write or at the commit, which has the sink deliver
        the values again decoded."""
        if self._schema is None:
            self._schema = arrow_schema(schema)
            self._connect_schema = schema
        if self._rows or self._raw or self._tables or (self._typed and read is not self._typed_read):
            # Other rows are waiting (rare: a batch decoded before these): read these now, after them.
            if not self.write_table(self._read_typed(list(raws), read), schema):
                raise InvalidRawJson("typed raw values follow raw JSON values in one object")
            return
        self._typed.extend(raws)
        self._typed_read = read
        self._pending_estimate += sum(map(len, raws))
        rows = self.row_group_rows
        while len(self._typed) >= rows:
            share = self._pending_estimate * rows // len(self._typed)
            group, self._typed = self._typed[:rows], self._typed[rows:]
            self._pending_estimate -= share
            # The native readers and pyarrow work mostly without the GIL: the task goes on meanwhile.
            self._run_later(partial(self._encode_typed, group, read), share)

    def _encode_later(self, table: Any) -> None:
        """Encode a row group of typed rows on the executor (here without one), after the one before it."""
        # pyarrow encodes without the GIL: the task goes on consuming meanwhile.
        self._run_later(partial(self._encode, table), table.nbytes)

    def _run_later(self, run: Callable[[], None], nbytes: int) -> None:
        """Run the encoding of a row group of ``nbytes`` bytes on the executor (here without one),
        after the one before it."""
        self._finish_job()
        if self.executor is None:
            run()
            return
        self._job_bytes = nbytes
        self._job_run = run
        self._job = self.executor.submit(run)

    def _encode_typed(self, raws: list[bytes], read: Callable[[list[bytes]], Any]) -> None:
        self._encode(self._read_typed(raws, read))

    def _read_typed(self, raws: list[bytes], read: Callable[[list[bytes]], Any]) -> Any:
        table = read(raws)
        if table is None or table.schema != self._schema:
            raise InvalidRawJson("a row group of raw values does not read exactly as decoding reads it")
        return table

    def _typed_as_table(self) -> None:
        """The raw values :meth:`write_typed_raws` holds as a typed table held by :meth:`write_table`
        (rows of another kind follow them)."""
        if not self._typed:
            return
        raws, read = self._typed, self._typed_read
        assert read is not None
        self._typed, self._typed_read = [], None
        table = self._read_typed(raws, read)
        self._tables.append(table)
        self._table_rows += table.num_rows

    def _encode_raw(self, group: list[bytes]) -> None:
        self._encode(self._raw_table(group))

    def _finish_job(self) -> None:
        """Wait for the row group on the executor (encoding it here if no thread started it);
        its error, if any, is raised here, and again at every later call."""
        job = self._job
        if job is None:
            return
        if job.cancel():
            assert self._job_run is not None
            self._job_run()
        else:
            job.result()
        self._job, self._job_bytes, self._job_run = None, 0, None

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
        self._job, self._job_bytes, self._job_run = None, 0, None
        self._rows, self._raw, self._pending_estimate = [], [], 0
        self._tables, self._table_rows = [], 0
        self._typed, self._typed_read = [], None

    def close(self) -> None:
        self._finish_job()
        self._typed_as_table()
        if self._tables:
            pa = require_module("pyarrow", "ParquetFormat")
            tables, self._tables, self._table_rows = self._tables, [], 0
            self._encode(pa.concat_tables(tables))
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
    if spans_lines(raws):
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
