"""What the binlog CDC source's integration tests share: SQL on the suite's MariaDB, and a task
started as the runtime starts it, with a stored offset or none."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

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
