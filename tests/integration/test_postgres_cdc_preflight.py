"""The CDC source's pre-flight checks (issue #29 item 3), each provoked on a real PostgreSQL: the
validate endpoint names the key to fix and what to do, before a connector is created."""

from __future__ import annotations

import glob
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.connector import PostgresCdcSourceConnector
from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.cdc_helpers import cdc_config, dbname, libpq, run_sql
from tests.integration.cdc_helpers import worker as sluice_worker
from tests.integration.postgres_fixtures import ON_PG15_AND_PG18
from tests.services.postgres import PostgresError, PostgresServer

pytestmark = pytest.mark.integration


RUNTIME_KEYS = ("connector.class", "key.converter", "value.converter")


def _parse(config: dict[str, str]) -> PostgresCdcConfig:
    """The connector's own keys, as the worker hands them to it."""
    return PostgresCdcConfig.parse({k: v for k, v in config.items() if k not in RUNTIME_KEYS})


def _problems(port: int, database: str, **overrides: str) -> dict[str, str]:
    config = {**cdc_config(port, database, "pre"), "table.include.list": "public.orders", **overrides}
    return PostgresCdcSourceConnector.validate_connectivity(_parse(config), 10)


@pytest.fixture
def orders_db(postgres_db: str) -> str:
    run_sql(postgres_db, "CREATE TABLE orders (id integer PRIMARY KEY, note text)")
    return postgres_db


@ON_PG15_AND_PG18
def test_a_ready_database_has_no_problem(orders_db: str, pg_server: PostgresServer) -> None:
    assert _problems(pg_server.port, dbname(orders_db)) == {}


def test_a_user_without_replication_rights_is_named(orders_db: str, postgres: PostgresServer) -> None:
    run_sql(orders_db, "DROP ROLE IF EXISTS plain_reader", "CREATE ROLE plain_reader LOGIN")
    problems = _problems(postgres.port, dbname(orders_db), **{"database.user": "plain_reader"})
    assert set(problems) == {"database.user"}
    assert "'plain_reader'" in problems["database.user"] and "ALTER ROLE plain_reader REPLICATION" in problems["database.user"]


def test_a_missing_publication_is_named_when_autocreate_is_disabled(orders_db: str, postgres: PostgresServer) -> None:
    problems = _problems(postgres.port, dbname(orders_db), **{"publication.name": "not_there",
                                                              "publication.autocreate.mode": "disabled"})
    assert set(problems) == {"publication.name"} and "'not_there' does not exist" in problems["publication.name"]
    run_sql(orders_db, "CREATE PUBLICATION not_there FOR TABLE orders")
    try:
        assert _problems(postgres.port, dbname(orders_db), **{"publication.name": "not_there",
                                                              "publication.autocreate.mode": "disabled"}) == {}
    finally:
        run_sql(orders_db, "DROP PUBLICATION not_there")


@ON_PG15_AND_PG18
def test_a_table_postgres_cannot_publish_is_named_until_it_has_an_identity(orders_db: str, pg_server: PostgresServer) -> None:
    run_sql(orders_db, "CREATE TABLE events (at timestamptz, what text)")
    include = {"table.include.list": "public.orders,public.events"}
    problems = _problems(pg_server.port, dbname(orders_db), **include)
    assert set(problems) == {"table.include.list"}
    assert "public.events" in problems["table.include.list"] and "public.orders" not in problems["table.include.list"]
    run_sql(orders_db, "ALTER TABLE events REPLICA IDENTITY FULL")
    assert _problems(pg_server.port, dbname(orders_db), **include) == {}


@ON_PG15_AND_PG18
def test_a_slot_of_another_plugin_is_named(orders_db: str, pg_server: PostgresServer) -> None:
    run_sql(orders_db, "SELECT pg_create_logical_replication_slot('decoding_slot', 'test_decoding')")
    try:
        problems = _problems(pg_server.port, dbname(orders_db), **{"slot.name": "decoding_slot"})
        assert set(problems) == {"slot.name"} and "'test_decoding'" in problems["slot.name"]
    finally:
        run_sql(orders_db, "SELECT pg_drop_replication_slot('decoding_slot')")


@pytest.fixture
def slot_reader(orders_db: str, postgres: PostgresServer) -> Iterator[str]:
    """A pgoutput slot read by another client (pg_recvlogical) until the test ends."""
    binaries = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_recvlogical"))
    assert binaries, "pg_recvlogical is part of PostgreSQL's server binaries"
    run_sql(orders_db, "CREATE PUBLICATION held_pub FOR TABLE orders")
    run_sql(orders_db, "SELECT pg_create_logical_replication_slot('held_slot', 'pgoutput')")
    proc = subprocess.Popen(
        [binaries[-1], "-h", "127.0.0.1", "-p", str(postgres.port), "-U", "postgres", "-d", dbname(orders_db),
         "-S", "held_slot", "--start", "-f", "/dev/null", "-o", "proto_version=1", "-o", "publication_names=held_pub"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 15
        while not run_sql(orders_db, "SELECT active FROM pg_replication_slots WHERE slot_name = 'held_slot'")[0][0]:
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "pg_recvlogical did not start reading the slot"
            time.sleep(0.2)
        yield "held_slot"
    finally:
        proc.terminate()
        proc.wait(10)
        run_sql(orders_db, "SELECT pg_drop_replication_slot('held_slot')")


def test_a_slot_another_client_reads_is_named_with_that_client(orders_db: str, postgres: PostgresServer,
                                                              slot_reader: str) -> None:
    problems = _problems(postgres.port, dbname(orders_db), **{"slot.name": slot_reader, "publication.name": "held_pub"})
    assert set(problems) == {"slot.name"}
    assert "being read by another client (PID " in problems["slot.name"] and "'pg_recvlogical'" in problems["slot.name"]
    # Creating the connector is not refused for it: the task waits for the slot (slot.max.retries).
    config = {**cdc_config(postgres.port, dbname(orders_db), "pre"), "table.include.list": "public.orders",
              "slot.name": slot_reader, "publication.name": "held_pub"}
    assert PostgresCdcSourceConnector.validate_on_create(_parse(config), 10) == {}


@pytest.fixture
def replica_only_server() -> Iterator[PostgresServer]:
    """A server of its own with wal_level=replica and a single replication slot, already taken."""
    base = Path(tempfile.mkdtemp(prefix="sluice-pg-preflight-"))
    server = PostgresServer(base_dir=base, kill_with_parent=True,
                            extra_settings={"wal_level": "replica", "max_replication_slots": "1"})
    try:
        server.start()
    except PostgresError as exc:
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"could not start PostgreSQL:\n{exc}", pytrace=False)
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as conn:
            conn.execute("CREATE TABLE orders (id integer PRIMARY KEY)")
            conn.execute("SELECT pg_create_physical_replication_slot('standby')")
        yield server
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


def test_wal_level_and_a_full_slot_table_are_named(replica_only_server: PostgresServer) -> None:
    server = replica_only_server
    problems = _problems(server.port, server.database)  # type: ignore[arg-type]
    assert set(problems) == {"database.hostname", "slot.name"}
    assert "wal_level=replica" in problems["database.hostname"] and "wal_level=logical" in problems["database.hostname"]
    assert "all 1 slots of max_replication_slots are in use" in problems["slot.name"]


def test_the_validate_endpoint_reports_them_on_their_keys(tmp_path: Path, kafka: KafkaBroker, orders_db: str,
                                                         postgres: PostgresServer) -> None:
    run_sql(orders_db, "DROP ROLE IF EXISTS plain_reader", "CREATE ROLE plain_reader LOGIN")
    config = {**cdc_config(postgres.port, dbname(orders_db), "pre"), "table.include.list": "public.orders",
              "database.user": "plain_reader", "publication.name": "absent", "publication.autocreate.mode": "disabled"}
    worker = sluice_worker(tmp_path, kafka.bootstrap_servers).start()
    try:
        response = httpx.put(f"{worker.url}/connector-plugins/PostgresCdcSource/config/validate", json=config, timeout=60)
        # Creating runs the same checks (Debezium's validate does, on Connect's create): refused,
        # every problem named, nothing stored.
        created = httpx.post(f"{worker.url}/connectors", json={"name": "pre", "config": config}, timeout=60)
        stored = httpx.get(f"{worker.url}/connectors/pre", timeout=10)
        fixed = {**config, "database.user": "postgres", "publication.autocreate.mode": "all_tables"}
        created_fixed = httpx.put(f"{worker.url}/connectors/pre/config", json=fixed, timeout=60)
    finally:
        worker.stop()
    assert created.status_code == 400, created.text
    message = created.json()["message"]
    assert message.startswith("Connector configuration is invalid and contains the following 2 error(s):")
    assert "database.user: " in message and "REPLICATION" in message and "publication.name: " in message
    assert stored.status_code == 404
    assert created_fixed.status_code == 201, created_fixed.text
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    errors = {c["value"]["name"]: c["value"]["errors"] for c in body["configs"] if c["value"]["errors"]}
    assert body["error_count"] == len(errors) == 2, errors
    assert "REPLICATION" in errors["database.user"][0] and "does not exist" in errors["publication.name"][0]


def test_the_server_version_check(monkeypatch: pytest.MonkeyPatch, orders_db: str) -> None:
    """PostgreSQL 9.6 cannot be started here: the check is given a connection that reports it."""
    from sluice.connectors.source.postgres_cdc import preflight

    with psycopg.connect(libpq(orders_db)) as conn:
        info = type("Info", (), {"server_version": 90624})()
        proxy = type("Old", (), {"info": info, "execute": staticmethod(conn.execute)})()
        config = _parse(cdc_config(1, dbname(orders_db), "pre"))
        found = preflight._server_problems(proxy, config)  # type: ignore[arg-type]
    assert found == [("database.hostname", "The PostgreSQL server at 127.0.0.1:1 runs version 9.6; logical "
                      "replication with pgoutput needs PostgreSQL 10 or later.")]
