"""Connector-defined transaction boundaries (``transaction.boundary=connector``, exactly once) of the
two CDC sources, with the suite's real PostgreSQL and MariaDB.

The tasks are driven as the runtime drives them, with a transaction context that records what the
task asks. What must hold, as a ``read_committed`` consumer would see it: a commit request comes
only after a poll whose records, with everything handed out before, are whole database
transactions (never in the middle of one, however ``max.batch.size`` cuts the batches); several
small transactions read in one poll give one request; and the offset of a poll that asks for a
commit lets a restarted task carry on with the next transaction, nothing lost and nothing twice.
End to end, a distributed worker with exactly-once delivery puts each database transaction's
events next to each other in the topic, with no Kafka commit marker between them.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from sluice.connectors.api import Serialization, SourceRecord, SourceRecordBatch, SourceTask
from sluice.connectors.source.binlog_cdc.task import BinlogCdcTask
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.connector import PostgresCdcSourceConnector
from sluice.connectors.source.postgres_cdc.task import PostgresCdcTask
from sluice.converters.json import JsonConverter
from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.binlog_helpers import StoredOffsets, task_config
from tests.integration.binlog_helpers import mysql as _mysql
from tests.integration.cdc_helpers import cdc_config, dbname, read_events, run_sql, value
from tests.integration.distributed_helpers import Cluster
from tests.integration.kafka_helpers import create_topic, unique_topic_name
from tests.services.mariadb import MariaDbServer
from tests.services.postgres import PostgresServer

pytestmark = pytest.mark.integration

#: One poll as the test saw it: the ids of its records, and whether the task asked for a commit.
Poll = tuple[list[int], bool]


class RecordedRequests:
    """A :class:`~sluice.connectors.api.TransactionContext` that counts what the task asked for."""

    def __init__(self) -> None:
        self.commits = 0
        self.aborts = 0
        self.serialized = 0  # polls that returned natively serialized batches (for the test's own check)

    def commit_transaction(self, record: SourceRecord | None = None) -> None:
        assert record is None, "the CDC tasks ask at the end of a poll"
        self.commits += 1

    def abort_transaction(self, record: SourceRecord | None = None) -> None:
        self.aborts += 1


def _start(
    task: SourceTask, config: dict[str, Any], stored: dict[str, Any] | None, serialization: Serialization | None = None
) -> RecordedRequests:
    requests = RecordedRequests()
    context = SimpleNamespace(
        offset_reader=StoredOffsets(stored), serialization=serialization, transaction_context=requests
    )
    task.start(config, context)  # type: ignore[arg-type]
    return requests


def _poll(
    task: SourceTask, requests: RecordedRequests, total: int, row_id: Callable[[Any], int]
) -> tuple[list[Poll], list[Any]]:
    """Poll until ``total`` change events came and a poll after them was idle; each poll's ids and
    request, and the records of the polls."""
    polls: list[Poll] = []
    records: list[Any] = []
    idle_after = 0
    for _ in range(80):
        before = requests.commits
        batch = task.poll()
        requests.serialized += isinstance(batch, SourceRecordBatch) and batch.serialized
        polled = list(batch or [])
        asked = requests.commits - before
        assert asked <= 1, "one request per poll at most"
        polls.append(([row_id(r) for r in polled], bool(asked)))
        records.extend(polled)
        if len(records) >= total:
            idle_after += not polled
            if idle_after >= 2:
                break
    assert requests.aborts == 0
    return polls, records


def _check_whole_transactions(polls: list[Poll], transactions: Sequence[Sequence[int]]) -> None:
    """Every request comes where the records handed out so far are whole transactions, and the last
    transaction is committed by the end."""
    assert [i for ids, _ in polls for i in ids] == [i for t in transactions for i in t]
    ends = {0, *itertools.accumulate(len(t) for t in transactions)}
    seen = 0
    committed = -1
    for ids, asked in polls:
        seen += len(ids)
        if asked:
            assert seen in ends, f"a commit request after {seen} records splits a transaction: {polls}"
            committed = seen
    assert committed == seen, f"the last transaction was never committed: {polls}"


def _asking_polls(polls: list[Poll]) -> list[list[int]]:
    return [ids for ids, asked in polls if asked and ids]


# -- PostgreSQL ------------------------------------------------------------------------------------


def _pg_config(pg_server: PostgresServer, url: str, **extra: str) -> dict[str, Any]:
    raw = cdc_config(pg_server.port, dbname(url), f"txb{uuid.uuid4().hex[:6]}", **extra)
    raw.update({"snapshot.mode": "no_data", "table.include.list": r"public\.rows_"})
    connector = PostgresCdcSourceConnector()
    connector.start(PostgresCdcConfig.parse({k: v for k, v in raw.items() if not k.endswith(("converter", "class"))}))
    return connector.task_configs(1)[0]


def _pg_id(record: Any) -> int:
    change = orjson.loads(record.value) if isinstance(record.value, bytes) else record.value  # serialized natively
    return int(change["after"]["id"])


def _json_serialization() -> Serialization:
    """What the runtime offers a source task whose converters write JSON without schemas: the
    PostgreSQL task then serializes row changes natively (serialized batches)."""
    keys, values = JsonConverter(), JsonConverter()
    keys.configure({"schemas.enable": False}, True)
    values.configure({"schemas.enable": False}, False)
    return Serialization(keys.wire_format(), values.wire_format())


def _wait_until_sent(url: str) -> None:
    """Until the walsender sent everything written so far to the slot's reader."""
    (written,) = run_sql(url, "SELECT pg_current_wal_lsn()")[0]
    for _ in range(200):
        sent = run_sql(url, "SELECT min(sent_lsn) FROM pg_stat_replication")[0][0]
        if sent is not None and run_sql(url, f"SELECT '{sent}'::pg_lsn >= '{written}'::pg_lsn")[0][0]:
            return
        time.sleep(0.05)
    raise AssertionError("the walsender did not send the changes")


def _stop(task: SourceTask) -> None:
    task.stop()
    task.poll()


@pytest.mark.parametrize("native", [False, True], ids=["records", "serialized"])
def test_postgres_commits_only_between_database_transactions(
    pg_server: PostgresServer, postgres_db: str, native: bool
) -> None:
    """A transaction longer than ``max.batch.size`` spans polls with no request until it ends; a
    poll that reads into the next transaction ends at the last commit; a restart from the offset
    of a poll that asked for a commit goes on with the next transaction. Both lanes: records built
    in Python, and changes serialized natively."""
    serialization = _json_serialization() if native else None
    run_sql(postgres_db, "CREATE TABLE rows_ (id int PRIMARY KEY, v int)")
    config = _pg_config(pg_server, postgres_db, **{"max.batch.size": "4"})
    task = PostgresCdcTask()
    requests = _start(task, config, None, serialization)
    first, second = [1, 2, 3], [10, 11, 12, 13, 14, 15]
    try:
        run_sql(postgres_db, *(f"INSERT INTO rows_ VALUES ({i}, 0)" for i in first))
        run_sql(postgres_db, *(f"INSERT INTO rows_ VALUES ({i}, 0)" for i in second))
        polls, records = _poll(task, requests, len(first) + len(second), _pg_id)
    finally:
        _stop(task)
    _check_whole_transactions(polls, [first, second])
    assert bool(requests.serialized) == native
    assert sum(1 for ids, _ in polls if set(ids) & set(second)) >= 2, polls  # the long one spans polls
    # The poll that read 3 + 1 events handed out the first transaction alone, asking for a commit.
    assert _asking_polls(polls)[0] == first
    committed = next(r for r in records if _pg_id(r) == first[-1]).source_offset

    again = PostgresCdcTask()
    requests = _start(again, config, dict(committed), serialization)
    try:
        polls, _ = _poll(again, requests, len(second), _pg_id)
    finally:
        _stop(again)
    _check_whole_transactions(polls, [second])


def test_postgres_small_transactions_in_one_poll_make_one_request(pg_server: PostgresServer, postgres_db: str) -> None:
    run_sql(postgres_db, "CREATE TABLE rows_ (id int PRIMARY KEY, v int)")
    task = PostgresCdcTask()
    requests = _start(task, _pg_config(pg_server, postgres_db), None)
    try:
        task.poll()  # the replication stream opens
        for i in (1, 2, 3, 4):
            run_sql(postgres_db, f"INSERT INTO rows_ VALUES ({i}, 0)")
        _wait_until_sent(postgres_db)  # so that one poll can read the four
        polls, _ = _poll(task, requests, 4, _pg_id)
    finally:
        _stop(task)
    _check_whole_transactions(polls, [[1], [2], [3], [4]])
    assert _asking_polls(polls) == [[1, 2, 3, 4]]


# -- MariaDB (binlog) ------------------------------------------------------------------------------


def _binlog_id(record: Any) -> int:
    return int(record.value["after"]["id"])


def test_binlog_commits_only_between_database_transactions(mariadb: MariaDbServer, mariadb_db: str) -> None:
    """As for PostgreSQL, with a multi-row statement inside the long transaction; the offset of a
    poll that asked for a commit points between transactions (no ``event`` to skip)."""
    database = mariadb_db.rsplit("/", 1)[-1]
    _mysql(mariadb, database, "CREATE TABLE rows_ (id INT PRIMARY KEY, v INT)")
    config = task_config(mariadb, database, **{"max.batch.size": "4"})
    task = BinlogCdcTask()
    requests = _start(task, config, None)
    first, second = [1, 2, 3], list(range(10, 23))
    try:
        _mysql(mariadb, database, *(f"INSERT INTO rows_ VALUES ({i}, 0)" for i in first))
        _mysql(
            mariadb, database,
            "BEGIN", *(f"INSERT INTO rows_ VALUES ({i}, 0)" for i in second[:10]),
            "INSERT INTO rows_ VALUES (20, 0), (21, 0), (22, 0)", "COMMIT",
        )  # fmt: skip
        polls, records = _poll(task, requests, len(first) + len(second), _binlog_id)
    finally:
        _stop(task)
    _check_whole_transactions(polls, [first, second])
    assert sum(1 for ids, _ in polls if set(ids) & set(second)) >= 2, polls
    assert _asking_polls(polls)[0] == first
    committed = dict(next(r for r in records if _binlog_id(r) == first[-1]).source_offset)
    assert "event" not in committed, committed  # between transactions: nothing to skip on a restart

    again = BinlogCdcTask()
    requests = _start(again, config, committed)
    try:
        polls, _ = _poll(again, requests, len(second), _binlog_id)
    finally:
        _stop(again)
    _check_whole_transactions(polls, [second])


def test_binlog_small_transactions_in_one_poll_make_one_request(mariadb: MariaDbServer, mariadb_db: str) -> None:
    database = mariadb_db.rsplit("/", 1)[-1]
    _mysql(mariadb, database, "CREATE TABLE rows_ (id INT PRIMARY KEY, v INT)")
    task = BinlogCdcTask()
    requests = _start(task, task_config(mariadb, database), None)
    try:
        for i in (1, 2, 3, 4):
            _mysql(mariadb, database, f"INSERT INTO rows_ VALUES ({i}, 0)")
        polls, _ = _poll(task, requests, 4, _binlog_id)
    finally:
        _stop(task)
    _check_whole_transactions(polls, [[1], [2], [3], [4]])
    assert _asking_polls(polls) == [[1, 2, 3, 4]]


# -- end to end: a distributed worker with exactly-once delivery ------------------------------------


def _inner_gaps(records: list[Any]) -> list[int]:
    """The database transactions whose records are not adjacent in the (one-partition) topic. A
    Kafka transaction's commit marker takes an offset, so a transaction split over two Kafka
    transactions has a gap between two of its records."""
    split = set()
    for before, after in itertools.pairwise(records):
        txn = value(before)["after"]["txn"]
        if value(after)["after"]["txn"] == txn and after.offset != before.offset + 1:
            split.add(txn)
    return sorted(split)


def test_a_worker_commits_whole_database_transactions(
    kafka: KafkaBroker, pg_server: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    """``transaction.boundary=connector``: every database transaction's events are adjacent in the
    topic, read_committed, however ``max.batch.size`` cut them; beside it ``transaction.boundary=interval``
    with a zero interval (a commit after every poll) splits the longer ones (the check can fail)."""
    bootstrap = kafka.bootstrap_servers
    run_sql(postgres_db, "CREATE TABLE txns (id serial PRIMARY KEY, txn int NOT NULL)")
    cluster = Cluster(tmp_path, bootstrap, 1, **{"exactly.once.source.support": "enabled"}).start()
    prefixes = {"connector": unique_topic_name("txb-conn"), "interval": unique_topic_name("txb-every")}
    sizes = [1, 7, 3, 12, 2, 1, 9, 16, 1, 1, 5]
    try:
        for boundary, prefix in prefixes.items():
            create_topic(bootstrap, f"{prefix}.public.txns", partitions=1)
            config = cdc_config(pg_server.port, dbname(postgres_db), prefix, **{"table.include.list": r"public\.txns"})
            config.update({"transaction.boundary": boundary, "max.batch.size": "5", "tasks.max": "1"})
            if boundary == "interval":
                config["transaction.boundary.interval.ms"] = "0"
            cluster.put_config(cluster.workers[0], boundary, config)
        for boundary in prefixes:
            cluster.wait_running(boundary, 1)
        time.sleep(2)  # the slots exist: the transactions below are streamed, not snapshotted
        for txn, size in enumerate(sizes):
            run_sql(postgres_db, *[f"INSERT INTO txns (txn) VALUES ({txn})"] * size)
        topics = {b: read_events(bootstrap, f"{p}.public.txns", sum(sizes), timeout=90) for b, p in prefixes.items()}
    finally:
        cluster.stop()
    for records in topics.values():
        assert sorted(value(r)["after"]["id"] for r in records) == list(range(1, sum(sizes) + 1))
    assert _inner_gaps(topics["connector"]) == []
    assert _inner_gaps(topics["interval"]), "a commit after every poll should split a long transaction"
