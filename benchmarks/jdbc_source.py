"""PostgreSQL table → JdbcSource (bulk mode) → topic, against a bare ``COPY … TO STDOUT`` of the same table.

Run: ``python -m benchmarks.jdbc_source`` (``SLUICE_BENCH_RECORDS``, ``SLUICE_BENCH_ROUNDS`` to change
the size). Prints rows/s for the raw COPY (raw blocks read by psycopg, not parsed: what one
connection can stream out of the server) and for the source in ``bulk`` mode reading the whole
table once into a topic (rows → Connect structs → JsonConverter without schemas → produce, until
the broker acknowledged every record), and their ratio. No assertions.

The source's time runs from its connector configuration until the topic holds every row, so it
includes starting the task and reflecting the table. One-off costs a running worker has paid
long before are paid before timing, by a small warm-up run: importing SQLAlchemy, and the broker
setting up the coordinator that hands the idempotent producer its id (on a fresh broker the
first producer waits seconds for it). The topic's end offset is polled with one consumer instead
of a new client per poll.
"""

from __future__ import annotations

import time

import psycopg
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

import sluice.connectors.source.jdbc.task  # noqa: F401 - imported before timing, as a running worker has it
from benchmarks.common import RECORDS, ROUNDS, Result, broker, create_topic, median_result, wait_until
from benchmarks.jdbc_sink import COLUMNS, make_rows, median_round
from sluice.connectors.jdbc_common.connection import import_sqlalchemy
from sluice.offsets import MemoryOffsetStore
from sluice.plugins import PluginRegistry
from sluice.worker.config.models import WorkerConfig
from sluice.worker.runtime import tune_gc
from sluice.worker.standalone import StandaloneHerder
from sluice.worker.worker import Worker
from tests.services.postgres import PostgresServer

SOURCE = "io.confluent.connect.jdbc.JdbcSourceConnector"
TABLE = "bench_source"


def fill_table(pg: PostgresServer, count: int, table: str = TABLE) -> None:
    with psycopg.connect(pg.dsn()) as conn, conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {table}")
        cur.execute(f"CREATE TABLE {table} ({COLUMNS}, PRIMARY KEY (id))")
        with cur.copy(f"COPY {table} FROM STDIN") as copy:
            for row in make_rows(count):
                copy.write_row(row)
        conn.commit()
    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {table}")


class EndOffset:
    """The end offset of a one-partition topic, polled with one consumer."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
        self.partition = KafkaTopicPartition(topic, 0)

    def __call__(self) -> int:
        return int(self.consumer.get_watermark_offsets(self.partition, timeout=10)[1])

    def close(self) -> None:
        self.consumer.close()


def raw_copy_out(pg: PostgresServer, count: int) -> Result:
    """The raw limit: COPY … TO STDOUT, blocks read and dropped."""
    start = time.perf_counter()
    size = 0
    with psycopg.connect(pg.dsn()) as conn, conn.cursor() as cur:
        with cur.copy(f"COPY {TABLE} TO STDOUT") as copy:
            for block in copy:
                size += len(block)
    return Result("bare psycopg COPY TO STDOUT", count, size, time.perf_counter() - start)


def source_herder(bootstrap: str) -> StandaloneHerder:
    config = WorkerConfig.from_mapping(
        {
            "bootstrap.servers": bootstrap,
            "listeners": "http://127.0.0.1:0",
            "offset.flush.interval.ms": "5000",
            "key.converter": "StringConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
        }
    )
    h = StandaloneHerder(Worker(config, PluginRegistry(), MemoryOffsetStore()))
    h.start()
    tune_gc()
    return h


def sluice_source(pg: PostgresServer, bootstrap: str, count: int, table: str = TABLE) -> Result:
    prefix = f"bench-jdbc-src-{time.time_ns()}-"
    topic = create_topic(bootstrap, prefix + table)
    h = source_herder(bootstrap)
    config = {
        "connector.class": SOURCE,
        "connection.url": pg.url(),
        "mode": "bulk",
        "table.include.list": table,
        "topic.prefix": prefix,
        "batch.max.rows": "5000",
        "poll.interval.ms": "3600000",  # one pass over the table
    }
    end = EndOffset(bootstrap, topic)
    try:
        start = time.perf_counter()
        h.put_connector_config(f"bench-jdbc-src-{time.time_ns()}", config, allow_replace=False)
        wait_until(lambda: end() >= count, timeout=900, poll=0.05)
        elapsed = time.perf_counter() - start
    finally:
        h.stop()
        end.close()
    return Result("Sluice JdbcSource (bulk) → topic", count, 0, elapsed)


def warm_up(pg: PostgresServer, bootstrap: str) -> None:
    """What a running worker has done long before: import SQLAlchemy, and get the broker to hand out
    idempotent producer ids. A small run of the source does both."""
    import_sqlalchemy()
    fill_table(pg, 1000, "bench_warm_up")
    sluice_source(pg, bootstrap, 1000, "bench_warm_up")


def main() -> list[tuple[Result, Result]]:
    print(f"JDBC source (PostgreSQL, bulk) → topic: {RECORDS:,} rows of 8 columns, {ROUNDS} rounds")
    raws: list[Result] = []
    ours: list[Result] = []
    with broker() as bootstrap, PostgresServer(kill_with_parent=True) as pg:
        fill_table(pg, RECORDS)
        warm_up(pg, bootstrap)
        for i in range(ROUNDS):
            raws.append(raw_copy_out(pg, RECORDS))
            ours.append(sluice_source(pg, bootstrap, RECORDS))
            print(
                f"  round {i + 1}: raw COPY TO STDOUT {raws[-1].rate:>10,.0f} rows/s   "
                f"source {ours[-1].rate:>9,.0f} rows/s (ratio {ours[-1].rate / raws[-1].rate:.2f})"
            )
    raw, mine = median_round(raws, ours)
    print(f"{raw.name:<42} {median_result(raws).rate:>10,.0f} rows/s (median)")
    print(
        f"{mine.name:<42} {median_result(ours).rate:>10,.0f} rows/s (median)  "
        f"ratio {mine.rate / raw.rate:.2f} (median of the rounds' ratios)"
    )
    return [(raw, mine)]


if __name__ == "__main__":
    main()
