"""The connector kit's standard checks on the built-ins that talk to PostgreSQL: the JDBC source,
the JDBC sink and the CDC source, each against a fresh database of the session server."""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Iterator
from typing import Any

import pytest

from sluice.connectors.api import STRING_SCHEMA, SinkRecord, SourceRecord
from sluice.connectors.sink.jdbc.connector import JdbcSinkConnector
from sluice.connectors.source.jdbc.connector import JdbcSourceConnector
from sluice.connectors.source.postgres_cdc.connector import PostgresCdcSourceConnector
from sluice.connectors.testkit import InvalidConfig, SinkConnectorChecks, SourceConnectorChecks
from tests.integration.cdc_helpers import cdc_config, dbname
from tests.integration.jdbc_helpers import sql
from tests.services.postgres import PostgresServer

pytestmark = pytest.mark.integration


class TestJdbcSource(SourceConnectorChecks):
    """Incrementing mode on an auto-increment key: each added row is one record, once."""

    connector_class = JdbcSourceConnector

    @pytest.fixture(autouse=True)
    def _table(self, postgres_db: str) -> None:
        self.url = postgres_db
        sql(self.url, "CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL)")

    def valid_config(self) -> dict[str, Any]:
        return {
            "connection.url": self.url,
            "mode": "incrementing",
            "table.include.list": "orders",
            "topic.prefix": "kit-",
            "poll.interval.ms": 200,
            "batch.max.rows": 4,
        }

    def invalid_configs(self) -> list[InvalidConfig]:
        valid = self.valid_config()
        return [
            InvalidConfig({**valid, "mode": "sometimes"}, "mode", "no such mode"),
            InvalidConfig({**valid, "batch.max.rows": 0}, "batch.max.rows", "no rows per poll"),
        ]

    def add_source_data(self, start: int, count: int) -> None:
        for n in range(start, start + count):
            sql(self.url, "INSERT INTO orders (item) VALUES (%s)", (f"order {n}",))

    def record_identity(self, record: SourceRecord) -> Hashable:
        return (record.topic, record.value["item"])

    def expected_identities(self, start: int, count: int) -> list[Hashable]:
        return [("kit-orders", f"order {n}") for n in range(start, start + count)]


class TestJdbcSink(SinkConnectorChecks):
    """Upserts by the value's ``id`` into a table it creates."""

    connector_class = JdbcSinkConnector

    @pytest.fixture(autouse=True)
    def _database(self, postgres_db: str) -> None:
        self.url = postgres_db

    def valid_config(self) -> dict[str, Any]:
        return {
            "connection.url": self.url,
            "topics": "kit_items",
            "auto.create": True,
            "insert.mode": "upsert",
            "pk.mode": "record_value",
            "pk.fields": "id",
        }

    def invalid_configs(self) -> list[InvalidConfig]:
        valid = self.valid_config()
        return [
            InvalidConfig({**valid, "insert.mode": "append"}, "insert.mode", "no such insert mode"),
            InvalidConfig({**valid, "batch.size": 0}, "batch.size", "no rows per transaction"),
        ]

    def read_written(self) -> list[Hashable]:
        exists = sql(self.url, "SELECT to_regclass('kit_items') IS NOT NULL")[0][0]
        return [row[0] for row in sql(self.url, "SELECT id FROM kit_items")] if exists else []

    def unwritable_record(self, topic: str, partition: int, offset: int) -> SinkRecord:
        # A string where the table needs a row: nothing to take the primary key from.
        return SinkRecord(topic, partition, offset, value="not a row", value_schema=STRING_SCHEMA)


class TestPostgresCdcSource(SourceConnectorChecks):
    """Inserts into a captured table: the first run snapshots the rows already there, the restarted
    task streams the rest from the stored position, each row's event exactly once."""

    connector_class = PostgresCdcSourceConnector
    data_timeout_s = 60.0

    @pytest.fixture(autouse=True)
    def _captured_table(self, postgres: PostgresServer, postgres_db: str) -> Iterator[None]:
        self.url = postgres_db
        sql(self.url, "CREATE TABLE orders (id int PRIMARY KEY, item text NOT NULL)")
        config = cdc_config(postgres.port, dbname(postgres_db), f"kit{uuid.uuid4().hex[:6]}")
        # Only the connector's own keys: converters and the class are the runtime's.
        for runtime_key in ("connector.class", "key.converter", "value.converter"):
            config.pop(runtime_key)
        # One config per test: every task of a check must use the same slot and publication.
        self.config = {**config, "table.include.list": r"public\.orders", "slot.drop.on.stop": "false"}
        yield
        # The slot would hold the session server's WAL back for the rest of the run.
        sql(self.url, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s AND NOT active", (config["slot.name"],))

    def valid_config(self) -> dict[str, Any]:
        return dict(self.config)

    def invalid_configs(self) -> list[InvalidConfig]:
        valid = self.valid_config()
        return [
            InvalidConfig({**valid, "database.port": "0"}, "database.port", "port out of range"),
            InvalidConfig({**valid, "snapshot.mode": "whenever"}, "snapshot.mode", "no such snapshot mode"),
        ]

    def add_source_data(self, start: int, count: int) -> None:
        for n in range(start, start + count):
            sql(self.url, "INSERT INTO orders VALUES (%s, %s)", (n, f"order {n}"))

    def record_identity(self, record: SourceRecord) -> Hashable | None:
        value = record.value
        if not isinstance(value, dict) or value.get("after") is None:
            return None  # heartbeats and other non-row events
        return value["after"]["id"]

    def expected_identities(self, start: int, count: int) -> list[Hashable]:
        return list(range(start, start + count))
