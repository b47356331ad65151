"""Configs written for Debezium's and Confluent's connectors deploy on Sluice unchanged (issue #24).

Each config below uses the keys the anchors' documented examples use (listed in
``reference/connect-anchors.md``), including the ones Sluice does not honour. Each is validated
(no errors; exactly the keys Sluice ignores come back as warnings, with the reason), created
unchanged (201, returned and stored as given) and runs against the real service. Validate also
checks connectivity, as Debezium's and Confluent's do: a closed port, refused credentials and a
misspelt ``connector.class`` are named on their key.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.integration.cdc_helpers import JSON, read_events, value
from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.worker_process import WorkerFactory, WorkerProcess

TIMEOUT_S = 30
SECRET_KEYS = {"database.password", "connection.password", "aws.secret.access.key", "aws.access.key.id"}


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory) -> WorkerProcess:
    return module_worker_process(**{"task.executor": "thread"})


def _validate(worker: WorkerProcess, config: dict[str, str]) -> dict[str, Any]:
    plugin = config["connector.class"]
    r = httpx.put(f"{worker.url}/connector-plugins/{plugin}/config/validate", json=config, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _errors(infos: dict[str, Any]) -> dict[str, list[str]]:
    return {c["value"]["name"]: c["value"]["errors"] for c in infos["configs"] if c["value"]["errors"]}


def _deploy_unchanged(worker: WorkerProcess, name: str, config: dict[str, str], not_honoured: set[str]) -> None:
    infos = _validate(worker, config)
    assert infos["error_count"] == 0, _errors(infos)
    warnings = {w["name"]: w["message"] for w in infos["warnings"]}
    assert set(warnings) == not_honoured
    assert all("accepted but not honoured" in m for m in warnings.values()), warnings
    by_key = {c["value"]["name"]: c["value"] for c in infos["configs"]}
    assert all(by_key[k]["errors"] == [] and by_key[k]["warnings"] == [warnings[k]] for k in not_honoured)

    created = httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=TIMEOUT_S)
    assert created.status_code == 201, created.text
    stored = httpx.get(f"{worker.url}/connectors/{name}/config", timeout=TIMEOUT_S).json()
    shown = {k: v for k, v in config.items() if k not in SECRET_KEYS}
    assert {k: v for k, v in stored.items() if k not in SECRET_KEYS} == {**shown, "name": name}
    assert set(stored) == {*config, "name"}
    worker.wait_running(name, timeout=60)
    assert "ignores" in worker.log() and sorted(not_honoured)[0] in worker.log()
    assert httpx.delete(f"{worker.url}/connectors/{name}", timeout=TIMEOUT_S).status_code == 204


def _database(url: str) -> str:
    return str(make_url(url).database)


def test_debezium_postgres_config(worker: WorkerProcess, kafka, postgres, postgres_db: str) -> None:
    with psycopg.connect(postgres.dsn(_database(postgres_db)), autocommit=True) as conn:
        conn.execute("CREATE TABLE inventory (id int PRIMARY KEY, sku text, photo bytea, shelf_life interval)")
        conn.execute("INSERT INTO inventory VALUES (1, 'a', '\\x01', '1 day')")
    tag = uuid.uuid4().hex[:8]
    config = {
        "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
        "tasks.max": "1",
        "database.hostname": "127.0.0.1",
        "database.port": str(postgres.port),
        "database.user": "postgres",
        "database.password": "dbz-pw-4s2",  # trust auth; not "postgres", which would mask the user too
        "database.dbname": _database(postgres_db),
        "topic.prefix": f"fulfillment{tag}",
        "table.include.list": "public.inventory",
        "plugin.name": "pgoutput",
        "slot.name": f"debezium_{tag}",
        "publication.name": f"dbz_publication_{tag}",
        "publication.autocreate.mode": "filtered",
        "snapshot.mode": "initial",
        "decimal.handling.mode": "precise",
        "time.precision.mode": "adaptive",
        "tombstones.on.delete": "true",
        "heartbeat.interval.ms": "10000",
        "key.converter": JSON,
        "value.converter": JSON,
        # The keys of issue #24 that Debezium users set every day: these change the data or the
        # task's behaviour...
        "binary.handling.mode": "base64",
        "interval.handling.mode": "string",
        "hstore.handling.mode": "json",
        "include.unknown.datatypes": "false",
        "slot.max.retries": "6",
        "slot.retry.delay.ms": "10000",
        "message.key.columns": "public.inventory:id",
        # ... and these Sluice accepts without honouring them.
        "snapshot.locking.mode": "none",
        "errors.max.retries": "-1",
    }
    not_honoured = {"snapshot.locking.mode", "errors.max.retries"}
    _deploy_unchanged(worker, f"dbz-{tag}", config, not_honoured)
    (snapshot,) = read_events(kafka.bootstrap_servers, f"{config['topic.prefix']}.public.inventory", 1)
    after = value(snapshot)["after"]
    assert after["photo"] == "AQ==" and after["shelf_life"] == "P0Y0M1DT0H0M0S", after
    # The slot outlives the connector (slot.drop.on.stop is off, as in production); free its WAL.
    deadline = time.monotonic() + 20
    with psycopg.connect(postgres.dsn(_database(postgres_db)), autocommit=True) as conn:
        while time.monotonic() < deadline:
            try:
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                    (config["slot.name"],),
                )
                break
            except psycopg.errors.ObjectInUse:  # the stopped task's walsender is still exiting
                time.sleep(0.2)


def test_confluent_jdbc_source_and_sink_configs(worker: WorkerProcess, postgres, postgres_db: str) -> None:
    with psycopg.connect(postgres.dsn(_database(postgres_db)), autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE orders (id serial PRIMARY KEY, amount numeric(10, 2), updated timestamp DEFAULT now())"
        )
    url = postgres.jdbc_url(_database(postgres_db))
    source = {
        "connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector",
        "tasks.max": "1",
        "connection.url": url,
        "connection.user": "postgres",
        "connection.password": "jdbc-pw-9k1",
        "connection.attempts": "3",
        "connection.backoff.ms": "10000",
        "dialect.name": "PostgreSqlDatabaseDialect",
        "mode": "timestamp+incrementing",
        "incrementing.column.name": "id",
        "timestamp.column.name": "updated",
        "table.whitelist": "orders",
        "topic.prefix": f"jdbc-{uuid.uuid4().hex[:6]}-",
        "poll.interval.ms": "5000",
        "batch.max.rows": "100",
        "numeric.mapping": "best_fit",
        "db.timezone": "UTC",
        "validate.non.null": "false",
        "quote.sql.identifiers": "always",
        "transaction.isolation.mode": "DEFAULT",
        "timestamp.granularity": "connect_logical",
    }
    _deploy_unchanged(
        worker, "jdbc-source", source, {"quote.sql.identifiers", "transaction.isolation.mode", "timestamp.granularity"}
    )
    sink = {
        "connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector",
        "tasks.max": "1",
        "topics": unique_topic_name("orders"),
        "connection.url": url,
        "connection.user": "postgres",
        "connection.password": "jdbc-pw-9k1",
        "insert.mode": "upsert",
        "pk.mode": "record_value",
        "pk.fields": "id",
        "auto.create": "true",
        "auto.evolve": "true",
        "delete.enabled": "false",
        "table.name.format": "kafka_${topic}",
        "batch.size": "3000",
        "max.retries": "10",
        "retry.backoff.ms": "3000",
        "db.timezone": "UTC",
        "quote.sql.identifiers": "always",
        "date.timezone": "DB_TIMEZONE",
        "key.converter": JSON,
        "value.converter": JSON,
        "value.converter.schemas.enable": "true",
    }
    _deploy_unchanged(worker, "jdbc-sink", sink, {"quote.sql.identifiers", "date.timezone"})


def test_confluent_s3_sink_config(worker: WorkerProcess, s3, s3_bucket: str) -> None:
    config = {
        "connector.class": "io.confluent.connect.s3.S3SinkConnector",
        "tasks.max": "1",
        "topics": unique_topic_name("s3_topic"),
        "s3.region": s3.region,
        "s3.bucket.name": s3_bucket,
        "s3.part.size": "5242880",
        "store.url": s3.endpoint_url,
        "aws.access.key.id": s3.access_key,
        "aws.secret.access.key": s3.secret_key,
        "flush.size": "3",
        "storage.class": "io.confluent.connect.s3.storage.S3Storage",
        "format.class": "io.confluent.connect.s3.format.json.JsonFormat",
        "schema.generator.class": "io.confluent.connect.storage.hive.schema.DefaultSchemaGenerator",
        "partitioner.class": "io.confluent.connect.storage.partitioner.DefaultPartitioner",
        "schema.compatibility": "NONE",
        "s3.ssea.name": "AES256",
        "value.converter": JSON,
        "value.converter.schemas.enable": "false",
    }
    _deploy_unchanged(worker, "s3-sink", config, {"schema.generator.class", "s3.ssea.name"})
    missing = _validate(worker, {**config, "s3.bucket.name": f"no-such-{uuid.uuid4().hex[:8]}"})
    assert "does not exist" in _errors(missing)["s3.bucket.name"][0]


def test_confluent_elasticsearch_sink_config(worker: WorkerProcess, opensearch) -> None:
    config = {
        "connector.class": "io.confluent.connect.elasticsearch.ElasticsearchSinkConnector",
        "tasks.max": "1",
        "topics": unique_topic_name("test-elasticsearch-sink"),
        "key.ignore": "true",
        "schema.ignore": "true",
        "connection.url": opensearch.url,
        "type.name": "kafka-connect",
        "behavior.on.null.values": "ignore",
        "drop.invalid.message": "true",
        "batch.size": "2000",
        "max.retries": "5",
        "value.converter": JSON,
        "value.converter.schemas.enable": "false",
    }
    _deploy_unchanged(worker, "es-sink", config, {"type.name"})
    closed = _validate(worker, {**config, "connection.url": f"http://127.0.0.1:{_closed_port()}"})
    assert list(_errors(closed)) == ["connection.url"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def password_role(postgres) -> Iterator[tuple[str, str]]:
    """A role the server authenticates by password (scram), whatever the cluster's trust default."""
    role, password = f"pw_{uuid.uuid4().hex[:8]}", f"right-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres.dsn(), autocommit=True) as conn:
        hba = Path(str(conn.execute("SHOW hba_file").fetchone()[0]))  # type: ignore[index]
        original = hba.read_text()
        # First match wins: this line concerns the new role only, so other tests keep trust.
        hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n{original}")
        conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield role, password
    finally:
        hba.write_text(original)
        with psycopg.connect(postgres.dsn(), autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(f"DROP ROLE IF EXISTS {role}")


def test_validate_names_an_unreachable_database_and_refused_credentials(
    worker: WorkerProcess, postgres, password_role: tuple[str, str]
) -> None:
    role, password = password_role
    base = {
        "connector.class": "JdbcSinkConnector",
        "topics": "t",
        "connection.url": postgres.jdbc_url(),
        "connection.user": role,
        "connection.password": password,
    }
    assert _validate(worker, base)["error_count"] == 0

    closed = _validate(worker, {**base, "connection.url": f"jdbc:postgresql://127.0.0.1:{_closed_port()}/sluice"})
    assert list(_errors(closed)) == ["connection.url"], _errors(closed)

    wrong = _validate(worker, {**base, "connection.password": "wrong-password-123"})
    assert list(_errors(wrong)) == ["connection.password"], _errors(wrong)
    assert _errors(wrong)["connection.password"][0].endswith(f":{postgres.port}: authentication failed")
    assert "wrong-password-123" not in str(wrong)

    cdc = {
        "connector.class": "PostgresConnector",
        "database.hostname": "127.0.0.1",
        "database.port": str(postgres.port),
        "database.user": role,
        "database.password": "wrong-password-123",
        "database.dbname": postgres.database,
        "topic.prefix": "p",
    }
    refused = _validate(worker, cdc)
    assert list(_errors(refused)) == ["database.password"] and "wrong-password-123" not in str(refused)
    unreachable = _validate(worker, {**cdc, "database.port": str(_closed_port()), "database.password": password})
    assert list(_errors(unreachable)) == ["database.hostname"]

    # Creating a JDBC connector does not check connectivity (as in Connect): the task reports the
    # outage instead. Debezium's PostgreSQL connector checks its database in validate(), which
    # Connect runs on create, so the CDC source refuses the same way.
    created = httpx.put(
        f"{worker.url}/connectors/jdbc-wrong-pw/config", json={**base, "connection.password": "x"}, timeout=TIMEOUT_S
    )
    assert created.status_code == 201
    httpx.delete(f"{worker.url}/connectors/jdbc-wrong-pw", timeout=TIMEOUT_S)
    refused_create = httpx.put(f"{worker.url}/connectors/cdc-wrong-pw/config", json=cdc, timeout=TIMEOUT_S)
    assert refused_create.status_code == 400, refused_create.text
    assert "database.password: " in refused_create.json()["message"]
    assert "wrong-password-123" not in refused_create.text


def test_a_misspelt_connector_class_gets_the_closest_names(worker: WorkerProcess) -> None:
    config = {
        "connector.class": "io.confluent.connect.jdbc.JdbcSinkConector",
        "topics": "t",
        "connection.url": "jdbc:sqlite::memory:",
    }
    created = httpx.post(f"{worker.url}/connectors", json={"name": "typo", "config": config}, timeout=TIMEOUT_S)
    assert created.status_code == 400 and "Did you mean JdbcSinkConnector?" in created.json()["message"]
    validate = httpx.put(f"{worker.url}/connector-plugins/JdbcSinkConector/config/validate", json={}, timeout=TIMEOUT_S)
    assert validate.status_code == 404
    assert validate.json()["message"] == "Unknown plugin JdbcSinkConector. Did you mean JdbcSinkConnector?"
