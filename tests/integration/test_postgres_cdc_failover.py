"""``slot.failover`` (issue #29 item 5): on PostgreSQL 17+ the connector creates its slot as a
failover slot; on an older server the key is refused by name, at validate time and at start."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sluice.connectors.api import ConfigError
from sluice.connectors.source.postgres_cdc import catalog
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.connector import PostgresCdcSourceConnector
from tests.integration.cdc_helpers import (
    cdc_config,
    dbname,
    libpq,
    read_events,
    run_sql,
    value,
    worker,
    write_connector,
)
from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.postgres_fixtures import ON_PG15_AND_PG18
from tests.services.postgres import PostgresServer

pytestmark = pytest.mark.integration

RUNTIME_KEYS = ("connector.class", "key.converter", "value.converter")


def _parse(config: dict[str, str]) -> PostgresCdcConfig:
    return PostgresCdcConfig.parse({k: v for k, v in config.items() if k not in RUNTIME_KEYS})


def _slot_failover(url: str, slot: str) -> bool | None:
    rows = run_sql(url, "SELECT failover FROM pg_replication_slots WHERE slot_name = %s", params=(slot,))
    return rows[0][0] if rows else None


@pytest.mark.parametrize("pg_server", [18], indirect=True, ids=["pg18"])
def test_the_connector_creates_a_failover_slot_on_postgres_18(
    kafka: Any, pg_server: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdcfo")
    run_sql(postgres_db, "CREATE TABLE t (id int PRIMARY KEY, label text)")
    config = cdc_config(
        pg_server.port, dbname(postgres_db), prefix,
        **{"table.include.list": r"public\.t", "snapshot.mode": "no_data", "slot.failover": "true"},
    )  # fmt: skip
    assert PostgresCdcSourceConnector.validate_connectivity(_parse(config), 10) == {}
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    try:
        w.wait_running("cdc")
        time.sleep(1.0)
        run_sql(postgres_db, "INSERT INTO t VALUES (1, 'on a failover slot')")
        events = read_events(bootstrap, f"{prefix}.public.t", 1)
        failover = _slot_failover(postgres_db, config["slot.name"])
    finally:
        w.stop()
    assert value(events[0])["after"] == {"id": 1, "label": "on a failover slot"}
    assert failover is True


@pytest.mark.parametrize("pg_server", [18], indirect=True, ids=["pg18"])
def test_without_the_key_the_slot_is_not_a_failover_slot(pg_server: PostgresServer, postgres_db: str) -> None:
    config = _parse(cdc_config(pg_server.port, dbname(postgres_db), "fo"))
    with psycopg.connect(libpq(postgres_db), autocommit=True) as conn:
        assert catalog.ensure_slot(conn, config) is True
    assert _slot_failover(postgres_db, config.slot_name) is False


@pytest.mark.parametrize("pg_server", [18], indirect=True, ids=["pg18"])
def test_an_existing_slot_follows_the_key_both_ways(pg_server: PostgresServer, postgres_db: str) -> None:
    plain = cdc_config(pg_server.port, dbname(postgres_db), "fo")
    with psycopg.connect(libpq(postgres_db), autocommit=True) as conn:
        assert catalog.ensure_slot(conn, _parse(plain)) is True
        assert _slot_failover(postgres_db, plain["slot.name"]) is False
        assert catalog.ensure_slot(conn, _parse({**plain, "slot.failover": "true"})) is False  # kept, altered
        assert _slot_failover(postgres_db, plain["slot.name"]) is True
        assert catalog.ensure_slot(conn, _parse(plain)) is False
        assert _slot_failover(postgres_db, plain["slot.name"]) is False


def test_postgres_15_names_slot_failover_at_validate_and_at_start(pg_server: PostgresServer, postgres_db: str) -> None:
    run_sql(postgres_db, "CREATE TABLE t (id int PRIMARY KEY)")
    raw = {
        **cdc_config(pg_server.port, dbname(postgres_db), "fo"),
        "table.include.list": r"public\.t",
        "slot.failover": "true",
    }
    problems = PostgresCdcSourceConnector.validate_connectivity(_parse(raw), 10)
    assert set(problems) == {"slot.failover"}
    major = int(run_sql(postgres_db, "SHOW server_version_num")[0][0]) // 10000
    assert major < 17, "the default server is Debian's PostgreSQL 15"
    assert (
        "PostgreSQL 17 or later" in problems["slot.failover"]
        and f"runs PostgreSQL {major}." in problems["slot.failover"]
    )
    with psycopg.connect(libpq(postgres_db), autocommit=True) as conn, pytest.raises(ConfigError) as raised:
        catalog.ensure_slot(conn, _parse(raw))
    assert raised.value.key == "slot.failover"
    slots = run_sql(
        postgres_db, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s", params=(raw["slot.name"],)
    )
    assert slots == [(0,)]  # nothing was created


@ON_PG15_AND_PG18
def test_without_the_key_validate_finds_nothing(pg_server: PostgresServer, postgres_db: str) -> None:
    run_sql(postgres_db, "CREATE TABLE t (id int PRIMARY KEY)")
    raw = {**cdc_config(pg_server.port, dbname(postgres_db), "fo"), "table.include.list": r"public\.t"}
    assert PostgresCdcSourceConnector.validate_connectivity(_parse(raw), 10) == {}
