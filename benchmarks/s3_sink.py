"""topic → S3 sink (JSON lines and Parquet/zstd) against two raw limits measured in the same run.

* **boto3**: uploading the very bytes the sink wrote (same object sizes) with bare boto3
  ``put_object`` to the same server: the storage limit.
* **pyarrow** (Parquet only): the same rows, already Python dicts in memory, built into Arrow
  tables and written as Parquet/zstd with pyarrow alone, one table per object.

The sink run covers everything a deployment does: consume from a real broker, JsonConverter,
partition, encode, upload to a real S3 server (S3Proxy) and commit. It starts when the connector
is configured and ends when the last object is visible in the bucket. Four cases: JSON lines and
Parquet from schemaless JSON values, and Parquet from JSON with schemas (``schemas.enable=true``,
each value the ``{"schema": …, "payload": …}`` envelope, ``ts`` a Connect Timestamp), as Connect
users configure it, and Parquet from Avro with a Schema Registry (``SLUICE_BENCH_FORMATS``,
default ``json,parquet,parquet+schemas,parquet+avro``). With no
transforms the sink takes the consumed bytes: JSON lines writes them as they are, Parquet reads
them into typed columns with the native parser; see docs/connectors/s3.md.

Before the timed rounds, one small untimed run per format warms what a running deployment has
warm already: the broker's consumer-offsets topic (created by the first consumer group of a new
cluster: 1-3 s here), the connector's imports and its boto3 client. Without it the first round
(the only one with ``SLUICE_BENCH_ROUNDS=1``) measured that one-time start-up as much as the
throughput (JSON: 0.43 instead of about 0.6 for 1M records).

For Parquet each round also drains the topic with a bare consumer (no decoding): the sink cannot
be faster than consuming the bytes and then building Parquet from rows already in memory, so
``pyarrow ÷ (consume + pyarrow)``, printed as the serial bound, is about the best ratio against
pyarrow these cores allow (the two can overlap on two cores, but the broker's side of consuming
takes CPU from the same cores). Realistic JSON lines print ``boto3 ÷ (consume + boto3)`` likewise:
their envelopes are about five times the bytes of the payloads the sink writes, so consuming them
bounds the ratio against boto3 far below the schemaless case's.

For Parquet the boto3 limit uploads the compressed objects, about 1 % of the JSON bytes, in a few
hundredths of a second: that ratio is dominated by consuming and converting the records (over
1 µs per record on this machine before any encoding) and cannot approach the JSON one. Run: ``python -m benchmarks.s3_sink``
(``SLUICE_BENCH_RECORDS``, ``SLUICE_BENCH_ROUNDS``). Prints figures and ratios; asserts nothing.

``realistic`` (cases ``json+realistic`` and ``parquet+realistic``) is the topic a CDC pipeline or a
Connect user produces, the one ``benchmarks/jdbc_sink.py`` measures (its rows and encoders are
imported from there): keys are JsonConverter envelopes of a struct ``{id}``, values envelopes of ten
fields with a Connect ``Decimal`` (base64, a third negative), a ``Timestamp`` (1960-2020), a
``Date``, an int16, a 40-byte text and an optional string (a quarter null); the worker's key and
value converters are JsonConverter with ``schemas.enable=true``. Each realistic case runs with
``consumer.override.max.poll.records`` 500 (Connect's default) and 3000
(``SLUICE_BENCH_POLLS``), ``store.kafka.keys`` off (the default). Its pyarrow limit builds the
rows, already Python objects (``Decimal``, ``datetime``, ``date``), into the Arrow schema the sink
gives them. A small untimed run first checks that the objects hold exactly the rows produced.
Each sink run also prints the CPU seconds of the worker (the process less the benchmark's own
main thread, which polls the bucket), of its task thread and of its upload threads, and the
worker's CPU per record in µs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import io
import os
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
from confluent_kafka import Producer

from benchmarks.common import (
    RECORDS,
    ROUNDS,
    Result,
    broker,
    cpu_seconds,
    create_topic,
    median_result,
    thread_times,
    wait_until,
)
from benchmarks.file_sink import raw_consume
from benchmarks.jdbc_sink import (
    REALISTIC_NAMES,
    REALISTIC_SCHEMA,
    _decimal_base64,
    encode_realistic,
    make_realistic_rows,
)
from sluice.connectors.s3_common.formats import arrow_schema
from sluice.converters.avro import AvroConverter
from sluice.converters.json import JsonConverter
from sluice.deploy.schema_registry import SchemaRegistryServer
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.worker.config.models import WorkerConfig
from sluice.worker.runtime import tune_gc
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.worker import Worker
from tests.services.s3_server import S3Server

FLUSH_SIZE = 100_000
TOPICS_DIR = "topics/"  # the sink's default topics.dir
CONNECTOR = "sluice.connectors.sink.s3.connector.S3SinkConnector"


#: The cases measured: object format, then ``+schemas`` for JSON values with schemas or ``+avro`` for
#: Avro values (AvroConverter with a Schema Registry, started for the run); schemaless JSON without.
CASES = [
    c.strip()
    for c in os.environ.get(
        "SLUICE_BENCH_FORMATS", "json,parquet,parquet+schemas,parquet+avro,json+realistic,parquet+realistic"
    ).split(",")
    if c.strip()
]
REALISTIC = "realistic"
#: ``consumer.override.max.poll.records`` of the realistic runs (``SLUICE_BENCH_POLLS``): Connect's
#: default, and a larger poll.
REALISTIC_POLLS = [int(p) for p in os.environ.get("SLUICE_BENCH_POLLS", "500,3000").split(",") if p.strip()]
#: The Schema Registry's URL while an Avro case needs one (set by :func:`main`).
REGISTRY: dict[str, str] = {}
VALUE_NAMES = {
    "schemaless": "schemaless JSON",
    "schemas": "JSON with schemas",
    "avro": "Avro",
    REALISTIC: "keyed realistic JSON with schemas",
}
#: The Connect schema of a row as JsonConverter writes it (``schemas.enable=true``).
SCHEMA = orjson.dumps(
    {
        "type": "struct",
        "fields": [
            {"type": "int64", "optional": False, "field": "id"},
            {"type": "string", "optional": True, "field": "customer"},
            {"type": "double", "optional": True, "field": "amount"},
            {"type": "boolean", "optional": True, "field": "paid"},
            {
                "type": "int64",
                "optional": True,
                "name": "org.apache.kafka.connect.data.Timestamp",
                "version": 1,
                "field": "ts",
            },
            {"type": "string", "optional": True, "field": "note"},
        ],
        "optional": False,
        "name": "bench.Row",
    }
)


def herder(bootstrap: str, values: str = "schemaless") -> StandaloneHerder:
    """An in-process standalone herder; the connector is found by the Python path of its entry point."""
    config = WorkerConfig.from_mapping(
        {
            "bootstrap.servers": bootstrap,
            "listeners": "http://127.0.0.1:0",
            "offset.flush.interval.ms": "5000",
            **(
                {"key.converter": "JsonConverter", "key.converter.schemas.enable": "true"}
                if values == REALISTIC
                else {"key.converter": "StringConverter"}
            ),
            **(
                {"value.converter": "AvroConverter", "value.converter.schema.registry.url": REGISTRY["url"]}
                if values == "avro"
                else {
                    "value.converter": "JsonConverter",
                    "value.converter.schemas.enable": str(values in ("schemas", REALISTIC)).lower(),
                }
            ),
        }
    )
    h = StandaloneHerder(Worker(config, PluginRegistry(), MemoryOffsetStore()))
    h.start()
    tune_gc()
    return h


def make_rows(count: int) -> list[dict[str, Any]]:
    """Rows of about 200 bytes of JSON each."""
    pad = "abcdefghijklmnopqrstuvwxyz0123456789" * 3
    return [
        {
            "id": i,
            "customer": f"customer-{i % 5000:05d}",
            "amount": i * 0.25,
            "paid": i % 3 == 0,
            "ts": 1_700_000_000_000 + i,
            "note": pad,
        }
        for i in range(count)
    ]


def encode_values(topic: str, rows: list[dict[str, Any]], values: str) -> list[bytes]:
    """The rows as the producer's converter writes them: JSON (in the envelope for ``schemas``), or
    Avro (the envelopes decoded into Connect data and written by the AvroConverter)."""
    plain = [orjson.dumps(row) for row in rows]
    if values == "schemaless":
        return plain
    envelopes = [b'{"schema":' + SCHEMA + b',"payload":' + value + b"}" for value in plain]
    if values == "schemas":
        return envelopes
    json_converter = JsonConverter()
    json_converter.configure({"schemas.enable": True}, False)
    avro = AvroConverter()
    avro.configure({"schema.registry.url": REGISTRY["url"]}, False)
    try:
        return avro.from_connect_batch(topic, *json_converter.to_connect_batch(topic, envelopes))  # type: ignore[return-value]
    finally:
        avro.close()


def fill_topic(bootstrap: str, rows: list[Any], values: str = "schemaless") -> tuple[str, int]:
    """A new topic holding ``rows`` (dicts; realistic rows are tuples, written with their keys)."""
    topic = create_topic(bootstrap, f"bench-s3-{time.time_ns()}")
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 1_000_000})
    nbytes = 0
    pairs = (
        map(encode_realistic, rows) if values == REALISTIC else ((None, v) for v in encode_values(topic, rows, values))
    )
    for key, value in pairs:
        nbytes += len(value)
        while True:
            try:
                producer.produce(topic, value, key)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush()
    return topic, nbytes


_clients: dict[int, Any] = {}


def objects(s3: S3Server, bucket: str) -> dict[str, int]:
    # One client for all polls (the main thread only): building a boto3 client costs tens of
    # milliseconds of CPU under the GIL, which the sink thread would lose at every poll.
    client = _clients.get(id(s3))
    if client is None:
        client = _clients[id(s3)] = s3.client()
    out: dict[str, int] = {}
    # Only the sink's objects (topics.dir): S3Proxy's filesystem backend also lists the parts of
    # multipart uploads in progress (".mpus-<id>-<key>-<n>"), which would end the run early.
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=TOPICS_DIR):
        for item in page.get("Contents", ()):
            if not item["Key"].endswith("/"):  # S3Proxy's filesystem backend lists directories too
                out[item["Key"]] = item["Size"]
    return out


@dataclass
class SinkRun:
    """One timed sink run: its rate and the CPU seconds the worker used (every thread but the
    benchmark's main one), of which its task thread and its upload threads."""

    result: Result
    cpu: float
    task_cpu: float
    upload_cpu: float

    @property
    def us_per_record(self) -> float:
        return self.cpu / self.result.records * 1e6


def sluice_sink(
    bootstrap: str,
    s3: S3Server,
    topic: str,
    count: int,
    nbytes: int,
    fmt: str,
    flush_size: int = FLUSH_SIZE,
    values: str = "schemaless",
    poll: int | None = None,
) -> tuple[SinkRun, str]:
    bucket = s3.create_bucket(f"bench-{uuid.uuid4().hex[:12]}")
    expected = count // flush_size
    h = herder(bootstrap, values)
    try:
        config = {
            "connector.class": CONNECTOR,
            "topics": topic,
            **s3.connector_config(bucket),
            "format.class": fmt,
            "parquet.codec": "zstd",
            "flush.size": str(flush_size),
        }
        if poll is not None:  # records per put(), as Connect's max.poll.records
            config["consumer.override.max.poll.records"] = str(poll)
        cpu0, main0 = cpu_seconds(), time.thread_time()
        start = time.perf_counter()
        h.put_connector_config(f"bench-s3-{time.time_ns()}", config, allow_replace=False)
        wait_until(lambda: len(objects(s3, bucket)) >= expected, timeout=900, poll=0.1)
        elapsed = time.perf_counter() - start
        cpu = cpu_seconds() - cpu0 - (time.thread_time() - main0)
        task_cpu, upload_cpu = _threads_cpu("task-"), _threads_cpu("s3-upload")
    finally:
        h.stop()
    label = f"{fmt} from {VALUE_NAMES[values]}" + (f", poll {poll}" if poll is not None else "")
    return SinkRun(
        Result(f"Sluice topic → S3 sink ({label})", count, nbytes, elapsed), cpu, task_cpu, upload_cpu
    ), bucket


def _threads_cpu(prefix: str) -> float:
    """CPU seconds of this process's live threads whose name starts with ``prefix`` (Linux ``/proc``, else 0)."""
    ids = {t.native_id for t in threading.enumerate() if t.name.startswith(prefix)}
    return sum(seconds for tid, (_, seconds) in thread_times().items() if tid in ids)


def warm_up(bootstrap: str, s3: S3Server, rows: list[Any], fmt: str, values: str = "schemaless") -> None:
    """One untimed run of ``WARM_UP_RECORDS`` records (one object), see the module docstring; the
    realistic topic's objects are checked against the rows produced."""
    topic, nbytes = fill_topic(bootstrap, rows[:WARM_UP_RECORDS], values)
    poll = REALISTIC_POLLS[0] if values == REALISTIC and REALISTIC_POLLS else None
    _, bucket = sluice_sink(
        bootstrap, s3, topic, WARM_UP_RECORDS, nbytes, fmt, flush_size=WARM_UP_RECORDS, values=values, poll=poll
    )
    if values == REALISTIC:
        check_realistic(s3, bucket, fmt, rows[:WARM_UP_RECORDS])


WARM_UP_RECORDS = 1_000


def raw_boto3(s3: S3Server, source_bucket: str, count: int, nbytes: int) -> Result:
    """Upload the same objects (same bytes) with bare boto3."""
    client = s3.client()
    bodies = [client.get_object(Bucket=source_bucket, Key=k)["Body"].read() for k in sorted(objects(s3, source_bucket))]
    bucket = s3.create_bucket(f"bench-raw-{uuid.uuid4().hex[:12]}")
    start = time.perf_counter()
    for i, body in enumerate(bodies):
        client.put_object(Bucket=bucket, Key=f"raw/{i:06d}", Body=body)
    return Result("bare boto3 put_object, same bytes", count, nbytes, time.perf_counter() - start)


def raw_pyarrow(rows: list[Any], nbytes: int, values: str = "schemaless") -> Result:
    """dicts → Arrow → Parquet (zstd) with pyarrow alone, one table per object (realistic rows:
    into the Arrow schema the sink gives them)."""
    schema = realistic_arrow_schema() if values == REALISTIC else None
    dicts = [dict(zip(REALISTIC_NAMES, row, strict=True)) for row in rows] if values == REALISTIC else rows
    start = time.perf_counter()
    for i in range(0, len(dicts), FLUSH_SIZE):
        table = pa.Table.from_pylist(dicts[i : i + FLUSH_SIZE], schema=schema)
        pq.write_table(table, io.BytesIO(), compression="zstd")
    return Result("pyarrow dicts → Arrow → Parquet zstd", len(rows), nbytes, time.perf_counter() - start)


def realistic_arrow_schema() -> Any:
    """The Arrow schema of the sink's Parquet objects for the realistic values."""
    converter = JsonConverter()
    return arrow_schema(converter.as_connect_schema(orjson.loads(REALISTIC_SCHEMA)))


def check_realistic(s3: S3Server, bucket: str, fmt: str, rows: list[Any]) -> None:
    """Untimed: the objects hold exactly ``rows``, in order. Parquet: the typed columns
    (``Decimal``, UTC ``datetime``, ``date``); JSON lines: each value as Confluent's JsonFormat
    writes it (decimals as base64 of the unscaled value, timestamps in ms, dates in days; a
    decimal written as a JSON number, as the sink did before it implemented
    ``json.decimal.format``, is taken at its value)."""
    client = s3.client()
    bodies = [client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in sorted(objects(s3, bucket))]
    written: list[Any]
    if fmt == "parquet":
        written = [tuple(r.values()) for body in bodies for r in pq.read_table(io.BytesIO(body)).to_pylist()]
        expected: list[Any] = [(i, amount, at.replace(tzinfo=dt.UTC), *rest) for i, amount, at, *rest in rows]
    else:
        lines: list[dict[str, Any]] = [orjson.loads(line) for body in bodies for line in body.splitlines()]
        for value in lines:
            if not isinstance(value["amount"], str):
                value["amount"] = _decimal_base64(decimal.Decimal(str(value["amount"])))
        written, expected = lines, [orjson.loads(encode_realistic(row)[1])["payload"] for row in rows]
    if written != expected:
        wrong = next((i for i, (a, b) in enumerate(zip(written, expected)) if a != b), min(len(written), len(expected)))
        got = written[wrong] if wrong < len(written) else None
        want = expected[wrong] if wrong < len(expected) else None
        raise RuntimeError(
            f"the sink wrote {len(written)} records, not the {len(rows)} produced; #{wrong}: {got} ≠ {want}"
        )


def main() -> list[tuple[Result, Result]]:
    tune_gc()
    count = RECORDS - RECORDS % FLUSH_SIZE or FLUSH_SIZE
    kinds = {case.partition("+")[2] or "schemaless" for case in CASES}
    rows = make_rows(count) if kinds - {REALISTIC} else []
    realistic_rows = make_realistic_rows(count) if REALISTIC in kinds else []
    print(f"topic → S3 sink: {count:,} records (~200 B JSON), flush.size={FLUSH_SIZE:,}, {ROUNDS} rounds")
    pairs: list[tuple[Result, Result]] = []
    with (
        broker() as bootstrap,
        S3Server() as s3,
        SchemaRegistryServer(kill_with_parent=True) if "avro" in kinds else contextlib.nullcontext() as registry,
    ):
        if registry is not None:
            REGISTRY["url"] = registry.url
        print(f"S3 server: {s3.kind} at {s3.endpoint_url}")
        topics = {kind: fill_topic(bootstrap, realistic_rows if kind == REALISTIC else rows, kind) for kind in kinds}
        for case in CASES:
            fmt, values = case.partition("+")[0], case.partition("+")[2] or "schemaless"
            case_rows = realistic_rows if values == REALISTIC else rows
            topic, nbytes = topics[values]
            warm_up(bootstrap, s3, case_rows, fmt, values)
            polls: list[int | None] = list(REALISTIC_POLLS) if values == REALISTIC else [None]
            for poll in polls:
                name = case if poll is None else f"{case}/{poll}"
                sinks: list[SinkRun] = []
                uploads, arrows, consumes = [], [], []
                for _ in range(ROUNDS):
                    run, bucket = sluice_sink(bootstrap, s3, topic, count, nbytes, fmt, values=values, poll=poll)
                    sink = run.result
                    sinks.append(run)
                    uploads.append(raw_boto3(s3, bucket, count, nbytes))
                    if fmt == "parquet" or values == REALISTIC:
                        consumes.append(raw_consume(bootstrap, topic, count))
                    if fmt == "parquet":
                        arrows.append(raw_pyarrow(case_rows, nbytes, values))
                    ratio = f"   vs boto3 {sink.rate / uploads[-1].rate:.2f}"
                    if consumes and not arrows:  # realistic JSON: envelopes of ~1 kB consumed, ~200 B written
                        ratio += f" (serial bound {_serial_bound(consumes[-1], uploads[-1]):.2f})"
                    if arrows:
                        ratio += f"   vs pyarrow {sink.rate / arrows[-1].rate:.2f}"
                        ratio += f" (serial bound {_serial_bound(consumes[-1], arrows[-1]):.2f})"
                    print(
                        f"  {name} round: sluice {sink.rate:>10,.0f} rec/s{ratio}   worker CPU {run.cpu:.2f} s "
                        f"({run.us_per_record:.2f} µs/record; task thread {run.task_cpu:.2f} s, "
                        f"upload threads {run.upload_cpu:.2f} s)"
                    )
                results = [run.result for run in sinks]
                sink, upload = median_result(results), median_result(uploads)
                us = sorted(run.us_per_record for run in sinks)[len(sinks) // 2]
                print(upload.line())
                print(f"{sink.line(upload)}  CPU {us:.2f} µs/record (median)")
                pairs.append((upload, sink))
                if arrows:
                    arrow = median_result(arrows)
                    print(arrow.line())
                    print(sink.line(arrow))
                    pairs.append((arrow, sink))
                if ROUNDS > 1:  # each round's ratio pairs runs that saw the same load from neighbours
                    line = f"  {name} median of round ratios: vs boto3 {_median_ratio(results, uploads):.2f}"
                    if consumes and not arrows:
                        bounds = sorted(_serial_bound(c, u) for c, u in zip(consumes, uploads, strict=True))
                        line += f" (serial bound {bounds[len(bounds) // 2]:.2f})"
                    if arrows:
                        line += f"   vs pyarrow {_median_ratio(results, arrows):.2f}"
                        bounds = sorted(_serial_bound(c, a) for c, a in zip(consumes, arrows, strict=True))
                        line += f" (serial bound {bounds[len(bounds) // 2]:.2f})"
                    print(line)
    return pairs


def _serial_bound(consume: Result, raw: Result) -> float:
    """A raw limit's time (pyarrow's; boto3's for realistic JSON lines) over the time of consuming
    the topic and then running it (same records): about the best ratio these cores allow."""
    return raw.seconds / (consume.seconds + raw.seconds)


def _median_ratio(ours: list[Result], raws: list[Result]) -> float:
    ratios = sorted(o.rate / r.rate for o, r in zip(ours, raws, strict=True))
    return ratios[len(ratios) // 2]


if __name__ == "__main__":
    main()
