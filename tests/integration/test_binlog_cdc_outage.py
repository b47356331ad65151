"""The binlog CDC source across a restart of its database server: what is committed before, while
the task waits for the server and after it is back reaches the task once, in commit order.

A server of its own (the suite's MariaDB is shared by parallel tests), stopped cleanly and started
again on the same data directory and port, as an operator's restart or a failover to the same host
would look to the connector; the server starts a new binlog file, which the stream follows.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sluice.connectors.source.binlog_cdc.connector import MariaDbCdcSourceConnector
from sluice.connectors.source.binlog_cdc.task import BinlogCdcTask
from sluice.deploy.processes import find_free_port
from tests.services.mariadb import MariaDbServer

pytestmark = pytest.mark.integration


class _NoOffsets:
    def offset(self, partition: Any) -> None:
        return None


def _insert(server: MariaDbServer, ids: range, per_transaction: int = 10) -> None:
    conn = server.connect("shop")
    try:
        with conn.cursor() as cur:
            for first in range(ids.start, ids.stop, per_transaction):
                last = min(first + per_transaction, ids.stop)
                cur.execute("INSERT INTO orders VALUES " + ", ".join(f"({i}, 'o{i}')" for i in range(first, last)))
                conn.commit()
    finally:
        conn.close()


def _poll_ids(task: BinlogCdcTask, want: int, polls: int = 150) -> list[int]:
    ids: list[int] = []
    for _ in range(polls):
        for record in task.poll() or []:
            if record.value is not None and record.topic.endswith(".orders"):
                ids.append(record.value["after"]["id"])
        if len(ids) >= want:
            break
    return ids


def test_a_server_restart_loses_and_repeats_no_change(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="sluice.connectors.source.binlog_cdc")
    base = Path(tempfile.mkdtemp(prefix="sluice-mariadb-restart-"))
    server = MariaDbServer(base_dir=base, port=find_free_port(), database="shop", kill_with_parent=True, binlog=True)
    task = BinlogCdcTask()
    try:
        server.start()
        conn = server.connect("shop")
        try:
            with conn.cursor() as cur:
                cur.execute("CREATE TABLE orders (id INT PRIMARY KEY, note VARCHAR(20))")
        finally:
            conn.close()
        connector = MariaDbCdcSourceConnector()
        connector.start(
            connector.validate(
                {
                    "database.hostname": "127.0.0.1",
                    "database.port": str(server.port),
                    "database.user": "root",
                    "database.server.id": str(6400 + uuid.uuid4().int % 1000),
                    "topic.prefix": "restart",
                    "database.include.list": "shop",
                    "snapshot.mode": "no_data",
                    "schema.history.internal": "io.debezium.relational.history.MemorySchemaHistory",
                    "poll.interval.ms": "200",
                }
            )
        )
        context = SimpleNamespace(offset_reader=_NoOffsets(), serialization=None, transaction_context=None)
        task.start(connector.task_configs(1)[0], context)  # type: ignore[arg-type]

        _insert(server, range(1, 51))
        before = _poll_ids(task, 50)
        assert before == list(range(1, 51))

        _insert(server, range(51, 61))  # committed before the server goes down, perhaps not read yet
        server.stop()
        after = _poll_ids(task, 10, polls=3)  # what reached the task's socket, then the stream breaks
        server.start()
        _insert(server, range(61, 101))  # before the task reconnects: it must resume where it was
        after += _poll_ids(task, 50 - len(after))
    finally:
        task.stop()
        task.poll()
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    # Every change once, in commit order: none lost while the server was down, none repeated
    # when the stream came back at the task's own position.
    assert after == list(range(51, 101)), after
    assert "The binlog connection broke" in caplog.text  # the stream did go down and come back
