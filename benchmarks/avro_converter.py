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
from sluice.converters.avro import AvroConverter
from sluice.converters.avro_data import AvroData, strip_logical_types
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


if __name__ == "__main__":
    main()
