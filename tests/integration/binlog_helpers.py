"""What the binlog CDC source's integration tests share: SQL on the suite's MariaDB, and a task
started as the runtime starts it, with a stored offset or none."""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

from sluice.connectors.source.binlog_cdc.connector import MariaDbCdcSourceConnector
from sluice.connectors.source.binlog_cdc.task import BinlogCdcTask
from tests.services.mariadb import MariaDbServer


def mysql(server: MariaDbServer, database: str, *statements: str) -> list[tuple[Any, ...]]:
    """Run ``statements`` in ``database``, committed; the rows of the last one."""
    conn = server.connect(database)
    try:
        rows: list[tuple[Any, ...]] = []
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
                rows = list(cur.fetchall())
        conn.commit()
        return rows
    finally:
        conn.close()


class StoredOffsets:
    """The runtime's offset store, as far as a task reads it: one stored offset (or none)."""

    def __init__(self, stored: dict[str, Any] | None = None) -> None:
        self.stored = stored

    def offset(self, partition: Any) -> dict[str, Any] | None:
        return self.stored


def start_task(config: dict[str, Any], stored: dict[str, Any] | None = None) -> BinlogCdcTask:
    """A task started on ``config`` from the ``stored`` offset."""
    task = BinlogCdcTask()
    context = SimpleNamespace(offset_reader=StoredOffsets(stored), serialization=None, transaction_context=None)
    task.start(config, context)  # type: ignore[arg-type]
    return task


def unique_server_id() -> int:
    """A ``database.server.id`` no other test picks: tests stream from the shared server at the same
    time, and two streams with one id end each other (the source then fails, naming the key)."""
    return 10_000 + uuid.uuid4().int % 4_000_000_000


def connector_config(server: MariaDbServer, prefix: str, **extra: str) -> dict[str, Any]:
    """A MariaDB connector config for a worker: the server's root user, a server id of its own,
    topic prefix ``prefix``, JSON converters; ``extra`` keys (the tables, the schema history) add
    to it or override."""
    return {
        "connector.class": "io.debezium.connector.mariadb.MariaDbConnector",
        "database.hostname": "127.0.0.1",
        "database.port": str(server.port),
        "database.user": "root",
        "database.server.id": str(unique_server_id()),
        "topic.prefix": prefix,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        **extra,
    }


def task_config(server: MariaDbServer, database: str, **extra: str) -> dict[str, Any]:
    """The task config a MariaDB connector gives for ``database`` on ``server``: streaming only
    (``snapshot.mode=no_data``), a memory schema history, a unique server id and topic prefix;
    ``extra`` keys override."""
    raw = {
        "database.hostname": "127.0.0.1",
        "database.port": str(server.port),
        "database.user": "root",
        "database.server.id": str(unique_server_id()),
        "topic.prefix": f"bin{uuid.uuid4().hex[:6]}",
        "database.include.list": database,
        "snapshot.mode": "no_data",
        "schema.history.internal": "io.debezium.relational.history.MemorySchemaHistory",
        "poll.interval.ms": "200",
        **extra,
    }
    connector = MariaDbCdcSourceConnector()
    connector.start(connector.validate(raw))
    return connector.task_configs(1)[0]
