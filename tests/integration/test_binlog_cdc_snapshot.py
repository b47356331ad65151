"""MariaDB → the binlog CDC source's snapshots: chunked, beside streaming, resumable, by signal.

What a Debezium user checks: every row of the captured tables arrives as an ``r`` event (with
``source.snapshot`` marking the first and last), changes committed while the snapshot runs leave
the topic's last event per key equal to the table, a task started from a stored offset continues
the snapshot after its last delivered chunk, an ``execute-snapshot`` row in the signal table
starts an incremental snapshot, ``initial_only`` and ``when_needed`` do what they say, and a row's
``r`` event carries exactly the values a ``c`` event of the same row does, for every type.

The tests drive the task as the runtime does (start, poll, stop) on the session's MariaDB server;
rows are few and chunks small, so each test crosses several chunk boundaries in well under a
second of polling.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pymysql
import pytest

from sluice.connectors.api import ConfigError, SourceRecord, SourceRecordBatch
from sluice.connectors.source.binlog_cdc.connector import MariaDbCdcSourceConnector
from sluice.connectors.source.binlog_cdc.task import BinlogCdcTask
from tests.integration.binlog_helpers import connector_config, unique_server_id
from tests.integration.binlog_helpers import mysql as _mysql
from tests.integration.binlog_helpers import start_task as _start
from tests.integration.cdc_helpers import key, read_events, read_until, value, worker, write_connector
from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.test_binlog_cdc import ROW_1, TYPES_TABLE
from tests.services.mariadb import MariaDbServer

pytestmark = pytest.mark.integration


def _task_config(server: MariaDbServer, database: str, **extra: str) -> dict[str, Any]:
    connector = MariaDbCdcSourceConnector()
    raw = {
        "database.hostname": "127.0.0.1",
        "database.port": str(server.port),
        "database.user": "root",
        "database.server.id": str(unique_server_id()),
        "topic.prefix": f"snap{uuid.uuid4().hex[:6]}",
        "database.include.list": database,
        "poll.interval.ms": "100",
        "schema.history.internal": "io.debezium.relational.history.MemorySchemaHistory",
        **extra,
    }
    connector.start(connector.validate(raw))
    return connector.task_configs(1)[0]


def _records(polled: Any) -> list[SourceRecord]:
    if not polled:
        return []
    return polled.records() if isinstance(polled, SourceRecordBatch) else list(polled)


def _poll(task: BinlogCdcTask, done: Any, *, timeout: float = 20.0) -> list[SourceRecord]:
    """Poll until ``done(records so far)``."""
    records: list[SourceRecord] = []
    deadline = time.monotonic() + timeout
    while not done(records):
        assert time.monotonic() < deadline, f"not done after {timeout}s: {len(records)} records"
        records.extend(_records(task.poll()))
    return records


def _stop(task: BinlogCdcTask) -> None:
    task.stop()
    task.poll()


def _offset(record: SourceRecord) -> dict[str, Any]:
    return dict(record.source_offset or {})


def _reads(records: list[SourceRecord], table: str) -> list[dict[str, Any]]:
    return [
        r.value
        for r in records
        if r.value is not None and r.value.get("op") == "r" and r.value["source"]["table"] == table
    ]


def _snapshot_done(records: list[SourceRecord]) -> bool:
    return any(r.value is not None and r.value.get("source", {}).get("snapshot") == "last" for r in records)


def _final_state(records: list[SourceRecord], table: str) -> dict[tuple[Any, ...], dict[str, Any] | None]:
    """The last event per key of ``table``'s topic, as a compacted topic keeps it."""
    state: dict[tuple[Any, ...], dict[str, Any] | None] = {}
    for r in records:
        if r.topic.endswith(f".{table}") and r.key is not None:
            state[tuple(r.key.values())] = None if r.value is None else r.value["after"]
    return {k: v for k, v in state.items() if v is not None}


class _Writer(threading.Thread):
    """Inserts, updates and deletes rows of ``pairs`` on its own connection while the snapshot runs."""

    def __init__(self, server: MariaDbServer, database: str) -> None:
        super().__init__(daemon=True)
        self.server, self.database = server, database
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            conn = self.server.connect(self.database)
            with conn.cursor() as cur:
                for n in range(30):
                    cur.execute(f"UPDATE pairs SET v = v + 1000 WHERE a = {n * 3 % 40}")
                    cur.execute(f"INSERT INTO pairs VALUES ({100 + n}, 'new', {n})")
                    cur.execute(f"DELETE FROM pairs WHERE a = {(n * 7 + 1) % 40} AND b = 'y'")
                    time.sleep(0.01)
                cur.execute("INSERT INTO pairs VALUES (999, 'end', 0)")
            conn.close()
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.error = exc


@pytest.mark.parametrize("watermarks", ["exact", "around"])
def test_initial_snapshot_in_chunks_beside_concurrent_changes(
    mariadb: MariaDbServer, mariadb_db: str, watermarks: str
) -> None:
    """``exact``: MariaDB's consistent-snapshot position; ``around``: the watermarks MySQL gets
    (``SHOW MASTER STATUS`` before and after each chunk, rows the stream changes in between
    dropped), forced here on MariaDB to run that path against a real server."""
    database = mariadb_db.rsplit("/", 1)[-1]
    values = ", ".join(f"({a}, '{b}', {a})" for a in range(40) for b in ("x", "y"))
    _mysql(
        mariadb, database,
        "CREATE TABLE pairs (a INT, b VARCHAR(5), v INT, PRIMARY KEY (a, b))",
        f"INSERT INTO pairs VALUES {values}",
        "CREATE TABLE loose (n INT, note VARCHAR(10))",
        "INSERT INTO loose VALUES " + ", ".join(f"({n}, 'n{n}')" for n in range(15)),
    )  # fmt: skip
    task = _start(_task_config(mariadb, database, **{"snapshot.fetch.size": "7"}))
    if watermarks == "around":
        task._snapshots.reader._exact = False  # type: ignore[union-attr]  # as on MySQL
    writer = _Writer(mariadb, database)
    try:
        writer.start()
        records = _poll(task, lambda rs: _snapshot_done(rs) and any(r.key == {"a": 999, "b": "end"} for r in rs))
        writer.join()
        assert writer.error is None
        metrics = {m for g in task.metrics() for m in g.values.items()}
    finally:
        _stop(task)
    rows = _mysql(mariadb, database, "SELECT a, b, v FROM pairs")
    assert _final_state(records, "pairs") == {(a, b): {"a": a, "b": b, "v": v} for a, b, v in rows}
    reads = _reads(records, "pairs")
    assert len(reads) >= 40  # every row the snapshot did not see changed
    assert {(r["source"]["file"], r["source"]["pos"]) for r in reads} == {
        (reads[0]["source"]["file"], reads[0]["source"]["pos"])
    }  # the initial snapshot's point
    # Tables in name order: loose (one read: no key), then pairs.
    assert reads[0]["source"]["snapshot"] == "first_in_data_collection" and reads[-1]["source"]["snapshot"] == "last"
    assert reads[0]["source"]["server_id"] == 0 and reads[0]["source"]["gtid"] is None
    loose = _reads(records, "loose")
    assert sorted((r["after"]["n"], r["after"]["note"]) for r in loose) == [(n, f"n{n}") for n in range(15)]
    assert loose[0]["source"]["snapshot"] == "first" and loose[-1]["source"]["snapshot"] == "last_in_data_collection"
    assert all(r.key is None for r in records if r.topic.endswith(".loose"))
    # Several chunks, each one's progress in the offsets.
    progress = {tuple(_offset(r).get("snapshot_key") or ()) for r in records}
    assert len(progress) >= 6
    assert (
        ("SnapshotRunning", 0) in metrics
        and ("RemainingTableCount", 0) in metrics
        and ("TotalTableCount", 2) in metrics
    )
    assert ("RowsScanned", len(reads)) in metrics


def test_a_task_started_from_a_stored_offset_continues_after_the_last_delivered_chunk(
    mariadb: MariaDbServer, mariadb_db: str
) -> None:
    database = mariadb_db.rsplit("/", 1)[-1]
    _mysql(
        mariadb, database,
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO t VALUES " + ", ".join(f"({n}, 'v{n}')" for n in range(1, 51)),
    )  # fmt: skip
    config = _task_config(mariadb, database, **{"snapshot.fetch.size": "5"})
    first = _start(config)
    try:
        handed_out = _poll(first, lambda rs: len(_reads(rs, "t")) >= 20)
    finally:
        _stop(first)
    # The runtime stored the offset of the second chunk only (later polls not yet acknowledged).
    stored_at = max(i for i, r in enumerate(handed_out) if (_offset(r).get("snapshot_key") or [None])[0] == "10")
    stored = _offset(handed_out[stored_at])
    assert stored["snapshot"] is True and stored["snapshot_tables"] == [[f"{database}.t", "initial"]]
    _mysql(mariadb, database, "UPDATE t SET v = 'late' WHERE id = 3", "INSERT INTO t VALUES (51, 'new')")
    second = _start(config, stored)
    try:
        resumed = _poll(second, lambda rs: _snapshot_done(rs) and any(r.key == {"id": 51} for r in rs))
    finally:
        _stop(second)
    again = [r["after"]["id"] for r in _reads(resumed, "t")]
    assert again[0] == 11 and again == sorted(again)  # after the stored key, not from the start
    delivered = [r["after"]["id"] for r in _reads(handed_out[: stored_at + 1], "t")]
    assert sorted(set(delivered) | set(again)) == list(range(1, 52))
    state = _final_state(handed_out[: stored_at + 1] + resumed, "t")
    assert state[(3,)] == {"id": 3, "v": "late"} and state[(51,)] == {"id": 51, "v": "new"}


def test_an_execute_snapshot_signal_runs_an_incremental_snapshot(mariadb: MariaDbServer, mariadb_db: str) -> None:
    database = mariadb_db.rsplit("/", 1)[-1]
    _mysql(
        mariadb, database,
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO t VALUES " + ", ".join(f"({n}, 'v{n}')" for n in range(1, 26)),
        "CREATE TABLE dbz_signal (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048))",
    )  # fmt: skip
    config = _task_config(
        mariadb, database,
        **{
            "snapshot.mode": "no_data",
            "table.include.list": rf"{database}\.t",
            "signal.data.collection": f"{database}.dbz_signal",
            "incremental.snapshot.chunk.size": "10",
            "notification.enabled.channels": "sink",
            "notification.sink.topic.name": "notes",
        },
    )  # fmt: skip
    task = _start(config)
    try:
        _mysql(mariadb, database, "INSERT INTO t VALUES (26, 'streamed')")
        streamed = _poll(task, lambda rs: len(rs) >= 1)
        assert [r.value["op"] for r in streamed] == ["c"]
        signal = '{"data-collections": ["' + database + '[.]t"], "type": "incremental"}'
        _mysql(mariadb, database, f"INSERT INTO dbz_signal VALUES ('s1', 'execute-snapshot', '{signal}')")
        records = _poll(task, lambda rs: len(_reads(rs, "t")) >= 26 and any(
            r.topic == "notes" and r.value["type"] == "COMPLETED" for r in rs))  # fmt: skip
        signal = '{"data-collections": ["' + database + '[.]t"], "type": "blocking"}'
        _mysql(mariadb, database, f"INSERT INTO dbz_signal VALUES ('s2', 'execute-snapshot', '{signal}')")
        blocking = _poll(task, _snapshot_done)
    finally:
        _stop(task)
    reads = _reads(records, "t")
    assert sorted(r["after"]["id"] for r in reads) == list(range(1, 27))
    assert {r["source"]["snapshot"] for r in reads} == {"incremental"}
    again = _reads(blocking, "t")
    assert [r["after"]["id"] for r in again] == list(range(1, 27))  # streaming paused while they were read
    assert [again[0]["source"]["snapshot"], again[1]["source"]["snapshot"], again[-1]["source"]["snapshot"]] == [
        "first", "true", "last",
    ]  # fmt: skip
    notes = [r.value["type"] for r in records if r.topic == "notes"]
    assert (
        notes[0] == "STARTED"
        and notes.count("IN_PROGRESS") == 3
        and notes[-2:] == ["TABLE_SCAN_COMPLETED", "COMPLETED"]
    )
    assert not any(r.topic.endswith(".dbz_signal") for r in records)  # not captured: signals only


def test_initial_only_stops_after_the_snapshot_and_when_needed_snapshots_when_the_binlog_is_gone(
    mariadb: MariaDbServer, mariadb_db: str
) -> None:
    database = mariadb_db.rsplit("/", 1)[-1]
    _mysql(
        mariadb, database,
        "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1), (2), (3)",
        "CREATE TABLE other (id INT PRIMARY KEY)", "INSERT INTO other VALUES (1)",
    )  # fmt: skip
    only = _start(
        _task_config(
            mariadb, database, **{"snapshot.mode": "initial_only", "snapshot.include.collection.list": r".*\.t"}
        )
    )
    try:
        records = _poll(only, _snapshot_done)
        _mysql(mariadb, database, "INSERT INTO t VALUES (4)")
        for _ in range(5):
            records += _records(only.poll())
    finally:
        _stop(only)
    assert [r.value["op"] for r in records] == ["r", "r", "r"]

    config = _task_config(
        mariadb, database, **{"snapshot.mode": "when_needed", "table.include.list": rf"{database}\.t"}
    )
    gone = {"file": "mariadb-bin.999999", "pos": 4}  # a binlog file the server no longer has
    task = _start(config, gone)
    try:
        records = _poll(task, _snapshot_done)
    finally:
        _stop(task)
    assert sorted(r["after"]["id"] for r in _reads(records, "t")) == [1, 2, 3, 4]
    kept = _offset(records[-1])
    task = _start(config, kept)  # its binlog is there: streaming resumes, no snapshot
    try:
        _mysql(mariadb, database, "INSERT INTO t VALUES (5)")
        records = _poll(task, lambda rs: len(rs) >= 1)
    finally:
        _stop(task)
    assert [(r.value["op"], r.key) for r in records] == [("c", {"id": 5})]


def test_a_select_statement_override_reads_a_table_in_its_place(mariadb: MariaDbServer, mariadb_db: str) -> None:
    database = mariadb_db.rsplit("/", 1)[-1]
    _mysql(
        mariadb,
        database,
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(5))",
        "INSERT INTO t VALUES (1, 'a'), (2, 'b'), (3, 'c')",
    )
    overrides = {
        "snapshot.select.statement.overrides": f"{database}.t",
        f"snapshot.select.statement.overrides.{database}.t": f"SELECT id, v FROM `{database}`.t WHERE id > 1",
        "snapshot.fetch.size": "1",  # the statement is read whole, not in chunks
    }
    task = _start(_task_config(mariadb, database, **overrides))
    try:
        records = _poll(task, _snapshot_done)
    finally:
        _stop(task)
    assert [(r["after"]["id"], r["after"]["v"]) for r in _reads(records, "t")] == [(2, "b"), (3, "c")]


def test_a_rows_snapshot_event_has_the_values_of_its_change_event_for_every_type(
    mariadb: MariaDbServer, mariadb_db: str
) -> None:
    database = mariadb_db.rsplit("/", 1)[-1]
    _mysql(
        mariadb, database,
        TYPES_TABLE, ROW_1, "INSERT INTO types (id) VALUES (2)",
        "INSERT INTO types (id, st, bt, b12, dtm6, tm) VALUES (3, '', b'0', b'0', '2024-01-01 00:00:00.000001', '00:00:00')",
        "CREATE TABLE copies LIKE types",
    )  # fmt: skip
    task = _start(_task_config(mariadb, database))
    try:
        reads = _poll(task, _snapshot_done)
        _mysql(mariadb, database, "INSERT INTO copies SELECT * FROM types")
        creates = _poll(task, lambda rs: len(rs) >= 3)
    finally:
        _stop(task)
    snapshot = {r.value["after"]["id"]: r.value["after"] for r in reads}
    created = {r.value["after"]["id"]: r.value["after"] for r in creates if r.value["op"] == "c"}
    assert set(snapshot) == set(created) == {1, 2, 3}
    for row_id, after in snapshot.items():
        for column, streamed in created[row_id].items():
            assert (column, after[column]) == (column, streamed)
            assert type(after[column]) is type(streamed), column
    assert _after_fields(reads[0]) == _after_fields(creates[0])


def _after_fields(record: SourceRecord) -> list[str]:
    assert record.value_schema is not None
    after = record.value_schema.field("after")
    assert after is not None
    return [f.name for f in after.schema.fields]


def test_locking_modes_lock_what_they_say(mariadb: MariaDbServer, mariadb_db: str) -> None:
    """``minimal`` needs LOCK TABLES (the error names the key), ``none`` does not; ``extended``
    holds writes back until the initial snapshot is read."""
    database = mariadb_db.rsplit("/", 1)[-1]
    user = f"cdc_{uuid.uuid4().hex[:8]}"
    _mysql(
        mariadb, database,
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t SELECT seq, 0 FROM seq_1_to_30",
        f"CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'",
        f"GRANT REPLICATION SLAVE, BINLOG MONITOR ON *.* TO '{user}'@'%'",
        f"GRANT SELECT ON `{database}`.* TO '{user}'@'%'",
    )  # fmt: skip
    try:
        reader = {"database.user": user, "database.password": "pw"}
        with pytest.raises(ConfigError) as caught:
            _start(_task_config(mariadb, database, **reader))
        assert caught.value.key == "snapshot.locking.mode" and "LOCK TABLES" in str(caught.value)
        task = _start(_task_config(mariadb, database, **reader, **{"snapshot.locking.mode": "none"}))
        try:
            assert len(_reads(_poll(task, _snapshot_done), "t")) == 30
        finally:
            _stop(task)
    finally:
        _mysql(mariadb, database, f"DROP USER '{user}'@'%'")

    task = _start(_task_config(mariadb, database, **{"snapshot.locking.mode": "extended", "snapshot.fetch.size": "10"}))
    try:
        records = _poll(task, lambda rs: len(rs) >= 10)  # the first chunk
        writer = mariadb.connect(database)
        try:
            with writer.cursor() as cur:
                cur.execute("SET SESSION lock_wait_timeout = 1")
                with pytest.raises(pymysql.err.OperationalError) as refused:
                    cur.execute("UPDATE t SET v = 1 WHERE id = 30")
                assert refused.value.args[0] == 1205  # lock wait timeout: the table is read-locked
                records += _poll(task, _snapshot_done)
                cur.execute("UPDATE t SET v = 1 WHERE id = 30")  # the snapshot is read: unlocked
        finally:
            writer.close()
        records += _poll(task, lambda rs: any(r.value["op"] == "u" for r in rs))
    finally:
        _stop(task)
    assert [r.value["op"] for r in records] == ["r"] * 30 + ["u"]


def _stored_snapshot_key(path: Path) -> int | None:
    """The snapshot key of the offset the worker stored last (one-column key), if any."""
    try:
        lines = path.read_bytes().splitlines()[1:]
    except FileNotFoundError:
        return None
    for line in lines:
        key = orjson.loads(line)["value"].get("snapshot_key") if line.strip() else None
        if key:
            return int(key[0])
    return None


def test_a_worker_killed_mid_snapshot_resumes_after_its_stored_chunk(
    kafka: Any, mariadb: MariaDbServer, mariadb_db: str, tmp_path: Path
) -> None:
    """SIGKILL, then a new worker: the snapshot goes on after the last chunk whose offset was
    stored, every row arrives, and rows before the stored key are not read again."""
    bootstrap = kafka.bootstrap_servers
    database = mariadb_db.rsplit("/", 1)[-1]
    rows = 20_000
    _mysql(
        mariadb, database,
        "CREATE TABLE big (id INT PRIMARY KEY, name VARCHAR(20))",
        "INSERT INTO big SELECT seq, CONCAT('name-', seq) FROM seq_1_to_20000",
    )  # fmt: skip
    prefix = unique_topic_name("binsnap")
    config = connector_config(
        mariadb,
        prefix,
        **{
            "database.include.list": database,
            "snapshot.fetch.size": "200",
            "poll.interval.ms": "200",
            "schema.history.internal": "io.debezium.relational.history.MemorySchemaHistory",
            "value.converter.schemas.enable": "false",
        },
    )
    connector = write_connector(tmp_path / "binlog.json", "binlog", config)
    topic = f"{prefix}.{database}.big"
    w = worker(tmp_path, bootstrap, **{"offset.flush.interval.ms": "100"}).start(connector)
    try:
        w.wait_running("binlog")
        deadline = time.monotonic() + 60
        while _stored_snapshot_key(w.offsets_path) is None:
            assert time.monotonic() < deadline, f"no snapshot progress stored after 60 s:\n{w.log()}"
            time.sleep(0.02)
        w.kill()
        stored = _stored_snapshot_key(w.offsets_path)
        assert stored is not None and stored < rows, "the snapshot finished before the kill; make the table bigger"
        delivered_before_kill = len(read_events(bootstrap, topic, stored, settle=1))
        w = worker(tmp_path, bootstrap).start(connector)
        w.wait_running("binlog")
        _mysql(mariadb, database, "UPDATE big SET name = 'changed' WHERE id = 1")
        events = read_until(
            bootstrap, topic,
            lambda rs: {"u", "last"} <= {value(r)["op"] for r in rs} | {value(r)["source"]["snapshot"] for r in rs},
            what="the update and the snapshot's last row",
        )  # fmt: skip
    finally:
        w.stop()
    ids = {value(r)["after"]["id"] for r in events if value(r)["op"] == "r"}
    assert ids == set(range(1, rows + 1))
    again = [value(r)["after"]["id"] for r in events[delivered_before_kill:] if value(r)["op"] == "r"]
    assert again == list(range(stored + 1, rows + 1))
    # The update streams as soon as it is committed, among the chunks after it: the last event of
    # row 1 (read before the kill) is the update.
    last_of_1 = [value(r) for r in events if key(r) == {"id": 1}][-1]
    assert (last_of_1["op"], last_of_1["after"]["name"]) == ("u", "changed")
