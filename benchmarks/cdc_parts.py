"""Where the CDC source's time goes, part by part, without and with JsonConverter's schema envelope.

Run: ``python -m benchmarks.cdc_parts``. Sizes: ``SLUICE_BENCH_CDC_PARTS_CHANGES`` (200,000) changes
of :mod:`benchmarks.cdc_source`'s table and mix, ``SLUICE_BENCH_CDC_PARTS_ROUNDS`` (3) rounds of
the in-process parts (the median is printed), ``SLUICE_BENCH_CDC_PARTS_CODECS`` (``none,lz4,zstd``:
the producer's ``compression.type`` values the produce part is also run with; Sluice's source
producer and Connect's both default to none), ``SLUICE_BENCH_CDC_PARTS_E2E`` (1: also run the
connector end to end, ``0`` skips it). Prints, with no assertions, for schemaless JSON and for JSON
with schemas (``schemas.enable=true`` for keys and values):

1. **encoding**: the replication messages of the changes are captured once from the slot with the
   connector's own :class:`ReplicationStream`; then the connector's :class:`ChangeDecoder`, with
   the runtime's offer of the converters' wire formats (so row changes go to the native
   ``CdcEncoder``), turns them into key and value bytes in this thread, in batches of
   ``max.batch.size`` as the task hands them out: CPU seconds, ns per change and per output byte;
   ``native encode()`` is the encoder's own call alone, over the same messages;
2. **produce**: exactly those byte strings handed to a ``confluent_kafka`` producer configured as
   the worker configures a source task's (``SOURCE_PRODUCER_DEFAULTS``), in the runner's loop, then
   flushed: the CPU seconds of this process (the producing thread's, librdkafka's threads');
3. **broker**: the broker JVM's CPU seconds over the same produce (``/proc/<pid>/stat``, found by
   the listening port; its idle rate, measured first, subtracted);
4. **end to end**: the connector in an in-process herder from its own slot to the topic, for
   reference (changes/s, the connector's CPU as :class:`~benchmarks.cdc_source.ConnectorCpu`
   counts it, the broker's CPU).

CPU seconds move less than wall time when other work shares the machine; per byte is per byte of
key + value handed to the producer (before compression).
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import psycopg
from confluent_kafka import Producer

from benchmarks.cdc_source import (
    COLUMNS,
    ConnectorCpu,
    Watermark,
    connector_config,
    drop_slot,
    make_changes,
    process_cpu,
)
from benchmarks.common import broker, create_topic, herder, thread_times, wait_until
from sluice.connectors.api import Serialization, SourceRecordBatch
from sluice.connectors.source.postgres_cdc import catalog
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.decoder import ChangeDecoder, Relation
from sluice.connectors.source.postgres_cdc.replication import ReplicationStream
from sluice.connectors.source.postgres_cdc.tables import Table
from sluice.connectors.source.postgres_cdc.task import source_partition
from sluice.converters.json import JsonConverter
from sluice.worker.execution.clients import SOURCE_PRODUCER_DEFAULTS
from sluice.worker.runtime import tune_gc
from tests.services.postgres import PostgresServer

CHANGES = int(os.environ.get("SLUICE_BENCH_CDC_PARTS_CHANGES", "200000"))
ROUNDS = int(os.environ.get("SLUICE_BENCH_CDC_PARTS_ROUNDS", "3"))
CODECS = [c for c in os.environ.get("SLUICE_BENCH_CDC_PARTS_CODECS", "none,lz4,zstd").split(",") if c]
END_TO_END = os.environ.get("SLUICE_BENCH_CDC_PARTS_E2E", "1") != "0"
BATCH = 4096  # the benchmark connector's max.batch.size (benchmarks.cdc_source.connector_config)
MODES = (("schemaless", False), ("with schemas", True))
SLOT = {False: "parts_e2e_plain", True: "parts_e2e_schemas"}


@dataclass
class Encoded:
    """What the decoder handed out for the captured changes, flattened for the producer."""

    topic: str
    keys: list[bytes | None]
    values: list[bytes | None]
    changes: int

    @property
    def nbytes(self) -> int:
        return sum(len(k) for k in self.keys if k) + sum(len(v) for v in self.values if v)


def capture(pg: PostgresServer, slot: str, changes: int) -> list[bytes]:
    """The slot's XLogData messages up to the commit of the ``changes``-th row change, read as the
    task reads them."""
    conninfo = {
        "host": "127.0.0.1",
        "port": pg.port,
        "dbname": pg.database,
        "user": "postgres",
        "replication": "database",
    }
    stream = ReplicationStream(conninfo, slot, "bench_pub")
    stream.open()
    messages: list[bytes] = []
    seen = 0
    try:
        while True:
            data = stream.read(10.0)
            if data is None:
                raise TimeoutError("the replication stream stalled")
            if data[0] != 119:  # w: XLogData (keepalives are skipped)
                continue
            messages.append(bytes(data))
            kind = data[25]
            if kind in (73, 85, 68):  # I, U, D
                seen += 1
            elif kind == 67 and seen >= changes:  # C
                return messages
    finally:
        stream.close()


def offered(schemas: bool) -> Serialization:
    """What the runtime offers a source task whose key and value converters are JsonConverters."""
    keys, values = JsonConverter(), JsonConverter()
    keys.configure({"schemas.enable": schemas}, True)
    values.configure({"schemas.enable": schemas}, False)
    return Serialization(keys.wire_format(), values.wire_format())


def make_decoder(conn: psycopg.Connection[Any], cfg: PostgresCdcConfig, schemas: bool) -> ChangeDecoder:
    """The task's decoder (its tables described from the catalog as the task does), serializing natively."""
    table_filter = catalog.TableFilter(cfg)

    def load(relid: int, relation: Relation, is_signal: bool) -> tuple[Table | None, bool]:
        table = catalog.load_table(conn, relid, cfg, table_filter, relation)
        return table, table is not None

    decoder = ChangeDecoder(
        topic_prefix=cfg.topic_prefix,
        database=cfg.database_dbname,
        partition=source_partition(cfg),
        tombstones=cfg.tombstones_on_delete,
        skipped_operations=set(cfg.skipped_operations),
        load_table=load,
    )
    decoder.native = offered(schemas)
    return decoder


def encode(decoder: ChangeDecoder, messages: list[bytes], keep: bool) -> tuple[list[Any], float, int]:
    """The messages through ``decoder`` in the task's batches; (what it handed out, CPU seconds,
    page faults).

    ``keep=False`` drops each batch once handed out, as the runner does once it produced it (its
    bytes were copied into librdkafka's queue): the memory of one batch is reused for the next,
    where keeping them all would fault in fresh pages for every record."""
    handle = decoder.handle
    out: list[Any] = []
    take = out.append if keep else _drop
    cpu0, faults0 = time.thread_time(), page_faults(resource.RUSAGE_THREAD)
    for m in messages:
        handle(m)
        if decoder.outbox:
            for item in decoder.outbox:
                take(item)
            decoder.outbox = []
        if len(decoder.encoded) + len(decoder.records) >= BATCH:
            take(decoder.finish_batch())
    take(decoder.finish_batch())
    return out, time.thread_time() - cpu0, page_faults(resource.RUSAGE_THREAD) - faults0


def page_faults(who: int = resource.RUSAGE_SELF) -> int:
    """Minor page faults so far: pages the kernel mapped for the process on first touch. A record
    of the schema envelope is about one 4 KiB page, so memory the allocator takes fresh (a heap
    that grew, or that glibc trimmed and grows again: ``MALLOC_TRIM_THRESHOLD_``) costs a fault
    per record; the count shows where that happens."""
    return resource.getrusage(who).ru_minflt


def _drop(item: Any) -> None:
    pass


def flatten(handed_out: list[Any], changes: int) -> Encoded:
    """The handed-out batches as one topic's keys and values; every change must have been encoded natively."""
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    topic = ""
    for item in handed_out:
        if not len(item):
            continue
        if not (isinstance(item, SourceRecordBatch) and item.serialized and item.keys is not None and item.topics):
            raise RuntimeError("some changes took the Python path; the figures would mix both paths")
        topic = item.topics[0]
        keys.extend(item.keys)
        values.extend(item.values)
    return Encoded(topic, keys, values, changes)


def native_only(decoder: ChangeDecoder, messages: list[bytes]) -> float:
    """CPU seconds of the encoder's own ``encode()`` calls over the row changes (no decoder around them)."""
    encoder = decoder.encoder(next(t for t in decoder.tables.values() if t is not None))
    rows = [m for m in messages if m[25] in (73, 85, 68)]
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    fn = encoder.encode
    now = time.time_ns()
    cpu0 = time.thread_time()
    for i, m in enumerate(rows):
        fn(m, 1000, 1_700_000_000_000_000, 0x1000000, now, keys, values)
        if i % BATCH == 0:
            keys, values = [], []
    return time.thread_time() - cpu0


def encoding(
    conn: psycopg.Connection[Any], cfg: PostgresCdcConfig, messages: list[bytes], changes: int, schemas: bool
) -> tuple[Encoded, float, float, float]:
    """(the encoded records, median decoder CPU s, median native-only CPU s, median page faults) over
    ROUNDS rounds."""
    decoder_cpu, native_cpu, faults = [], [], []
    for _ in range(ROUNDS):
        decoder = make_decoder(conn, cfg, schemas)
        _, cpu, faulted = encode(decoder, messages, keep=False)
        decoder_cpu.append(cpu)
        faults.append(faulted)
        native_cpu.append(native_only(decoder, messages))
    handed_out = encode(make_decoder(conn, cfg, schemas), messages, keep=True)[0]  # for the produce part
    encoded = flatten(handed_out, changes)
    return encoded, statistics.median(decoder_cpu), statistics.median(native_cpu), statistics.median(faults)


def listening_pid(port: int) -> int | None:
    """The local process listening on TCP ``port`` (the broker), from ``/proc``; ``None`` if not found."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in fds):
                return int(pid)
        except OSError:
            continue
    return None


class BrokerCpu:
    """The broker process's CPU seconds over an interval, its idle rate (measured once) subtracted."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.idle = 0.0
        if pid is not None:
            time.sleep(0.5)
            cpu0, t0 = process_cpu(pid), time.perf_counter()
            time.sleep(3.0)
            self.idle = (process_cpu(pid) - cpu0) / (time.perf_counter() - t0)

    def start(self) -> Callable[[], float]:
        if self.pid is None:
            return lambda: float("nan")
        pid, cpu0, t0 = self.pid, process_cpu(self.pid), time.perf_counter()
        return lambda: process_cpu(pid) - cpu0 - self.idle * (time.perf_counter() - t0)


@dataclass
class Produced:
    seconds: float
    caller_cpu: float  # the producing (task) thread
    librdkafka_cpu: float  # librdkafka's threads
    broker_cpu: float
    sent_bytes: int  # what librdkafka sent to the broker (after compression, with protocol overhead)
    faults: int  # this process's page faults


def produce(bootstrap: str, encoded: Encoded, codec: str, broker_cpu: BrokerCpu) -> Produced:
    """The encoded records through a producer set up as the worker sets up a source task's, in the
    runner's loop (one ``produce`` per record, ``poll(0)`` per batch), then flushed."""
    topic = create_topic(bootstrap, f"parts{time.time_ns()}")
    stats: list[dict[str, Any]] = []
    config = {
        "bootstrap.servers": bootstrap,
        **SOURCE_PRODUCER_DEFAULTS,
        "compression.type": codec,
        "on_delivery": _failed,
        "statistics.interval.ms": 1000,  # as the runner sets it
        "stats_cb": lambda text: stats.append(orjson.loads(text)),
    }
    before = set(thread_times())
    producer = Producer(config)
    producer.produce(topic, b"warm-up")  # connections, metadata, the idempotent producer's id
    producer.flush(30)
    threads0, cpu0, broker_done, faults0 = thread_times(), time.thread_time(), broker_cpu.start(), page_faults()
    start = time.perf_counter()
    topics = [topic] * len(encoded.values)
    send = producer.produce
    for first in range(0, len(encoded.values), BATCH):
        rows = zip(
            topics[first : first + BATCH], encoded.keys[first : first + BATCH], encoded.values[first : first + BATCH]
        )
        for t, k, v in rows:
            while True:
                try:
                    send(t, v, k)
                    break
                except BufferError:  # the queue is full: the runner waits for deliveries too
                    producer.poll(0.01)
        producer.poll(0)
    producer.flush(600)
    seconds, caller, broker_used = time.perf_counter() - start, time.thread_time() - cpu0, broker_done()
    faults = page_faults() - faults0
    threads1 = thread_times()
    rdk = sum(
        s - threads0.get(tid, (n, 0.0))[1]
        for tid, (n, s) in threads1.items()
        if tid not in before and n.startswith("rdk:")
    )
    time.sleep(1.1)
    producer.poll(0)  # the last statistics
    sent = int(stats[-1].get("tx_bytes", 0)) if stats else 0
    return Produced(seconds, caller, rdk, broker_used, sent, faults)


def _failed(err: Any, msg: Any) -> None:
    if err is not None:
        raise RuntimeError(f"delivery failed: {err}")


@dataclass
class EndToEnd:
    seconds: float
    records: int
    connector_cpu: float
    broker_cpu: float
    threads: str
    faults: int  # this process's page faults


def end_to_end(
    bootstrap: str, pg: PostgresServer, table: str, slot: str, records: int, schemas: bool, broker_cpu: BrokerCpu
) -> EndToEnd:
    """The connector from ``slot`` (holding the same changes) to a fresh topic."""
    prefix = f"parts{time.time_ns()}"
    topic = create_topic(bootstrap, f"{prefix}.public.{table}")
    flag = "true" if schemas else "false"
    config = connector_config(
        pg, prefix, slot, table,
        **{"snapshot.mode": "no_data", "key.converter.schemas.enable": flag, "value.converter.schemas.enable": flag},
    )  # fmt: skip
    h = herder(bootstrap, **{"offset.flush.interval.ms": "5000"})
    watermark = Watermark(bootstrap, topic)
    try:
        meter, broker_done, start = ConnectorCpu(watermark.threads), broker_cpu.start(), time.perf_counter()
        faults0 = page_faults()
        h.put_connector_config(f"bench-parts-{flag}", config, allow_replace=False)
        wait_until(lambda: watermark() >= records, timeout=1200, poll=0.05)
        seconds, broker_used, (cpu, threads) = time.perf_counter() - start, broker_done(), meter.stop()
        faults = page_faults() - faults0
    finally:
        watermark.close()
        h.stop()
    return EndToEnd(seconds, records, cpu, broker_used, threads, faults)


def row(name: str, plain: float, schemas: float, unit: str, per_byte: tuple[float, float] | None = None) -> str:
    ratio = schemas / plain if plain else float("nan")
    line = f"  {name:<34} {plain:>12,.2f} {schemas:>12,.2f} {unit:<10} {ratio:>6.2f}"
    if per_byte is not None:
        line += f"   {per_byte[0]:>8.2f} {per_byte[1]:>8.2f} ns/B"
    return line


def report_encoding(results: dict[bool, tuple[Encoded, float, float, float]]) -> None:
    (plain, p_cpu, p_native, p_faults), (full, s_cpu, s_native, s_faults) = results[False], results[True]
    n = plain.changes
    print(f"{'':36} {'schemaless':>12} {'with schemas':>12} {'':10} {'ratio':>6}   {'per byte (ns/B), both':>19}")
    print(row("records (with tombstones)", len(plain.values), len(full.values), "records"))
    print(row("bytes per change (key + value)", plain.nbytes / n, full.nbytes / n, "B"))
    print(row("encoding: decoder + native, CPU", p_cpu, s_cpu, "s"))
    print(
        row(
            "  per change",
            p_cpu / n * 1e9,
            s_cpu / n * 1e9,
            "ns",
            (p_cpu / plain.nbytes * 1e9, s_cpu / full.nbytes * 1e9),
        )
    )
    print(row("  native encode() alone, per change", p_native / n * 1e9, s_native / n * 1e9, "ns",
              (p_native / plain.nbytes * 1e9, s_native / full.nbytes * 1e9)))  # fmt: skip
    rest_p, rest_s = (p_cpu - p_native) / n * 1e9, (s_cpu - s_native) / n * 1e9
    print(row("  the decoder around it, per change", rest_p, rest_s, "ns"))
    print(row("  page faults per 1,000 changes", p_faults / n * 1000, s_faults / n * 1000, ""))


def report_produce(codec: str, sizes: tuple[int, int], changes: int, runs: tuple[Produced, Produced]) -> None:
    p, s = runs
    nb = sizes
    print(f"produce, compression.type={codec}:")
    print(row("wall", p.seconds, s.seconds, "s"))
    print(row("changes/s (wall)", changes / p.seconds, changes / s.seconds, "/s"))
    for name, a, b in (
        ("producing thread CPU", p.caller_cpu, s.caller_cpu),
        ("librdkafka threads CPU", p.librdkafka_cpu, s.librdkafka_cpu),
        ("this process, both", p.caller_cpu + p.librdkafka_cpu, s.caller_cpu + s.librdkafka_cpu),
        ("broker CPU (idle rate subtracted)", p.broker_cpu, s.broker_cpu),
    ):
        print(row(name, a, b, "s"))
        print(row("  per change", a / changes * 1e6, b / changes * 1e6, "µs", (a / nb[0] * 1e9, b / nb[1] * 1e9)))
    print(row("bytes sent to the broker / handed", p.sent_bytes / nb[0], s.sent_bytes / nb[1], ""))
    print(row("page faults per 1,000 changes", p.faults / changes * 1000, s.faults / changes * 1000, ""))


def parts(bootstrap: str, pg: PostgresServer, conn: psycopg.Connection[Any]) -> None:
    table = f"cdc_parts_{time.time_ns()}"
    conn.execute(f"CREATE TABLE {table} ({COLUMNS})")
    conn.execute(f"ALTER PUBLICATION bench_pub ADD TABLE {table}")
    slots = ["parts_capture"] + ([SLOT[flag] for _, flag in MODES] if END_TO_END else [])
    for slot in slots:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    made = make_changes(conn, table, CHANGES)
    records = made + (made - made * 6 // 10 - made * 3 // 10)  # each delete is followed by its tombstone
    messages = capture(pg, "parts_capture", made)
    cfg = PostgresCdcConfig.from_task_config(connector_config(pg, "bench", "parts_capture", table))
    port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    broker_cpu = BrokerCpu(listening_pid(port))
    print(f"{made:,} changes ({len(messages):,} replication messages, {sum(map(len, messages)) / 1e6:.1f} MB); "
          f"broker pid {broker_cpu.pid}, idle {broker_cpu.idle:.3f} CPU s/s; CPU medians of {ROUNDS} rounds; "
          f"MALLOC_TRIM_THRESHOLD_={os.environ.get('MALLOC_TRIM_THRESHOLD_', '(glibc default)')}")  # fmt: skip
    tune_gc()  # as `sluice standalone` does
    results = {schemas: encoding(conn, cfg, messages, made, schemas) for _, schemas in MODES}
    report_encoding(results)
    plain, full = results[False][0], results[True][0]
    for codec in CODECS:
        runs = tuple(produce(bootstrap, e, codec, broker_cpu) for e in (plain, full))
        report_produce(codec, (plain.nbytes, full.nbytes), made, runs)  # type: ignore[arg-type]
    del results, plain, full
    if END_TO_END:
        print("end to end (the connector, its own slot → topic):")
        runs_e2e = [end_to_end(bootstrap, pg, table, SLOT[flag], records, flag, broker_cpu) for _, flag in MODES]
        a, b = runs_e2e
        print(row("changes/s (wall)", made / a.seconds, made / b.seconds, "/s"))
        print(row("connector CPU", a.connector_cpu, b.connector_cpu, "s"))
        print(row("  per change", a.connector_cpu / made * 1e6, b.connector_cpu / made * 1e6, "µs"))
        print(row("broker CPU (idle rate subtracted)", a.broker_cpu, b.broker_cpu, "s"))
        print(row("page faults per 1,000 changes", a.faults / made * 1000, b.faults / made * 1000, ""))
        for (name, _), r in zip(MODES, runs_e2e):
            print(f"  {name}: {r.threads}")
    for slot in slots:
        drop_slot(conn, slot)


def main() -> None:
    print(
        f"CDC source by part: {CHANGES:,} changes, schemaless and with schemas (2 shared cores: CPU seconds are steadier than wall)"
    )
    with (
        broker() as bootstrap,
        PostgresServer(extra_settings={"shared_buffers": "256MB", "max_wal_size": "4GB"}, kill_with_parent=True) as pg,
    ):
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            conn.execute("CREATE PUBLICATION bench_pub")
            parts(bootstrap, pg, conn)


if __name__ == "__main__":
    main()
