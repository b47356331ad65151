"""Two binlog readers with one ``database.server.id``: the server streams to one connection per
server id and drops the other, so a connector whose stream was taken fails with an error naming
the key, rather than taking the stream back, and so on forever; a replica registered with the id
is found before streaming."""

from __future__ import annotations

from typing import Any

import pytest
from pymysqlreplication.binlogstream import ReportSlave

from sluice.connectors.api import ConfigError
from sluice.connectors.source.binlog_cdc.task import BinlogCdcTask
from tests.integration.binlog_helpers import mysql as _mysql
from tests.integration.binlog_helpers import start_task as _task
from tests.integration.binlog_helpers import task_config, unique_server_id
from tests.services.mariadb import MariaDbServer

pytestmark = pytest.mark.integration


def _same_id_config(server: MariaDbServer, database: str, server_id: int) -> dict[str, Any]:
    return task_config(server, database, **{"database.server.id": str(server_id), "topic.prefix": f"sameid{server_id}"})


def _ids(task: BinlogCdcTask, want: int, polls: int = 50) -> list[int]:
    ids: list[int] = []
    for _ in range(polls):
        ids += [r.value["after"]["id"] for r in task.poll() or [] if r.value is not None and "after" in r.value]
        if len(ids) >= want:
            break
    return ids


def _stop(task: BinlogCdcTask) -> None:
    task.stop()
    task.poll()


def test_a_second_connector_with_the_same_server_id_fails_the_first(mariadb: MariaDbServer, mariadb_db: str) -> None:
    database = mariadb_db.rsplit("/", 1)[-1]
    _mysql(mariadb, database, "CREATE TABLE items (id INT PRIMARY KEY)")
    server_id = unique_server_id()
    first = _task(_same_id_config(mariadb, database, server_id))
    second: BinlogCdcTask | None = None
    try:
        _mysql(mariadb, database, "INSERT INTO items VALUES (1)")
        assert _ids(first, 1) == [1]  # streaming
        second = _task(_same_id_config(mariadb, database, server_id))
        _mysql(mariadb, database, "INSERT INTO items VALUES (2)")
        assert _ids(second, 1) == [2]  # the newer connection has the stream
        with pytest.raises(ConfigError) as failure:
            _ids(first, 100, polls=20)  # the older one learns it lost the stream within a few polls
        _mysql(mariadb, database, "INSERT INTO items VALUES (3)")
        assert _ids(second, 1) == [3]  # and leaves it to the newer one
    finally:
        _stop(first)
        if second is not None:
            _stop(second)
    assert failure.value.key == "database.server.id"
    message = str(failure.value)
    assert f"database.server.id={server_id} is in use" in message
    assert "unique database.server.id" in message


def test_a_replica_registered_with_the_server_id_is_found_at_start(mariadb: MariaDbServer, mariadb_db: str) -> None:
    database = mariadb_db.rsplit("/", 1)[-1]
    server_id = unique_server_id()
    replica = mariadb.connect()
    try:
        # What a replica sends before it asks for the binlog (COM_REGISTER_SLAVE), with the host
        # and port it reports; the server lists it in SHOW SLAVE HOSTS while the connection lives.
        replica._write_bytes(ReportSlave(("replica-7", "repl", "", 3307)).encoded(server_id))
        replica._next_seq_id = 1
        replica._read_packet()
        with pytest.raises(ConfigError) as failure:
            _task(_same_id_config(mariadb, database, server_id))
    finally:
        replica.close()
    assert failure.value.key == "database.server.id"
    assert f"database.server.id={server_id} is in use by the replica at replica-7:3307" in str(failure.value)
    _stop(_task(_same_id_config(mariadb, database, server_id)))  # the id is free again once the replica left
