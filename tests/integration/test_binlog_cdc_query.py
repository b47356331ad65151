"""``include.query``: each row change event's ``source.query`` is the statement that made it.

MariaDB logs the statement behind row events as an annotate rows event (``binlog_annotate_row_events``,
on by default) and sends it only to a replica that asks: with ``include.query=true`` the source asks,
and each event carries its statement until the next one or the transaction's end; without it, or
where the server logged no statement, ``query`` is null, as Debezium's.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sluice.connectors.source.binlog_cdc.task import BinlogCdcTask
from tests.integration.binlog_helpers import mysql as _mysql
from tests.integration.binlog_helpers import start_task, task_config
from tests.services.mariadb import MariaDbServer

pytestmark = pytest.mark.integration

TABLE = "CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(20))"


def _poll(task: BinlogCdcTask, count: int) -> list[Any]:
    """Change events (tombstones left out) until ``count`` or 50 polls."""
    events: list[Any] = []
    for _ in range(50):
        events.extend(r for r in task.poll() or [] if r.value is not None)
        if len(events) >= count:
            break
    return events


def _stop(*tasks: BinlogCdcTask) -> None:
    for task in tasks:
        task.stop()
        task.poll()


def _changes(events: list[Any]) -> list[tuple[str, int, str | None]]:
    """``(op, id, source.query)`` of each event."""
    return [(e.value["op"], (e.value["after"] or e.value["before"])["id"], e.value["source"]["query"]) for e in events]


def test_each_event_carries_its_statement_until_the_transaction_ends(mariadb: MariaDbServer, mariadb_db: str) -> None:
    database = mariadb_db.rsplit("/", 1)[-1]
    _mysql(mariadb, database, TABLE)
    with_query = start_task(task_config(mariadb, database, **{"topic.prefix": "queried", "include.query": "true"}))
    without = start_task(task_config(mariadb, database, **{"topic.prefix": "plain"}))
    insert = "INSERT INTO items VALUES (1, 'one'), (2, 'two')"
    update = "UPDATE items SET name = 'uno' /* renamed */ WHERE id = 1"
    delete = "DELETE FROM items WHERE id = 2"
    try:
        _mysql(mariadb, database, "BEGIN", insert, update, delete, "COMMIT")
        # The next transaction's statement is not logged: its event must not inherit the DELETE.
        _mysql(
            mariadb, database, "SET SESSION binlog_annotate_row_events = OFF", "INSERT INTO items VALUES (3, 'three')"
        )
        queried, plain = _poll(with_query, 5), _poll(without, 5)
    finally:
        _stop(with_query, without)
    assert _changes(queried) == [
        ("c", 1, insert), ("c", 2, insert), ("u", 1, update), ("d", 2, delete), ("c", 3, None),
    ]  # fmt: skip
    assert _changes(plain) == [("c", 1, None), ("c", 2, None), ("u", 1, None), ("d", 2, None), ("c", 3, None)]
    assert queried[0].value["source"]["gtid"] == queried[3].value["source"]["gtid"]  # one transaction


def test_a_restart_inside_a_transaction_skips_the_same_events_with_or_without_queries(
    mariadb: MariaDbServer, mariadb_db: str
) -> None:
    """MariaDB sends annotate rows events only to a replica that asks, so they are not counted in the
    offset: an offset taken with include.query resumes right without it, and the other way round."""
    database = mariadb_db.rsplit("/", 1)[-1]
    _mysql(mariadb, database, TABLE)
    settings = {"false": {"max.batch.size": "2"}, "true": {"max.batch.size": "2", "include.query": "true"}}
    configs = {
        flag: task_config(mariadb, database, **{"topic.prefix": f"mid-{flag}", **extra})
        for flag, extra in settings.items()
    }
    first = {flag: start_task(config) for flag, config in configs.items()}
    inserts = [f"INSERT INTO items VALUES ({n}, 'n{n}')" for n in range(1, 5)]
    pair = "INSERT INTO items VALUES (5, 'n5'), (6, 'n6')"
    try:
        _mysql(mariadb, database, "BEGIN", *inserts, pair, "COMMIT")
        batches = {flag: _poll(task, 2) for flag, task in first.items()}
    finally:
        _stop(*first.values())
    offsets = {flag: dict(batch[-1].source_offset) for flag, batch in batches.items()}
    assert [_changes(batch) for batch in batches.values()] == [
        [("c", 1, None), ("c", 2, None)], [("c", 1, inserts[0]), ("c", 2, inserts[1])],
    ]  # fmt: skip
    assert offsets["true"]["event"] == offsets["false"]["event"] > 0
    rest = [(3, inserts[2]), (4, inserts[3]), (5, pair), (6, pair)]
    for taken, resumed_as in (("true", "false"), ("false", "true")):
        # The offset of a task with one setting, resumed with the other (the same topic prefix).
        task = start_task(configs[resumed_as], offsets[taken])
        try:
            resumed = _poll(task, 4)
        finally:
            _stop(task)
        expected = [("c", n, query if resumed_as == "true" else None) for n, query in rest]
        assert _changes(resumed) == expected, f"offset taken with include.query={taken}"


def test_a_server_that_logs_no_statements_gives_null_queries_and_a_warning(
    mariadb: MariaDbServer, mariadb_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    database = mariadb_db.rsplit("/", 1)[-1]
    _mysql(mariadb, database, TABLE)
    caplog.set_level(logging.WARNING, logger="sluice.connectors.source.binlog_cdc")
    _mysql(mariadb, database, "SET GLOBAL binlog_annotate_row_events = OFF")
    try:
        task = start_task(task_config(mariadb, database, **{"topic.prefix": "unlogged", "include.query": "true"}))
        try:
            _mysql(mariadb, database, "INSERT INTO items VALUES (1, 'one')")  # a new session: the global value
            events = _poll(task, 1)
        finally:
            _stop(task)
    finally:
        _mysql(mariadb, database, "SET GLOBAL binlog_annotate_row_events = ON")
    assert _changes(events) == [("c", 1, None)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if "binlog_annotate_row_events=OFF" in w]) == 1, warnings
