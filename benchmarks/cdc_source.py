"""PostgreSQL → CDC source (pgoutput) → topic, against reading the same changes raw from the slot.

Run: ``python -m benchmarks.cdc_source``. Sizes: ``SLUICE_BENCH_CDC_CHANGES`` (500,000),
``SLUICE_BENCH_CDC_SNAPSHOT_ROWS`` (1,000,000), ``SLUICE_BENCH_CDC_LAG_SECONDS`` (30) at
``SLUICE_BENCH_CDC_LAG_RATE`` changes/s (10,000). Prints, with no assertions:

1. raw: ``pg_logical_slot_get_binary_changes`` over the pending changes (server-side decode, no
   parsing, no network), changes/s; the same changes received over the streaming replication
   protocol without parsing them, by psycopg/libpq (the connector's transport) and by PostgreSQL's
   own C client ``pg_recvlogical`` writing to ``/dev/null``, each with the walsender's and the
   client's CPU seconds. The walsender sends (and flushes) message by message; both clients spend
   about half the time waiting for it, so the server, not the client, bounds what any replication
   client receives on this machine;
2. end to end: the same changes (inserts, updates, deletes in 1,000-row transactions, already in
   the WAL) → the connector in an in-process standalone herder → Kafka, JSON values without the
   schema envelope; changes/s, the ratios to the raw rates, and the CPU seconds the connector used
   (this process minus the harness's threads: the task thread, librdkafka's, the worker's; see
   :class:`ConnectorCpu`), i.e. changes/s per core;
3. lag at a steady rate: a separate writer process commits ``rate`` changes/s in 100-row
   transactions; lag = time the record was read from Kafka − the commit time in ``source.ts_us``;
4. initial snapshot: rows/s for a table of ``SNAPSHOT_ROWS`` rows (chunked, watermarked), and
   rows/s per core of the connector.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time
from typing import Any

import psycopg
from confluent_kafka import Consumer, TopicPartition

from benchmarks.common import broker, cpu_seconds, create_topic, herder, thread_times, wait_until
from sluice.connectors.source.postgres_cdc.replication import ReplicationStream
from tests.services.postgres import PostgresServer, find_bin_dir

CHANGES = int(os.environ.get("SLUICE_BENCH_CDC_CHANGES", "500000"))
SNAPSHOT_ROWS = int(os.environ.get("SLUICE_BENCH_CDC_SNAPSHOT_ROWS", "1000000"))
LAG_SECONDS = float(os.environ.get("SLUICE_BENCH_CDC_LAG_SECONDS", "30"))
LAG_RATE = int(os.environ.get("SLUICE_BENCH_CDC_LAG_RATE", "10000"))

COLUMNS = (
    "id bigint PRIMARY KEY, name text, email text, amount numeric(12,2), qty int, active boolean, "
    "created timestamptz, score float8"
)
ROW_SQL = "SELECT g, 'name-' || g, 'user' || g || '@example.com', g * 1.25, g % 1000, g % 2 = 0, now(), g / 7.0"


class ConnectorCpu:
    """CPU seconds the connector used: everything this process used, minus the harness's threads.

    The connector runs in an in-process herder (task thread, its producer's librdkafka threads,
    the worker's threads, threads that start and end in between); the harness is the main thread
    and the threads of the watermark consumer (``harness``: their native ids). Process-wide
    ``getrusage`` covers threads that ended; the harness's threads live throughout and are
    subtracted. PostgreSQL and Kafka are other processes."""

    def __init__(self, harness: set[int]) -> None:
        self._harness = harness | {threading.get_native_id()}
        self._threads0 = thread_times()
        self._total0 = cpu_seconds()

    def stop(self) -> tuple[float, str]:
        """(connector CPU seconds, ``python 3.1s, librdkafka 0.9s`` for its threads alive now)."""
        total, threads = cpu_seconds() - self._total0, thread_times()
        split = {"python": 0.0, "librdkafka": 0.0}
        for tid, (name, seconds) in threads.items():
            used = seconds - self._threads0.get(tid, (name, 0.0))[1]
            if tid in self._harness:
                total -= used
            else:
                split["librdkafka" if name.startswith("rdk:") else "python"] += used
        ended = total - sum(split.values())
        text = ", ".join(f"{k} {v:.2f}s" for k, v in split.items())
        return total, text + (f", ended threads {ended:.2f}s" if ended >= 0.05 else "")


def make_changes(conn: psycopg.Connection[Any], table: str, total: int) -> int:
    """60 % inserts, 30 % updates, 10 % deletes, in 1,000-row transactions; returns the change count."""
    inserts = total * 6 // 10
    updates = total * 3 // 10
    deletes = total - inserts - updates
    for start in range(0, inserts, 1000):
        end = min(inserts, start + 1000)
        conn.execute(f"INSERT INTO {table} {ROW_SQL} FROM generate_series({start + 1}::bigint, {end}::bigint) g")
    for start in range(0, updates, 1000):
        end = min(updates, start + 1000)
        conn.execute(f"UPDATE {table} SET qty = qty + 1, name = name || 'x' WHERE id > {start} AND id <= {end}")
    for start in range(0, deletes, 1000):
        end = min(deletes, start + 1000)
        conn.execute(f"DELETE FROM {table} WHERE id > {inserts - end} AND id <= {inserts - start}")
    return inserts + updates + deletes


class Watermark:
    """A topic's high watermark through one long-lived consumer.

    Its librdkafka threads are the harness's: ``threads`` (their native ids) is left out of the
    connector's CPU figure (see :class:`ConnectorCpu`)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        before = set(thread_times())
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-cdc-watermarks"})
        self._partition = TopicPartition(topic, 0)
        self()
        time.sleep(0.2)  # threads for the brokers named in the first metadata reply start now
        self()
        self.threads = {tid for tid, (name, _) in thread_times().items() if tid not in before and name.startswith("rdk:")}

    def __call__(self) -> int:
        return int(self._consumer.get_watermark_offsets(self._partition, timeout=10)[1])

    def close(self) -> None:
        self._consumer.close()


def connector_config(pg: PostgresServer, prefix: str, slot: str, table: str, **extra: str) -> dict[str, str]:
    return {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "database.hostname": "127.0.0.1",
        "database.port": str(pg.port),
        "database.dbname": pg.database,
        "topic.prefix": prefix,
        "slot.name": slot,
        "publication.name": "bench_pub",
        "publication.autocreate.mode": "disabled",
        "table.include.list": f"public\\.{table}",
        "value.converter": "JsonConverter",
        "value.converter.schemas.enable": "false",
        "key.converter": "JsonConverter",
        "key.converter.schemas.enable": "false",
        "max.batch.size": "4096",
        **extra,
    }


def raw_read(conn: psycopg.Connection[Any], slot: str) -> tuple[int, float]:
    start = time.perf_counter()
    with conn.transaction(), conn.cursor(name="raw") as cur:
        cur.execute(
            "SELECT get_byte(data, 0) FROM pg_logical_slot_get_binary_changes(%s, NULL, NULL, "
            "'proto_version', '1', 'publication_names', 'bench_pub')",
            (slot,),
        )
        changes = 0
        while rows := cur.fetchmany(50_000):
            changes += sum(1 for (kind,) in rows if kind in (73, 85, 68))  # I, U, D
    return changes, time.perf_counter() - start


def process_cpu(pid: int) -> float:
    """CPU seconds of another local process (a PostgreSQL backend), from ``/proc``; 0 elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def raw_stream(pg: PostgresServer, slot: str, changes: int) -> tuple[float, float, float]:
    """(seconds, walsender CPU seconds, client CPU seconds) to receive ``changes`` row changes over the streaming
    replication protocol the connector uses (walsender → libpq, no parsing): the transport's own
    ceiling, which is below the SQL function's because the walsender sends every message
    separately."""
    conninfo = {"host": "127.0.0.1", "port": pg.port, "dbname": pg.database, "user": "postgres", "replication": "database"}
    stream = ReplicationStream(conninfo, slot, "bench_pub")
    stream.open()
    walsender = stream.backend_pid
    try:
        start, seen, cpu0, client0 = time.perf_counter(), 0, process_cpu(walsender), time.thread_time()
        while seen < changes:
            data = stream.read(5.0)
            if data is None:
                raise TimeoutError("the replication stream stalled")
            if data[0] == 119 and data[25] in (73, 85, 68):  # XLogData: I, U, D
                seen += 1
        return time.perf_counter() - start, process_cpu(walsender) - cpu0, time.thread_time() - client0
    finally:
        stream.close()


def recvlogical_stream(
    pg: PostgresServer, conn: psycopg.Connection[Any], slot: str, end_lsn: str
) -> tuple[float, float, float] | None:
    """(seconds, walsender CPU seconds, client CPU seconds) for PostgreSQL's own C client, ``pg_recvlogical``, to
    stream the same changes to ``/dev/null``: what any replication client can get from this
    server on this machine (``None`` without the binary)."""
    binary = find_bin_dir() / "pg_recvlogical"
    if not binary.is_file():
        return None
    command = [
        str(binary), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "postgres", "-d", pg.database, "-S", slot,
        "--start", "-E", end_lsn, "-o", "proto_version=1", "-o", "publication_names=bench_pub",
        "-f", "/dev/null", "-s", "10", "-F", "0", "--no-loop",
    ]  # fmt: skip
    start, children0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    child = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    walsender, cpu = 0, 0.0
    while child.poll() is None:
        row = conn.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone()
        if row and row[0]:
            walsender = int(row[0])
            cpu = process_cpu(walsender)  # the last reading before it ends
        time.sleep(0.02)
    elapsed, children = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if child.returncode != 0:
        raise RuntimeError(f"pg_recvlogical failed: {child.stderr.read() if child.stderr else ''}")
    client = children.ru_utime + children.ru_stime - children0.ru_utime - children0.ru_stime
    return elapsed, cpu, client


def end_to_end(bootstrap: str, pg: PostgresServer, conn: psycopg.Connection[Any], changes: int) -> None:
    table = f"cdc_e2e_{time.time_ns()}"
    conn.execute(f"CREATE TABLE {table} ({COLUMNS})")
    conn.execute(f"ALTER PUBLICATION bench_pub ADD TABLE {table}")
    slots = ("bench_raw", "bench_stream", "bench_recv", "bench_e2e")
    for slot in slots:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    made = make_changes(conn, table, changes)
    end_lsn = str(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])  # type: ignore[index]
    deletes = made - made * 6 // 10 - made * 3 // 10
    raw_changes, raw_s = raw_read(conn, "bench_raw")
    raw_rate = raw_changes / raw_s
    print(f"raw pg_logical_slot_get_binary_changes: {raw_changes:,} changes in {raw_s:.2f}s = {raw_rate:,.0f} changes/s")
    stream_s, stream_server, stream_client = raw_stream(pg, "bench_stream", raw_changes)
    stream_rate = raw_changes / stream_s
    print(
        f"raw replication stream, psycopg/libpq (no parsing): {raw_changes:,} changes in {stream_s:.2f}s = {stream_rate:,.0f} changes/s; "
        f"walsender CPU {stream_server:.2f}s, client CPU {stream_client:.2f}s"
    )
    recv = recvlogical_stream(pg, conn, "bench_recv", end_lsn)
    recv_rate = 0.0
    if recv is not None:
        recv_rate = raw_changes / recv[0]
        print(
            f"raw replication stream, pg_recvlogical (C, to /dev/null): {raw_changes:,} changes in {recv[0]:.2f}s = {recv_rate:,.0f} changes/s; "
            f"walsender CPU {recv[1]:.2f}s, client CPU {recv[2]:.2f}s (the clients wait on the walsender, which sends message by message)"
        )
    prefix = f"e2e{time.time_ns()}"
    topic = create_topic(bootstrap, f"{prefix}.public.{table}")
    expected = made + deletes  # each delete is followed by its tombstone
    h = herder(bootstrap, **{"offset.flush.interval.ms": "5000"})
    watermark = Watermark(bootstrap, topic)
    try:
        meter, start = ConnectorCpu(watermark.threads), time.perf_counter()
        h.put_connector_config(
            "bench-cdc", connector_config(pg, prefix, "bench_e2e", table, **{"snapshot.mode": "no_data"}), allow_replace=False
        )
        first: list[float] = []

        def done() -> bool:
            seen = watermark()
            if seen and not first:
                first.append(time.perf_counter())
            return seen >= expected

        wait_until(done, timeout=1200, poll=0.05)
        end = time.perf_counter()
        elapsed, (cpu, threads) = end - start, meter.stop()
    finally:
        watermark.close()
        h.stop()
    rate = made / elapsed
    versus_recv = f", to pg_recvlogical's {rate / recv_rate:.2f}" if recv_rate else ""
    print(
        f"end to end (JSON values): {made:,} changes (+{deletes:,} tombstones) in {elapsed:.2f}s = {rate:,.0f} changes/s; "
        f"ratio to raw {rate / raw_rate:.2f} (to the raw stream {rate / stream_rate:.2f}{versus_recv}); "
        f"connector CPU {cpu:.2f}s = {made / cpu:,.0f} changes/s per core ({threads})"
    )
    if first:
        # Most of it is librdkafka's idempotent producer, which asks for its producer id only after
        # a 500 ms timer when no broker connection was up at its start; the task polls meanwhile.
        print(f"  first record in the topic {first[0] - start:.2f}s after the connector was created")
    for slot in slots:
        drop_slot(conn, slot)


_WRITER = """
import sys, time, psycopg
dsn, table, rate, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
per_txn = 100
interval = per_txn / rate
with psycopg.connect(dsn, autocommit=True) as conn:
    start = time.perf_counter(); n = 0; next_at = start
    while time.perf_counter() - start < seconds:
        conn.execute(f"INSERT INTO {table} SELECT g, 'w', 'w@x', 1.5, 1, true, now(), 0.5 FROM generate_series({n + 1}::bigint, {n + per_txn}::bigint) g")
        n += per_txn
        next_at += interval
        delay = next_at - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
    print(n)
"""


_CONSUMER = """
import sys, time, orjson
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, expected = sys.argv[1], sys.argv[2], int(sys.argv[3])
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lag", "fetch.wait.max.ms": 10})
consumer.assign([TopicPartition(topic, 0, 0)])
print("ready", flush=True)
lags = []
deadline = time.monotonic() + 600
while len(lags) < expected and time.monotonic() < deadline:
    for msg in consumer.consume(1000, 0.05):
        if msg.error() is None and msg.value():
            lags.append(time.time() * 1e3 - orjson.loads(msg.value())["source"]["ts_us"] / 1e3)
consumer.close()
lags.sort()
print(len(lags), lags[len(lags) // 2], lags[int(len(lags) * 0.99)], lags[-1])
"""


def lag(bootstrap: str, pg: PostgresServer, conn: psycopg.Connection[Any]) -> None:
    """Writer and reader run as separate processes, so only the connector uses this one."""
    table = f"cdc_lag_{time.time_ns()}"
    conn.execute(f"CREATE TABLE {table} ({COLUMNS})")
    conn.execute(f"ALTER PUBLICATION bench_pub ADD TABLE {table}")
    prefix = f"lag{time.time_ns()}"
    topic = create_topic(bootstrap, f"{prefix}.public.{table}")
    expected = int(LAG_RATE * LAG_SECONDS) // 100 * 100
    reader = subprocess.Popen(
        [sys.executable, "-c", _CONSUMER, bootstrap, topic, str(expected)], stdout=subprocess.PIPE, text=True
    )
    assert reader.stdout is not None
    reader.stdout.readline()
    h = herder(bootstrap, **{"offset.flush.interval.ms": "1000"})
    try:
        h.put_connector_config(
            "bench-lag",
            connector_config(pg, prefix, "bench_lag", table, **{"snapshot.mode": "no_data", "poll.interval.ms": "100"}),
            allow_replace=False,
        )
        wait_until(lambda: _slot_exists(conn, "bench_lag"), timeout=60, poll=0.1)
        time.sleep(2)
        meter = ConnectorCpu(set())
        subprocess.run(
            [sys.executable, "-c", _WRITER, pg.dsn(), table, str(LAG_RATE), str(LAG_SECONDS)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        out, _ = reader.communicate(timeout=600)
        cpu, threads = meter.stop()
    finally:
        h.stop()
        if reader.poll() is None:
            reader.kill()
    count, p50, p99, worst = out.split()
    print(
        f"lag at {LAG_RATE:,} changes/s for {LAG_SECONDS:.0f}s ({int(count):,} changes): p50 {float(p50):.0f} ms, "
        f"p99 {float(p99):.0f} ms, max {float(worst):.0f} ms; connector CPU {cpu:.2f}s ({threads})"
    )
    drop_slot(conn, "bench_lag")


def drop_slot(conn: psycopg.Connection[Any], slot: str) -> None:
    """Drop ``slot`` once the stopped connector released it."""
    deadline = time.monotonic() + 30
    while True:
        try:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            return
        except psycopg.errors.ObjectInUse:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _slot_exists(conn: psycopg.Connection[Any], slot: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone() is not None


def snapshot(bootstrap: str, pg: PostgresServer, conn: psycopg.Connection[Any], rows: int) -> None:
    table = f"cdc_snap_{time.time_ns()}"
    conn.execute(f"CREATE TABLE {table} ({COLUMNS})")
    conn.execute(f"INSERT INTO {table} {ROW_SQL} FROM generate_series(1::bigint, {rows}::bigint) g")
    conn.execute(f"ALTER PUBLICATION bench_pub ADD TABLE {table}")
    conn.execute(f"VACUUM ANALYZE {table}")
    prefix = f"snap{time.time_ns()}"
    topic = create_topic(bootstrap, f"{prefix}.public.{table}")
    h = herder(bootstrap, **{"offset.flush.interval.ms": "5000"})
    watermark = Watermark(bootstrap, topic)
    try:
        meter, start = ConnectorCpu(watermark.threads), time.perf_counter()
        h.put_connector_config("bench-snap", connector_config(pg, prefix, "bench_snap", table), allow_replace=False)
        wait_until(lambda: watermark() >= rows, timeout=1200, poll=0.05)
        elapsed, (cpu, threads) = time.perf_counter() - start, meter.stop()
    finally:
        watermark.close()
        h.stop()
    print(f"initial snapshot: {rows:,} rows in {elapsed:.2f}s = {rows / elapsed:,.0f} rows/s; connector CPU {cpu:.2f}s = {rows / cpu:,.0f} rows/s per core ({threads})")
    drop_slot(conn, "bench_snap")


def main() -> None:
    print(f"CDC source: {CHANGES:,} changes, lag at {LAG_RATE:,}/s, snapshot of {SNAPSHOT_ROWS:,} rows (2 shared cores: noisy)")
    with broker() as bootstrap, PostgresServer(extra_settings={"shared_buffers": "256MB", "max_wal_size": "4GB"}, kill_with_parent=True) as pg:
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            conn.execute("CREATE PUBLICATION bench_pub")
            end_to_end(bootstrap, pg, conn, CHANGES)
            if LAG_SECONDS > 0:
                lag(bootstrap, pg, conn)
            if SNAPSHOT_ROWS > 0:
                snapshot(bootstrap, pg, conn, SNAPSHOT_ROWS)


if __name__ == "__main__":
    main()
