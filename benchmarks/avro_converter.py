"""AvroConverter's cost per record against fastavro alone, in the same run.

Rows shaped like a JDBC source's (int64 id, strings, a Decimal, a Timestamp, a Date, a boolean,
an int32, an optional string, a double) are written and read back by:

* **fastavro, datums ready**: ``schemaless_writer`` / ``schemaless_reader`` on datums already in
  Avro's form (ints for times, bytes for decimals), plus the 5-byte header: the floor for any
  Python Avro writer;
* **fastavro, logical types**: the same Connect values, converted by fastavro's own logical-type
  handling, as a plain Python Avro producer would do;
* **Sluice's AvroConverter**: ``from_connect_batch`` / ``to_connect_batch`` with a real Schema
  Registry (Apicurio, started here; its schema lookups happen once, before timing).

``python -m benchmarks.avro_converter arrow`` measures reading a batch into Arrow columns (what
the JDBC and S3 sinks need), with no registry: the decoded path (the converter's per-record reader
gives Connect dicts, then a table is built from them with the S3 sink's Arrow schema) against
``read_avro_values`` (the native reader, straight into Arrow buffers), in ns per record; and the
Elasticsearch sink's documents, decoded then serialised against ``avro_documents`` (native).

Figures are CPU seconds of this process (``time.process_time``), so the registry and the
machine's other load do not count. The ratio is fastavro's CPU ÷ Sluice's for the same records
(1.0 = no overhead). Run: ``python -m benchmarks.avro_converter`` (``SLUICE_BENCH_RECORDS``,
``SLUICE_BENCH_ROUNDS``). Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import os
import time
from collections.abc import Callable
from typing import Any

import fastavro
import pyarrow as pa
import sluice_native

from sluice.connectors.api.schema import (
    BOOLEAN_SCHEMA,
    FLOAT64_SCHEMA,
    INT32_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    Date,
    Decimal,
    Schema,
    Timestamp,
)
from sluice.connectors.s3_common.parquet_format import arrow_schema
from sluice.connectors.sink.elasticsearch.documents import document_bytes
from sluice.converters.avro import AvroConverter
from sluice.converters.avro_arrow import avro_documents, read_avro_values
from sluice.converters.avro_data import AvroData, native_read_plan, strip_logical_types
from sluice.converters.json import JsonConverter
from sluice.deploy.schema_registry import SchemaRegistryServer

RECORDS = int(os.environ.get("SLUICE_BENCH_RECORDS", "200000"))
ROUNDS = int(os.environ.get("SLUICE_BENCH_ROUNDS", "3"))
BATCH = 1000

ROW = Schema.struct(
    [
        ("id", INT64_SCHEMA),
        ("customer", STRING_SCHEMA),
        ("email", STRING_SCHEMA),
        ("amount", Decimal.schema(2)),
        ("placed", Timestamp.SCHEMA),
        ("ships", Date.SCHEMA),
        ("paid", BOOLEAN_SCHEMA),
        ("quantity", INT32_SCHEMA),
        ("note", OPTIONAL_STRING_SCHEMA),
        ("score", FLOAT64_SCHEMA),
    ],
    name="bench.Order",
)


def make_rows(count: int) -> list[dict[str, Any]]:
    base = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return [
        {
            "id": i,
            "customer": f"customer-{i % 5000:05d}",
            "email": f"user{i % 5000}@example.com",
            "amount": decimal.Decimal(i % 100_000).scaleb(-2),
            "placed": base + dt.timedelta(milliseconds=i * 37),
            "ships": dt.date(2024, 1, 1) + dt.timedelta(days=i % 365),
            "paid": i % 3 == 0,
            "quantity": i % 50,
            "note": None if i % 4 else "leave at the door",
            "score": i * 0.5,
        }
        for i in range(count)
    ]


def cpu(fn: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def main() -> list[tuple[str, float]]:
    rows = make_rows(RECORDS)
    batches = [rows[i : i + BATCH] for i in range(0, len(rows), BATCH)]
    schemas = [ROW] * BATCH
    avro = AvroData().avro_schema(ROW)
    plain = fastavro.parse_schema(strip_logical_types(avro))
    logical = fastavro.parse_schema(avro)
    encode = AvroData().encoder(ROW)
    ready = [encode(r) for r in rows]
    header = b"\x00\x00\x00\x00\x01"

    def fastavro_write(parsed: Any, datums: list[Any]) -> list[bytes]:
        out = []
        buf = io.BytesIO()
        for d in datums:
            buf.seek(0)
            buf.truncate()
            buf.write(header)
            fastavro.schemaless_writer(buf, parsed, d)
            out.append(buf.getvalue())
        return out

    with SchemaRegistryServer() as registry:
        converter = AvroConverter()
        converter.configure({"schema.registry.url": registry.url}, False)
        converter.from_connect_batch("bench", schemas, batches[0])  # registers the schema: not timed
        encoded = [converter.from_connect_batch("bench", schemas, b) for b in batches]
        reader = AvroConverter()
        reader.configure({"schema.registry.url": registry.url}, False)
        reader.to_connect_batch("bench", encoded[0])
        flat = [v for b in encoded for v in b if v is not None]
        assert reader.to_connect_batch("bench", list(flat[:BATCH]))[1] == rows[:BATCH]

        def fastavro_read(parsed: Any) -> None:
            for data in flat:
                stream = io.BytesIO(data)
                stream.seek(5)
                fastavro.schemaless_reader(stream, parsed, None)

        json = JsonConverter()
        json.configure({"schemas.enable": "true"}, False)
        json_encoded = [json.from_connect_batch("bench", schemas, b) for b in batches]
        timings = [
            ("write: fastavro, datums ready", cpu(lambda: fastavro_write(plain, ready))),
            ("write: fastavro, logical types", cpu(lambda: fastavro_write(logical, rows))),
            (
                "write: Sluice AvroConverter",
                cpu(lambda: [converter.from_connect_batch("bench", schemas, b) for b in batches]),
            ),
            (
                "write: Sluice JsonConverter (envelope)",
                cpu(lambda: [json.from_connect_batch("bench", schemas, b) for b in batches]),
            ),
            ("read: fastavro, datums", cpu(lambda: fastavro_read(plain))),
            ("read: fastavro, logical types", cpu(lambda: fastavro_read(logical))),
            ("read: Sluice AvroConverter", cpu(lambda: [reader.to_connect_batch("bench", b) for b in encoded])),
            ("read: Sluice read_avro_values (Arrow)", cpu(lambda: [read_avro_values(b, avro) for b in encoded])),
            (
                "read: Sluice JsonConverter (envelope)",
                cpu(lambda: [json.to_connect_batch("bench", b) for b in json_encoded]),
            ),
        ]
    size = sum(len(v) for v in flat) / len(flat)
    json_size = sum(len(v) for b in json_encoded for v in b if v is not None) / RECORDS
    print(
        f"{RECORDS:,} rows of {len(ROW.fields)} fields; Avro {size:.0f} B/record (JSON envelope {json_size:.0f} B); best of {ROUNDS}"
    )
    for name, seconds in timings:
        print(f"  {name:<42} {seconds / RECORDS * 1e6:6.2f} µs/record  {RECORDS / seconds:>10,.0f} records/s per core")
    by = dict(timings)
    print(
        f"ratio write (fastavro logical types ÷ Sluice) {by['write: fastavro, logical types'] / by['write: Sluice AvroConverter']:.2f}, "
        f"(datums ready ÷ Sluice) {by['write: fastavro, datums ready'] / by['write: Sluice AvroConverter']:.2f}"
    )
    print(
        f"ratio read (fastavro logical types ÷ Sluice) {by['read: fastavro, logical types'] / by['read: Sluice AvroConverter']:.2f}, "
        f"(datums ÷ Sluice) {by['read: fastavro, datums'] / by['read: Sluice AvroConverter']:.2f}"
    )
    return timings


def arrow_main() -> list[tuple[str, float]]:
    """A batch of Avro values into an Arrow table: the decoded path against ``read_avro_values``."""
    rows = make_rows(RECORDS)
    avro = AvroData().avro_schema(ROW)
    parsed = fastavro.parse_schema(strip_logical_types(avro))
    encode = AvroData().encoder(ROW)
    header = b"\x00\x00\x00\x00\x01"
    flat = []
    for row in rows:
        buf = io.BytesIO()
        buf.write(header)
        fastavro.schemaless_writer(buf, parsed, encode(row))
        flat.append(buf.getvalue())
    batches = [flat[i : i + BATCH] for i in range(0, len(flat), BATCH)]
    plan = native_read_plan(avro)
    assert plan is not None
    record_reader = sluice_native.AvroRecordReader(plan)  # what AvroConverter reads this schema with
    schema = arrow_schema(ROW)

    def decoded(batch: list[bytes]) -> Any:
        values = [record_reader.read(data, 5) for data in batch]
        return pa.Table.from_pydict({n: [v[n] for v in values] for n in schema.names}, schema=schema)

    assert read_avro_values(batches[0], avro) == decoded(batches[0])
    assert avro_documents(batches[0], avro) == [document_bytes(record_reader.read(d, 5)) for d in batches[0]]
    timings = [
        (
            "decode to Connect dicts (AvroRecordReader)",
            cpu(lambda: [[record_reader.read(d, 5) for d in b] for b in batches]),
        ),
        ("decoded path: dicts, then Arrow table", cpu(lambda: [decoded(b) for b in batches])),
        ("read_avro_values: Arrow table", cpu(lambda: [read_avro_values(b, avro) for b in batches])),
        (
            "decoded path: dicts, then ES documents",
            cpu(lambda: [[document_bytes(record_reader.read(d, 5)) for d in b] for b in batches]),
        ),
        ("avro_documents: ES documents", cpu(lambda: [avro_documents(b, avro) for b in batches])),
    ]
    print(f"{RECORDS:,} rows of {len(ROW.fields)} fields in batches of {BATCH}; best of {ROUNDS}")
    for name, seconds in timings:
        print(f"  {name:<44} {seconds / RECORDS * 1e9:7.0f} ns/record")
    by = dict(timings)
    print(
        f"ratio (decoded path ÷ read_avro_values) "
        f"{by['decoded path: dicts, then Arrow table'] / by['read_avro_values: Arrow table']:.1f}, "
        f"(decoded documents ÷ avro_documents) "
        f"{by['decoded path: dicts, then ES documents'] / by['avro_documents: ES documents']:.1f}"
    )
    return timings


if __name__ == "__main__":
    import sys

    arrow_main() if sys.argv[1:] == ["arrow"] else main()
