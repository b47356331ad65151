"""The binlog source's schema history against a real MariaDB and Kafka: a task restarted behind a
series of ALTERs decodes each row with the table's shape at the time it was written; a table
created mid-stream is captured; each DDL is a Debezium schema change event on ``<topic.prefix>``
and a record of the history topic; a lost history topic is an error naming it, and
``snapshot.mode=recovery`` rebuilds it.

The tasks run in the test process (as in ``test_binlog_cdc.py``'s restart test): the records they
return are what the runtime would produce.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from sluice.connectors.api import ConfigError
from sluice.connectors.source.binlog_cdc.connector import MariaDbCdcSourceConnector
from sluice.connectors.source.binlog_cdc.task import BinlogCdcTask
from tests.integration.binlog_helpers import StoredOffsets as _Offsets
from tests.integration.binlog_helpers import mysql as _mysql
from tests.integration.binlog_helpers import start_task as _start
from tests.integration.binlog_helpers import unique_server_id
from tests.integration.kafka_helpers import consume_all, unique_topic_name
from tests.services.mariadb import MariaDbServer

pytestmark = pytest.mark.integration


def _task_config(
    server: MariaDbServer, database: str, prefix: str, history: str, bootstrap: str, **extra: str
) -> dict[str, Any]:
    raw = {
        "database.hostname": "127.0.0.1",
        "database.port": str(server.port),
        "database.user": "root",
        "database.server.id": str(unique_server_id()),
        "topic.prefix": prefix,
        "database.include.list": database,
        "snapshot.mode": "no_data",
        "poll.interval.ms": "200",
        "schema.history.internal.kafka.topic": history,
        "schema.history.internal.kafka.bootstrap.servers": bootstrap,
        **extra,
    }
    connector = MariaDbCdcSourceConnector()
    connector.start(connector.validate(raw))
    return connector.task_configs(1)[0]


def _poll(task: BinlogCdcTask, count: int) -> list[Any]:
    records: list[Any] = []
    for _ in range(40):
        polled = task.poll()
        if polled:
            records.extend(polled)
        if len(records) >= count:
            break
    return records


def _stop(task: BinlogCdcTask) -> None:
    task.stop()
    task.poll()


def _fields(record: Any) -> list[tuple[str, str | None]]:
    """The ``after`` fields of a change event's value schema: (name, logical type name or type)."""
    after = next(f.schema for f in record.value_schema.fields if f.name == "after")
    return [(f.name, f.schema.name or f.schema.type.value) for f in after.fields]


def test_rows_behind_alters_keep_their_shapes_after_a_restart(
    kafka: Any, mariadb: MariaDbServer, mariadb_db: str
) -> None:
    database = mariadb_db.rsplit("/", 1)[-1]
    prefix, history = unique_topic_name("hist"), unique_topic_name("hist-history")
    _mysql(mariadb, database, "CREATE TABLE h (id INT PRIMARY KEY, a VARCHAR(10), b INT)")
    config = _task_config(mariadb, database, prefix, history, kafka.bootstrap_servers)
    first = _start(config, None)  # the first start records h's shape in the history
    try:
        _mysql(mariadb, database, "INSERT INTO h VALUES (1, 'x', 1)")
        before_ddl = _poll(first, 1)
        assert [r.value["after"]["id"] for r in before_ddl] == [1]
        offset = dict(before_ddl[-1].source_offset)
        _mysql(
            mariadb, database,
            "ALTER TABLE h ADD COLUMN c DATE", "INSERT INTO h VALUES (2, 'y', 2, '2024-01-02')",
            "ALTER TABLE h DROP COLUMN b", "INSERT INTO h VALUES (3, 'z', '2024-01-03')",
            "ALTER TABLE h RENAME COLUMN a TO a2", "INSERT INTO h VALUES (4, 'w', '2024-01-04')",
            "ALTER TABLE h MODIFY c DATETIME(6)", "INSERT INTO h VALUES (5, 'v', '2024-01-05 06:07:08.5')",
            "CREATE TABLE n (id INT PRIMARY KEY, note TEXT)", "INSERT INTO n VALUES (1, 'new')",
        )  # fmt: skip
        live = _poll(first, 10)  # 5 schema change events, rows 2-5 of h, the row of n
    finally:
        _stop(first)
    assert len(live) == 10

    changes = [r for r in live if r.topic == prefix]
    assert [r.value["ddl"] for r in changes] == [
        "ALTER TABLE h ADD COLUMN c DATE", "ALTER TABLE h DROP COLUMN b", "ALTER TABLE h RENAME COLUMN a TO a2",
        "ALTER TABLE h MODIFY c DATETIME(6)", "CREATE TABLE n (id INT PRIMARY KEY, note TEXT)",
    ]  # fmt: skip
    added = changes[0]
    assert added.key == {"databaseName": database}
    assert added.key_schema.name == "io.debezium.connector.mariadb.SchemaChangeKey"
    assert added.value_schema.name == "io.debezium.connector.mariadb.SchemaChangeValue"
    assert (added.value["databaseName"], added.value["schemaName"]) == (database, None)
    assert added.value["source"]["connector"] == "mariadb" and added.value["source"]["db"] == database
    (change,) = added.value["tableChanges"]
    assert (change["type"], change["id"]) == ("ALTER", f'"{database}"."h"')
    assert change["table"]["primaryKeyColumnNames"] == ["id"]
    assert [(c["name"], c["typeName"], c["position"], c["optional"]) for c in change["table"]["columns"]] == [
        ("id", "INT", 1, False), ("a", "VARCHAR", 2, True), ("b", "INT", 3, True), ("c", "DATE", 4, True),
    ]  # fmt: skip
    created = changes[-1].value["tableChanges"][0]
    assert created["type"] == "CREATE" and [c["name"] for c in created["table"]["columns"]] == ["id", "note"]

    # Restarted from the offset before the first ALTER, long after them all: each row keeps its shape.
    second = _start(config, offset)
    try:
        replayed = _poll(second, 10)
    finally:
        _stop(second)
    assert len(replayed) == 10  # the same again: the schema change events too (at least once)
    rows = {r.value["after"]["id"]: r for r in replayed if r.topic == f"{prefix}.{database}.h"}
    date, micro = "io.debezium.time.Date", "io.debezium.time.MicroTimestamp"
    assert _fields(rows[2]) == [("id", "int32"), ("a", "string"), ("b", "int32"), ("c", date)]
    assert _fields(rows[3]) == [("id", "int32"), ("a", "string"), ("c", date)]
    assert _fields(rows[4]) == [("id", "int32"), ("a2", "string"), ("c", date)]
    assert _fields(rows[5]) == [("id", "int32"), ("a2", "string"), ("c", micro)]
    assert rows[2].value["after"] == {"id": 2, "a": "y", "b": 2, "c": 19724}
    assert rows[5].value["after"]["c"] == 1704434828500000
    (new_row,) = [r for r in replayed if r.topic == f"{prefix}.{database}.n"]
    assert new_row.value["after"] == {"id": 1, "note": "new"}

    # The history: h's shape at the first start, then each DDL once (the replay wrote none again).
    # It also holds the DDL of other databases on the shared server (as Debezium's does, without
    # schema.history.internal.store.only.captured.databases.ddl); every record was written before
    # the replay's first poll returned.
    records = [
        record
        for m in consume_all(kafka.bootstrap_servers, history, 6, timeout=20, settle=1.0)
        if (record := orjson.loads(m.value or b"null"))["databaseName"] == database
    ]
    assert [r["ddl"].split("(")[0].strip() for r in records] == [
        "CREATE TABLE `h`", "ALTER TABLE h ADD COLUMN c DATE", "ALTER TABLE h DROP COLUMN b",
        "ALTER TABLE h RENAME COLUMN a TO a2", "ALTER TABLE h MODIFY c DATETIME", "CREATE TABLE n",
    ]  # fmt: skip
    assert all(r["source"] == {"server": prefix} for r in records)
    assert records[1]["position"]["file"].startswith("mariadb-bin.") and records[1]["position"]["gtids"]
    assert records[1]["tableChanges"][0]["table"]["columns"][3]["name"] == "c"


def test_a_missing_history_is_an_error_and_recovery_rebuilds_it(
    kafka: Any, mariadb: MariaDbServer, mariadb_db: str
) -> None:
    database = mariadb_db.rsplit("/", 1)[-1]
    prefix, history = unique_topic_name("lost"), unique_topic_name("lost-history")
    _mysql(mariadb, database, "CREATE TABLE r (id INT PRIMARY KEY, v VARCHAR(5))")
    config = _task_config(
        mariadb, database, prefix, history, kafka.bootstrap_servers, **{"table.include.list": rf"{database}\.r"}
    )
    with pytest.raises(ConfigError) as caught:
        BinlogCdcTask().start(config, SimpleNamespace(offset_reader=_Offsets({"file": "mariadb-bin.000001", "pos": 4})))  # type: ignore[arg-type]
    assert caught.value.key == "schema.history.internal.kafka.topic"
    assert history in str(caught.value) and "snapshot.mode=recovery" in str(caught.value)

    with pytest.raises(ConfigError, match="snapshot.mode"):
        _start({**config, "snapshot.mode": "recovery"}, None)  # recovery needs stored offsets
    recovering = _start({**config, "snapshot.mode": "schema_only_recovery"}, _current(mariadb))
    _stop(recovering)
    (record,) = [
        orjson.loads(m.value or b"null")
        for m in consume_all(kafka.bootstrap_servers, history, 1, timeout=20, settle=0.5)
    ]
    assert record["tableChanges"][0]["id"] == f'"{database}"."r"'
    assert [c["name"] for c in record["tableChanges"][0]["table"]["columns"]] == ["id", "v"]

    restarted = _start(config, _current(mariadb))  # the rebuilt history serves a normal restart
    try:
        _mysql(mariadb, database, "INSERT INTO r VALUES (1, 'a')")
        (row,) = _poll(restarted, 1)
    finally:
        _stop(restarted)
    assert row.value["after"] == {"id": 1, "v": "a"}


def _current(server: MariaDbServer) -> dict[str, Any]:
    conn = server.connect("mysql")
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            file, pos = cur.fetchone()[:2]
    finally:
        conn.close()
    return {"file": str(file), "pos": int(pos)}
