"""JDBC table → topic backfills on real Spark, Kafka and PostgreSQL."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from sluice.deploy.kafka_stack import KafkaBroker
from sluice.worker.backfill import BackfillManager, JobState
from tests.integration.jdbc_helpers import sql
from tests.integration.kafka_helpers import unique_topic_name
from tests.services.postgres import PostgresServer
from tests.sizes import size

pytestmark = pytest.mark.integration

#: Rows of ``public.orders``. 100,000 by default: the 4 Spark partitions read 25,000 rows each, so
#: every partition's read crosses the 10,000-row JDBC ``fetch_size`` twice; the 4 Kafka partitions
#: get ~25,000 records each, dozens of the Spark producer's 1 MB batches; the progress monitor
#: reports several times; and a cancel lands while Spark is still writing.
#: ``SLUICE_TEST_FULL_SIZES=1`` restores the million rows the tests were written with.
ROWS = size(100_000, 1_000_000)


def _spec(postgres: PostgresServer, db: str, table: str, topic: str, **source: Any) -> dict[str, Any]:
    return {
        "id": f"bf-{topic}",
        "kind": "jdbc_to_topic",
        "source": {"connection.url": postgres.jdbc_url(db), "connection.user": "postgres", "table": table, **source},
        "target": {"topic": topic, "partitions": 4},
    }


@pytest.fixture(scope="module")
def orders_table(postgres: PostgresServer) -> Iterator[str]:
    """A database with ``public.orders``: :data:`ROWS` rows, bigint primary key."""
    url = postgres.create_database("backfill_orders")
    sql(url, "CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL, amount numeric(12,2), status text, created_at timestamptz)")
    sql(
        url,
        "INSERT INTO orders SELECT i, 'customer-' || (i % 5000), (i % 100000) / 100.0, "
        "CASE WHEN i % 3 = 0 THEN NULL ELSE 'paid' END, timestamptz '2024-01-01' + i * interval '1 second' "
        f"FROM generate_series(1, {ROWS}) i",
    )
    yield "backfill_orders"


def _read_keys(bootstrap: str, topic: str, expected: int, timeout: float = 180) -> tuple[list[int], dict[int, bytes]]:
    """Every record's key id (and a few values by id), read by partition assignment (no group)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, "fetch.max.bytes": 52428800})
    meta = consumer.list_topics(topic, timeout=10)
    consumer.assign([TopicPartition(topic, p, 0) for p in meta.topics[topic].partitions])
    ids: list[int] = []
    samples: dict[int, bytes] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(ids) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error():
                    continue
                key = msg.key()
                assert key is not None
                # {"schema":{...},"payload":{"id":N}}
                match = re.search(rb'"payload":\{"id":(-?\d+)\}\}$', key)
                assert match, key
                ident = int(match.group(1))
                ids.append(ident)
                if ident in (1, 3, ROWS // 2, ROWS):
                    samples[ident] = msg.value() or b""
        # Anything extra (a duplicate) shows up within a short settle.
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            ids.extend(int(re.search(rb'"id":(-?\d+)', m.key()).group(1)) for m in consumer.consume(10_000, timeout=0.2) if not m.error())  # type: ignore[union-attr,arg-type]
    finally:
        consumer.close()
    return ids, samples


def test_table_rows_backfilled_exactly_once_with_keys(
    backfills: BackfillManager, postgres: PostgresServer, orders_table: str, kafka: KafkaBroker
) -> None:
    """Every row of :data:`ROWS` once, keyed, with the status's totals. The small size still reads
    in 4 Spark partitions that each cross the JDBC fetch size and writes many producer batches to
    4 Kafka partitions; ``SLUICE_TEST_FULL_SIZES=1`` runs the original 1,000,000 rows."""
    topic = unique_topic_name("orders-backfill")
    backfills.submit(_spec(postgres, orders_table, "public.orders", topic, **{"num.partitions": 4}))
    status = backfills.wait(f"bf-{topic}", timeout=600)
    assert status.state is JobState.SUCCEEDED, status.error
    assert status.rows_total == ROWS
    assert status.rows_done == ROWS
    assert status.percent == 100.0
    assert status.bytes_done is not None and status.bytes_done > ROWS * 100  # keys + envelopes (estimated)
    # The hand-off position: a WAL LSN read before the backfill began.
    assert status.source_position is not None
    assert re.fullmatch(r"[0-9A-F]+/[0-9A-F]+", status.source_position["lsn"])

    ids, samples = _read_keys(kafka.bootstrap_servers, topic, ROWS)
    assert len(ids) == ROWS
    assert len(set(ids)) == ROWS
    assert min(ids) == 1 and max(ids) == ROWS

    value = json.loads(samples[3])
    assert value["schema"]["name"] == "orders"
    assert value["payload"] == {
        "id": 3,
        "customer": "customer-3",
        "amount": "Aw==",  # 0.03 → unscaled 3 → 0x03, base64 as Connect writes a Decimal
        "status": None,
        "created_at": 1704067203000,
    }


def test_backfilled_row_is_byte_identical_to_the_streamed_row(
    backfills: BackfillManager, postgres: PostgresServer, kafka: KafkaBroker, tmp_path: Any
) -> None:
    """The same row through the streaming JDBC source (ValueToKey on the key) and the backfill."""
    from tests.integration.worker_process import WorkerProcess

    db = f"ident_{int(time.time() * 1000) % 10**8}"
    url = postgres.create_database(db)
    sql(
        url,
        "CREATE TABLE items (id bigint PRIMARY KEY, name text, price numeric(10,2), qty integer NOT NULL, "
        "weight double precision, ratio real, small smallint, active boolean, data bytea, born date, "
        "seen timestamptz, local_ts timestamp, note varchar(40))",
    )
    sql(
        url,
        "INSERT INTO items VALUES "
        "(1, 'Widget \"A\"', -12.34, 3, 1.5, 0.25, 7, true, '\\x00ff10', '2024-02-29', '2024-03-01 12:34:56.789+00', '2024-03-01 01:02:03.004', 'tab\tand é'),"
        "(2, NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),"
        "(3, 'x', 99999999.99, -1, 1e20, 3.4e38, -32768, false, '', '1969-12-31', '1960-01-01 00:00:00.5+00', '1999-12-31 23:59:59.999', '')",
    )
    stream_topic = unique_topic_name("items-stream-")
    worker = WorkerProcess(
        tmp_path, kafka.bootstrap_servers,
        **{"key.converter": "JsonConverter", "value.converter": "JsonConverter"},  # type: ignore[arg-type]
    )
    connector = {
        "name": "items-stream",
        "config": {
            "connector.class": "JdbcSource",
            "connection.url": postgres.jdbc_url(db),
            "connection.user": "postgres",
            "mode": "bulk",
            "table.whitelist": "public.items",
            "topic.prefix": stream_topic,
            "poll.interval.ms": "3600000",
            "transforms": "key",
            "transforms.key.type": "ValueToKey",
            "transforms.key.fields": "id",
        },
    }
    conn_file = tmp_path / "items.json"
    conn_file.write_text(json.dumps(connector))
    worker.start(conn_file)
    try:
        worker.wait_running("items-stream")
        streamed = _by_key(kafka.bootstrap_servers, stream_topic + "items", 3)
    finally:
        worker.stop()

    topic = unique_topic_name("items-backfill")
    backfills.submit(_spec(postgres, db, "public.items", topic))
    status = backfills.wait(f"bf-{topic}", timeout=300)
    assert status.state is JobState.SUCCEEDED, status.error
    backfilled = _by_key(kafka.bootstrap_servers, topic, 3)
    assert set(backfilled) == set(streamed)
    for key, value in streamed.items():
        assert backfilled[key] == value, (key, value, backfilled[key])


def _by_key(bootstrap: str, topic: str, expected: int) -> dict[bytes, bytes]:
    from tests.integration.cdc_helpers import read_events

    # A task reports RUNNING before its first record creates the topic: wait for the topic too.
    records = read_events(bootstrap, topic, expected, timeout=90)
    return {r.key: r.value for r in records}  # type: ignore[misc]


def test_cancel_stops_the_spark_job(
    backfills: BackfillManager, postgres: PostgresServer, orders_table: str
) -> None:
    """A cancel while Spark writes stops the job short of the table. The job reads a view of the
    orders that spends a millisecond on each row it returns (about 50 s for each of the 2 Spark
    partitions), so however fast the machine, the cancel lands mid-write; 200-row fetches make the
    database stop once the cancelled reader stops asking."""
    sql(
        postgres.url(orders_table),
        "CREATE OR REPLACE FUNCTION paced(t text) RETURNS text LANGUAGE plpgsql STABLE AS "
        "$$ BEGIN PERFORM pg_sleep(0.001); RETURN t; END $$",
    )
    sql(
        postgres.url(orders_table),
        "CREATE OR REPLACE VIEW paced_orders AS SELECT id, customer, amount, paced(status) AS status, created_at FROM orders",
    )
    topic = unique_topic_name("orders-cancel")
    backfills.submit(
        _spec(
            postgres, orders_table, "public.paced_orders", topic,
            **{"num.partitions": 2, "partition.column": "id", "key.columns": ["id"], "fetch.size": 200},
        )
    )
    job = f"bf-{topic}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = backfills.get(job)["status"]
        if status["state"] == "RUNNING" and status["rows_done"] > 0:
            break
        if status["state"] not in ("PENDING", "RUNNING"):
            pytest.fail(f"the backfill ended before the cancel: {status}")
        time.sleep(0.2)
    else:
        pytest.fail(f"the backfill did not start writing: {backfills.get(job)}")
    cancelled_at = time.monotonic()
    backfills.cancel(job)
    final = backfills.wait(job, timeout=60)
    assert final.state is JobState.CANCELLED
    assert 0 < final.rows_done < ROWS
    assert time.monotonic() - cancelled_at < 60


def test_failed_job_shows_the_spark_error(backfills: BackfillManager, postgres: PostgresServer) -> None:
    db = f"fail_{int(time.time() * 1000) % 10**8}"
    url = postgres.create_database(db)
    sql(url, "CREATE TABLE base (id bigint PRIMARY KEY)")
    sql(url, "INSERT INTO base SELECT generate_series(1, 1000)")
    # Reading the view's x divides by zero on row 500 — in the executors, mid-read.
    sql(url, "CREATE VIEW broken AS SELECT id, 1 / (id - 500) AS x FROM base")
    topic = unique_topic_name("broken")
    backfills.submit(_spec(postgres, db, "public.broken", topic))
    status = backfills.wait(f"bf-{topic}", timeout=300)
    # The messages show the run's status: a failure for another reason (once, the new topic's
    # leader not being ready for the progress monitor) must be told apart from a bad extraction.
    assert status.state is JobState.FAILED, status
    assert status.error is not None
    assert "division by zero" in status.error, status.error
    assert "py4j" not in status.error.lower(), status.error
    assert "\tat " not in status.error and "\n    at " not in status.error, status.error
    assert "Driver stacktrace" not in status.error, status.error


def test_an_existing_topic_keeps_its_partition_count_and_the_streaming_partitioner(
    backfills: BackfillManager, postgres: PostgresServer, kafka: KafkaBroker
) -> None:
    """The spec asks for 4 partitions; the topic already has 3: the rows are spread over those 3 as
    librdkafka's default partitioner would put them (crc32 of the key bytes), like the stream."""
    import zlib

    from tests.integration.kafka_helpers import consume_all, create_topic

    db = f"existing_{int(time.time() * 1000) % 10**8}"
    url = postgres.create_database(db)
    sql(url, "CREATE TABLE t (id bigint PRIMARY KEY, name text)")
    sql(url, "INSERT INTO t SELECT i, 'n' || i FROM generate_series(1, 300) i")
    topic = unique_topic_name("existing")
    create_topic(kafka.bootstrap_servers, topic, 3)
    backfills.submit(_spec(postgres, db, "public.t", topic, **{"num.partitions": 4}))
    status = backfills.wait(f"bf-{topic}", timeout=300)
    assert status.state is JobState.SUCCEEDED, status.error

    records = consume_all(kafka.bootstrap_servers, topic, 300)
    assert len(records) == 300
    assert {r.partition for r in records} == {0, 1, 2}
    for record in records:
        assert record.key is not None
        assert record.partition == zlib.crc32(record.key) % 3, record.key
    ids = sorted(int(re.search(rb'"payload":\{"id":(\d+)\}\}$', r.key).group(1)) for r in records)  # type: ignore[arg-type,union-attr]
    assert ids == list(range(1, 301))
