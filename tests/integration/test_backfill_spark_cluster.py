"""Every backfill kind on a real Spark standalone cluster, compared with the same job on ``local[2]``.

One ``sluice standalone`` worker (``backfill.spark.master=spark://…``) serves the module; its
executors start an empty virtualenv's Python (no Sluice, no PySpark), on a cluster that logs at
its default level, INFO — with ``backfill.spark.log.level=INFO`` the executors do too, so a Spark
class the Kafka connector needs but the running Spark lacks would fail these jobs.
"""

from __future__ import annotations

import json
import time
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from sluice.worker.backfill import BackfillManager, JobState
from tests.integration.cdc_helpers import cdc_config, dbname, run_sql
from tests.integration.jdbc_helpers import sql
from tests.integration.kafka_helpers import (
    ConsumedRecord,
    OutgoingRecord,
    consume_all,
    create_topic,
    produce,
    unique_topic_name,
)
from tests.integration.spark_fixtures import SparkCluster
from tests.integration.test_backfill_sink import produce_events
from tests.integration.worker_process import WorkerProcess
from tests.services.postgres import PostgresServer
from tests.services.s3_server import S3Server

pytestmark = pytest.mark.integration

ROWS = 300


@pytest.fixture(scope="module")
def cluster_worker(
    spark_cluster: SparkCluster, kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    settings = {
        "backfill.spark.master": spark_cluster.master_url,
        "backfill.spark.pyspark.python": str(spark_cluster.executor_python),
        "backfill.spark.driver.host": "127.0.0.1",
        "backfill.spark.driver.bindAddress": "127.0.0.1",
        "backfill.spark.driver.memory": "1g",
        "backfill.spark.executor.memory": "768m",
        "backfill.spark.cores.max": "2",
        "backfill.spark.sql.shuffle.partitions": "2",
        "backfill.spark.log.level": "INFO",
    }
    worker = WorkerProcess(tmp_path_factory.mktemp("cluster-worker"), kafka.bootstrap_servers, **settings)  # type: ignore[arg-type]
    worker.start()
    try:
        yield worker
    finally:
        worker.stop()


def run_on_cluster(
    worker: WorkerProcess, cluster: SparkCluster, spec: dict[str, Any], timeout: float = 300
) -> dict[str, Any]:
    """Submit over REST and wait; the job's final view (``status`` with ``state``, ``rows_done``…)."""
    created = httpx.post(f"{worker.url}/backfills", json=spec, timeout=30)
    assert created.status_code == 201, created.text
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = httpx.get(f"{worker.url}/backfills/{spec['id']}", timeout=30).json()
        if info["status"]["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            assert info["status"]["state"] == "SUCCEEDED", f"{info['status']}\n{worker.log()}\n{cluster.log()}"
            return info
        time.sleep(0.5)
    pytest.fail(f"backfill {spec['id']} did not finish within {timeout:.0f}s\n{worker.log()}\n{cluster.log()}")


def run_locally(backfills: BackfillManager, spec: dict[str, Any]) -> Any:
    backfills.submit(spec)
    status = backfills.wait(spec["id"], timeout=300)
    assert status.state is JobState.SUCCEEDED, status.error
    return status


def _view(records: list[ConsumedRecord]) -> list[tuple[Any, ...]]:
    return sorted((r.partition, r.key, r.value, tuple(r.headers or ())) for r in records)


def test_jdbc_to_topic_on_the_cluster_writes_what_local_writes(
    cluster_worker: WorkerProcess,
    spark_cluster: SparkCluster,
    backfills: BackfillManager,
    kafka: KafkaBroker,
    postgres: PostgresServer,
) -> None:
    db = f"cluster_{uuid.uuid4().hex[:8]}"
    url = postgres.create_database(db)
    sql(url, "CREATE TABLE customers (id integer PRIMARY KEY, name text NOT NULL, joined date)")
    sql(url, f"INSERT INTO customers SELECT i, 'name ' || i, DATE '2024-01-01' + i FROM generate_series(1, {ROWS}) i")
    source = {"connection.url": postgres.jdbc_url(db), "connection.user": "postgres", "table": "customers"}
    on_cluster, on_local = unique_topic_name("cluster-jdbc"), unique_topic_name("local-jdbc")
    info = run_on_cluster(
        cluster_worker,
        spark_cluster,
        {"id": "jdbc", "kind": "jdbc_to_topic", "source": source, "target": {"topic": on_cluster, "partitions": 2}},
    )
    assert info["status"]["rows_done"] == ROWS
    run_locally(
        backfills,
        {"id": "jdbc", "kind": "jdbc_to_topic", "source": source, "target": {"topic": on_local, "partitions": 2}},
    )
    assert _view(consume_all(kafka.bootstrap_servers, on_cluster, ROWS)) == _view(
        consume_all(kafka.bootstrap_servers, on_local, ROWS)
    )


def _after_images(records: list[ConsumedRecord], prefix: str) -> list[tuple[Any, ...]]:
    """Each CDC record's key and row, its topic prefix (in the key schema's name) neutralised, and
    whether it sits in the partition the connector's producer would choose (CRC32 of the key bytes,
    librdkafka's default). The envelope's ``source`` differs by run (slot, LSN, time)."""
    out = []
    for r in records:
        payload = json.loads(r.value or b"null")
        payload = payload.get("payload", payload)
        key = (r.key or b"").decode().replace(prefix, "PREFIX")
        placed = r.partition == zlib.crc32(r.key or b"") % 2
        out.append((placed, key, payload["op"], json.dumps(payload["after"], sort_keys=True)))
    return sorted(out, key=repr)


def test_cdc_handoff_on_the_cluster_writes_what_local_writes(
    cluster_worker: WorkerProcess,
    spark_cluster: SparkCluster,
    backfills: BackfillManager,
    kafka: KafkaBroker,
    postgres: PostgresServer,
    postgres_db: str,
) -> None:
    run_sql(
        postgres_db,
        "CREATE TABLE items (id integer PRIMARY KEY, label text, price numeric(10,2))",
        f"INSERT INTO items SELECT i, 'item ' || i, i * 1.25 FROM generate_series(1, {ROWS}) i",
    )
    views = []
    for where in ("cluster", "local"):
        prefix = unique_topic_name(f"cdc-{where}")
        config = cdc_config(postgres.port, dbname(postgres_db), prefix, **{"table.include.list": r"public\.items"})
        spec = {
            "id": f"cdc-{where}",
            "kind": "jdbc_to_topic",
            "source": {
                "connection.url": postgres.jdbc_url(dbname(postgres_db)),
                "connection.user": "postgres",
                "table": "public.items",
            },
            "target": {"partitions": 2, "cdc": {"name": f"items-{where}", "config": config}},
        }
        if where == "cluster":
            assert run_on_cluster(cluster_worker, spark_cluster, spec)["status"]["rows_done"] == ROWS
        else:
            run_locally(backfills, spec)
        views.append(_after_images(consume_all(kafka.bootstrap_servers, f"{prefix}.public.items", ROWS), prefix))
    differing = set(views[0]) ^ set(views[1])
    assert not differing, (
        f"{len(differing)} records differ between the cluster and local[2], e.g. {sorted(differing)[:2]}"
    )
    assert len(views[0]) == ROWS and all(placed and op == "r" for placed, _, op, _ in views[0])


def _archive_records() -> list[OutgoingRecord]:
    base = int(time.time() * 1000) - 3_600_000
    return [
        OutgoingRecord(
            value=json.dumps({"i": i, "text": "é" * (i % 3)}).encode(),
            key=f"key-{i % 17}".encode(),
            headers=[("n", str(i).encode())] if i % 2 else [],
            partition=i % 2,
            timestamp=base + i * 1000,
        )
        for i in range(ROWS)
    ]


def _objects(s3: S3Server, bucket: str, prefix: str) -> dict[str, bytes]:
    client = s3.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix + "/").get("Contents", [])]
    return {k.removeprefix(prefix + "/"): client.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def test_topic_to_s3_and_back_on_the_cluster(
    cluster_worker: WorkerProcess,
    spark_cluster: SparkCluster,
    backfills: BackfillManager,
    kafka: KafkaBroker,
    s3: S3Server,
    s3_bucket: str,
) -> None:
    source = unique_topic_name("cluster-archive")
    create_topic(kafka.bootstrap_servers, source, partitions=2)
    produce(kafka.bootstrap_servers, source, _archive_records())
    original = consume_all(kafka.bootstrap_servers, source, ROWS)
    s3_keys = {
        **s3.connector_config(s3_bucket),
        "format.class": "ByteArrayFormat",
        "keys.format.class": "ByteArrayFormat",
    }
    sink_keys = {"flush.size": 100, "key.converter": "ByteArrayConverter", "value.converter": "ByteArrayConverter"}

    def export(where: str) -> dict[str, Any]:
        return {
            "id": f"export-{where}",
            "kind": "topic_to_s3",
            "source": {"topic": source},
            "target": {"config": {**s3_keys, **sink_keys, "topics.dir": where}},
        }

    assert run_on_cluster(cluster_worker, spark_cluster, export("cluster"))["status"]["rows_done"] == ROWS
    run_locally(backfills, export("local"))
    on_cluster, on_local = _objects(s3, s3_bucket, "cluster"), _objects(s3, s3_bucket, "local")
    assert f"{source}/partition=1/{source}+1+0000000100.bin" in on_cluster
    assert on_cluster == on_local

    replayed = unique_topic_name("cluster-replayed")
    replay = {
        "id": "replay",
        "kind": "s3_to_topic",
        "source": {"config": {**s3_keys, "topics.dir": "cluster"}, "topics": [source]},
        "target": {"topics": {source: replayed}},
    }
    assert run_on_cluster(cluster_worker, spark_cluster, replay)["status"]["rows_done"] == ROWS

    def view(records: list[ConsumedRecord]) -> list[tuple[Any, ...]]:
        return [(r.partition, r.offset, r.key, r.value, tuple(r.headers or ()), r.timestamp) for r in records]

    assert view(consume_all(kafka.bootstrap_servers, replayed, ROWS)) == view(original)


def test_topic_to_sink_on_the_cluster_writes_what_local_writes(
    cluster_worker: WorkerProcess,
    spark_cluster: SparkCluster,
    backfills: BackfillManager,
    kafka: KafkaBroker,
    postgres: PostgresServer,
) -> None:
    topic = produce_events(kafka.bootstrap_servers, "cluster-events", ROWS)
    db = f"cluster_sink_{uuid.uuid4().hex[:8]}"
    url = postgres.create_database(db)
    tables = {}
    for where in ("cluster", "local"):
        spec = {
            "id": f"sink-{where}",
            "kind": "topic_to_sink",
            "source": {"topic": topic},
            "target": {
                "config": {
                    "connector.class": "JdbcSink",
                    "connection.url": postgres.jdbc_url(db),
                    "connection.user": "postgres",
                    "table.name.format": f"events_{where}",
                    "auto.create": "true",
                    "insert.mode": "upsert",
                    "pk.mode": "record_value",
                    "pk.fields": "id",
                    "key.converter": "StringConverter",
                    "value.converter": "JsonConverter",
                }
            },
        }
        if where == "cluster":
            assert run_on_cluster(cluster_worker, spark_cluster, spec)["status"]["rows_done"] == ROWS
        else:
            run_locally(backfills, spec)
        tables[where] = sql(url, f"SELECT id, label FROM events_{where} ORDER BY id")
    assert len(tables["cluster"]) == ROWS
    assert tables["cluster"] == tables["local"]


def test_the_worker_log_names_no_backfill_key_as_unused(cluster_worker: WorkerProcess) -> None:
    assert "Worker configuration key 'backfill." not in cluster_worker.log(tail=1_000_000)
