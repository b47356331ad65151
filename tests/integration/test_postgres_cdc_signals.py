"""Signals over Kafka, snapshot notifications, blocking snapshots, pause/resume (Debezium's keys).

A signal is a record on ``<topic.prefix>-signal`` keyed by the connector's ``topic.prefix``; the
notifications arrive on ``notification.sink.topic.name`` with Debezium's schemas.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest
from psycopg import sql

from tests.integration.cdc_helpers import (
    BackgroundWriter,
    cdc_config,
    dbname,
    key,
    libpq,
    read_events,
    read_until,
    run_sql,
    value,
    worker,
    write_connector,
)
from tests.integration.kafka_helpers import (
    ConsumedRecord,
    OutgoingRecord,
    consume_all,
    create_topic,
    produce,
    unique_topic_name,
)
from tests.services.postgres import PostgresServer


def signal(bootstrap: str, prefix: str, kind: str, data: dict[str, Any], *, key_: str | None = None) -> None:
    """A Debezium Kafka signal: key = the connector's topic.prefix, value {"type", "data"}."""
    body = orjson.dumps({"type": kind, "data": data})
    produce(bootstrap, f"{prefix}-signal", [OutgoingRecord(body, key_ if key_ is not None else prefix)])


def wait_records(
    bootstrap: str, topic: str, done: Callable[[list[ConsumedRecord]], bool], what: str, timeout: float = 120
) -> list[ConsumedRecord]:
    """Every record of ``topic`` once ``done`` holds for them."""
    deadline = time.monotonic() + timeout
    records: list[ConsumedRecord] = []
    while time.monotonic() < deadline:
        try:
            records = consume_all(bootstrap, topic, 1, timeout=5, settle=0.5)
        except TimeoutError:
            records = []
        if done(records):
            return records
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last records: {[value(r) for r in records][-10:]}")


def notification_types(records: list[ConsumedRecord]) -> list[str]:
    return [value(r)["type"] for r in records]


class Upserts(BackgroundWriter):
    """Upserts and deletes random keys of ``t`` one statement at a time, noting each change."""

    def __init__(self, url: str, keys: int) -> None:
        super().__init__(url, name="signal-writer", seed=29, pause_s=0.005)
        self.keys = keys
        self.changes: dict[int, list[int | None]] = defaultdict(list)
        self.counter = 0

    def step(self, conn: psycopg.Connection[Any], rnd: random.Random) -> None:
        row_id = rnd.randint(1, self.keys)
        if rnd.random() < 0.2:
            if conn.execute("DELETE FROM t WHERE id = %s", (row_id,)).rowcount == 1:
                self.changes[row_id].append(None)
            return
        self.counter += 1
        conn.execute(
            "INSERT INTO t VALUES (%s, %s) ON CONFLICT (id) DO UPDATE SET v = excluded.v", (row_id, self.counter)
        )
        self.changes[row_id].append(self.counter)


def config_with_channels(port: int | None, db: str, prefix: str, bootstrap: str, **extra: str) -> dict[str, str]:
    return cdc_config(
        port, db, prefix,
        **{
            "table.include.list": r"public\.t",
            "snapshot.mode": "no_data",
            "signal.enabled.channels": "source,kafka",
            "signal.kafka.bootstrap.servers": bootstrap,
            "signal.kafka.groupId": f"{prefix}-signals",
            "notification.enabled.channels": "sink,log",
            "notification.sink.topic.name": f"{prefix}.notifications",
            **extra,
        },
    )  # fmt: skip


def test_kafka_signal_runs_an_incremental_snapshot_while_streaming(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdcksig")
    rows = 2000
    run_sql(
        postgres_db,
        "CREATE TABLE t (id int PRIMARY KEY, v int)",
        f"INSERT INTO t SELECT g, -g FROM generate_series(1, {rows}) g",
    )
    create_topic(bootstrap, f"{prefix}-signal")
    # A signal for another connector (another key) is ignored.
    signal(bootstrap, prefix, "execute-snapshot", {"data-collections": ["public.t"]}, key_="someone-else")
    config = config_with_channels(
        postgres.port, dbname(postgres_db), prefix, bootstrap, **{"incremental.snapshot.chunk.size": "50"}
    )
    topic, notes = f"{prefix}.public.t", f"{prefix}.notifications"
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    writer = Upserts(postgres_db, rows + 100)
    try:
        w.wait_running("cdc")
        run_sql(postgres_db, f"INSERT INTO t VALUES ({rows + 1000}, 0)")
        read_events(bootstrap, topic, 1)
        writer.start()
        signal(bootstrap, prefix, "execute-snapshot", {"data-collections": ["public.t"], "type": "INCREMENTAL"})
        wait_records(bootstrap, notes, lambda rs: "COMPLETED" in notification_types(rs), "COMPLETED", timeout=180)
        writer.stop()
        run_sql(postgres_db, f"INSERT INTO t VALUES ({rows + 2000}, 0)")  # the end marker
        events = wait_records(
            bootstrap, topic, lambda rs: any(key(r) == {"id": rows + 2000} for r in rs), "the end marker"
        )
        notifications = consume_all(bootstrap, notes, 1, settle=1)
    finally:
        writer.stop()
        w.stop()

    table = dict(run_sql(postgres_db, "SELECT id, v FROM t"))
    last: dict[int, Any] = {}
    streamed: dict[int, list[int | None]] = defaultdict(list)
    reads: list[int] = []
    for record in events:
        if record.value is None:  # tombstone
            continue
        event = value(record)
        row_id = key(record)["id"]
        last[row_id] = event["after"]
        if event["op"] == "r":
            assert event["source"]["snapshot"] == "incremental"
            reads.append(row_id)
        else:
            streamed[row_id].append(None if event["op"] == "d" else event["after"]["v"])
    # Every key ends as the table has it; deleted keys end with a delete.
    assert {k: v["v"] for k, v in last.items() if v is not None} == table
    # Each key's changes arrived once each, in commit order (no change lost or reordered).
    assert {k: streamed[k] for k in writer.changes} == dict(writer.changes)
    untouched = set(range(1, rows + 1)) - set(writer.changes)
    assert untouched <= set(reads), "rows nobody changed are all read by the snapshot"
    assert len(reads) == len(set(reads))

    by_type: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in notifications:
        doc = orjson.loads(record.value or b"{}")
        assert doc["schema"]["name"] == "io.debezium.connector.common.Notification"
        note = doc["payload"]
        assert set(note) == {"id", "aggregate_type", "type", "additional_data", "timestamp"}
        assert key(record) == {"id": note["id"]}
        assert note["aggregate_type"] == "Incremental Snapshot"
        assert note["additional_data"]["connector_name"] == prefix
        by_type[note["type"]].append(note["additional_data"])
    assert [len(by_type[t]) for t in ("STARTED", "TABLE_SCAN_COMPLETED", "COMPLETED")] == [1, 1, 1]
    assert by_type["STARTED"][0]["data_collections"] == "public.t"
    assert len(by_type["IN_PROGRESS"]) >= rows // 50
    assert {d["current_collection_in_progress"] for d in by_type["IN_PROGRESS"]} == {"public.t"}
    assert {d["maximum_key"] for d in by_type["IN_PROGRESS"]} == {f"{rows + 1000}"}  # no key beyond it is written
    processed = [d["last_processed_key"] for d in by_type["IN_PROGRESS"] if "last_processed_key" in d]
    assert processed[-1] == f"{rows + 1000}"  # a one-column key as Debezium shows it (an empty last chunk has none)
    scan = by_type["TABLE_SCAN_COMPLETED"][0]
    assert (scan["scanned_collection"], scan["status"]) == ("public.t", "SUCCEEDED")
    assert int(scan["total_rows_scanned"]) == len(reads)


def test_pause_and_resume_stop_and_restart_chunking(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdcpause")
    run_sql(
        postgres_db,
        "CREATE TABLE t (id int PRIMARY KEY, v int)",
        "INSERT INTO t SELECT g, g FROM generate_series(1, 500) g",
    )
    create_topic(bootstrap, f"{prefix}-signal")
    config = config_with_channels(
        postgres.port, dbname(postgres_db), prefix, bootstrap, **{"incremental.snapshot.chunk.size": "20"}
    )
    topic, notes = f"{prefix}.public.t", f"{prefix}.notifications"
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    try:
        w.wait_running("cdc")
        run_sql(postgres_db, "INSERT INTO t VALUES (501, 501)")
        read_events(bootstrap, topic, 1)
        # Both in one batch: the snapshot is paused before its first chunk.
        produce(
            bootstrap,
            f"{prefix}-signal",
            [
                OutgoingRecord(
                    orjson.dumps({"type": "execute-snapshot", "data": {"data-collections": ["public.t"]}}), prefix
                ),
                OutgoingRecord(orjson.dumps({"type": "pause-snapshot", "data": {}}), prefix),
            ],
        )
        wait_records(bootstrap, notes, lambda rs: "PAUSED" in notification_types(rs), "PAUSED")
        run_sql(postgres_db, "INSERT INTO t VALUES (502, 502)")  # streaming goes on while paused
        events = wait_records(bootstrap, topic, lambda rs: any(key(r) == {"id": 502} for r in rs), "row 502")
        time.sleep(3)  # room for chunks that must not come
        events = consume_all(bootstrap, topic, len(events), settle=1)
        assert [value(r)["op"] for r in events] == ["c", "c"], "no chunk is read while paused"
        signal(bootstrap, prefix, "resume-snapshot", {})
        wait_records(bootstrap, notes, lambda rs: "COMPLETED" in notification_types(rs), "COMPLETED")
        events = consume_all(bootstrap, topic, 504, settle=1)
        types = notification_types(consume_all(bootstrap, notes, 1, settle=1))
    finally:
        w.stop()
    assert sorted(key(r)["id"] for r in events if value(r)["op"] == "r") == list(range(1, 503))
    assert types.index("STARTED") < types.index("PAUSED") < types.index("RESUMED") < types.index("COMPLETED")
    assert types.index("RESUMED") < types.index("IN_PROGRESS")


@pytest.mark.parametrize("channel", ["kafka", "source"])
def test_blocking_snapshot_re_emits_rows_then_streams_on(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path, channel: str
) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdcblock")
    run_sql(
        postgres_db,
        "CREATE TABLE t (id int PRIMARY KEY, v int)",
        "INSERT INTO t SELECT g, g FROM generate_series(1, 300) g",
        "CREATE TABLE dbz_signal (id text PRIMARY KEY, type text NOT NULL, data text)",
    )
    create_topic(bootstrap, f"{prefix}-signal")
    config = config_with_channels(
        postgres.port, dbname(postgres_db), prefix, bootstrap,
        **{"snapshot.chunk.size": "100", "signal.data.collection": "public.dbz_signal"},
    )  # fmt: skip
    request = {"data-collections": ["public\\.t"], "type": "BLOCKING"}
    topic = f"{prefix}.public.t"
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    try:
        w.wait_running("cdc")
        run_sql(postgres_db, "INSERT INTO t VALUES (301, 301)", "UPDATE t SET v = -1 WHERE id = 1")
        read_events(bootstrap, topic, 2)
        if channel == "kafka":
            signal(bootstrap, prefix, "execute-snapshot", request)
        else:  # the signal table, in a transaction that goes on after the signal row
            run_sql(
                postgres_db,
                f"INSERT INTO dbz_signal VALUES ('b1', 'execute-snapshot', '{orjson.dumps(request).decode()}')",
                "UPDATE t SET v = -3 WHERE id = 3",
            )
        run_sql(postgres_db, "INSERT INTO t VALUES (302, 302)", "UPDATE t SET v = -2 WHERE id = 2")
        events = wait_records(bootstrap, topic, lambda rs: len([r for r in rs if value(r)["op"] == "r"]) >= 301 and any(
            key(r) == {"id": 2} and value(r)["op"] == "u" for r in rs), "the blocking snapshot and the later update")  # fmt: skip
        notes = consume_all(bootstrap, f"{prefix}.notifications", 1, settle=1)
    finally:
        w.stop()
    reads = [value(r) for r in events if value(r)["op"] == "r"]
    read_ids = [r["after"]["id"] for r in reads]
    assert set(range(1, 302)) <= set(read_ids) and len(read_ids) == len(set(read_ids))
    assert next(r["after"]["v"] for r in reads if r["after"]["id"] == 1) == -1  # the state when it was read
    markers = [r["source"]["snapshot"] for r in reads]
    assert markers[0] == "first" and markers[-1] == "last" and set(markers[1:-1]) == {"true"}
    streamed = [(key(r)["id"], value(r)["op"]) for r in events if value(r)["op"] != "r"]
    in_signal_txn = [(3, "u")] if channel == "source" else []
    assert streamed == [(301, "c"), (1, "u"), *in_signal_txn, (302, "c"), (2, "u")]
    final = {r["after"]["id"]: r["after"]["v"] for r in (value(e) for e in events)}
    assert final == dict(run_sql(postgres_db, "SELECT id, v FROM t"))
    note_types = [(value(n)["aggregate_type"], value(n)["type"]) for n in notes]
    assert ("Initial Snapshot", "STARTED") in note_types and note_types[-1] == ("Initial Snapshot", "COMPLETED")


def _sync_replication(url: str, standby: str | None) -> None:
    """Make commits that ask for it (``synchronous_commit = on``) wait for ``standby`` after their
    commit record is written, while every other session commits locally (``None``: back to normal)."""
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        if standby is None:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
            conn.execute("ALTER SYSTEM RESET synchronous_commit")
        else:
            conn.execute("ALTER SYSTEM SET synchronous_commit = 'local'")
            conn.execute(sql.SQL("ALTER SYSTEM SET synchronous_standby_names = {}").format(sql.Literal(standby)))
        conn.execute("SELECT pg_reload_conf()")


def _notified(bootstrap: str, topic: str, kind: str) -> bool:
    try:
        return kind in notification_types(consume_all(bootstrap, topic, 1, timeout=2, settle=0.2))
    except TimeoutError:
        return False


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_commit_not_yet_visible_at_the_low_watermark_is_not_overwritten_by_its_chunk(
    kafka: Any, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    """A transaction's commit record reaches the WAL (and the stream) before the transaction becomes
    visible to new snapshots. A synchronous-replication wait for a standby that never comes holds a
    committed update in between: it is streamed, yet a chunk read then still sees the old row.
    The chunk must not emit that old row after the update."""
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("cdcvisible")
    run_sql(
        postgres_db,
        "CREATE TABLE t (id int PRIMARY KEY, v int)",
        "INSERT INTO t SELECT g, -g FROM generate_series(1, 300) g",
    )
    create_topic(bootstrap, f"{prefix}-signal")
    config = config_with_channels(
        postgres.port, dbname(postgres_db), prefix, bootstrap, **{"incremental.snapshot.chunk.size": "1000"}
    )
    topic, notes = f"{prefix}.public.t", f"{prefix}.notifications"
    w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", config))
    held = psycopg.connect(libpq(postgres_db))
    pid = held.info.backend_pid
    held_back, committed = threading.Event(), threading.Event()

    def commit_held_update() -> None:
        held.execute("SET synchronous_commit = on")
        for v in itertools.count(85):  # until a commit waits for the standby (the reload is asynchronous)
            held.execute("UPDATE t SET v = %s WHERE id = 103", (v,))
            held.commit()  # waits for the absent standby once its commit record is written
            if held_back.is_set():
                break
            time.sleep(0.05)
        committed.set()

    def waiting(event: str) -> bool:
        """A session other than the test's waits on ``event``."""
        rows = run_sql(postgres_db, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = %s", params=(event,))
        return bool(rows[0][0])

    committer = threading.Thread(target=commit_held_update, name="held-commit", daemon=True)
    try:
        w.wait_running("cdc")
        run_sql(postgres_db, "INSERT INTO t VALUES (1000, 0)")
        read_events(bootstrap, topic, 1)
        _sync_replication(postgres_db, "sluice_absent_standby")
        committer.start()
        _wait_for(lambda: waiting("SyncRep"), "the update to wait for the standby")
        held_back.set()
        # The update is streamed while it is still invisible to new snapshots.
        read_until(bootstrap, topic, lambda rs: any(key(r) == {"id": 103} for r in rs), what="the streamed update")
        signal(bootstrap, prefix, "execute-snapshot", {"data-collections": ["public.t"], "type": "INCREMENTAL"})
        # Either the chunk is read now (it must not see the old row), or the snapshot waits for the
        # update to become visible (a session sleeps); then the update is let through.
        wait_records(bootstrap, notes, lambda rs: "STARTED" in notification_types(rs), "STARTED")
        _wait_for(
            lambda: waiting("PgSleep") or _notified(bootstrap, notes, "COMPLETED"), "the chunk to be read or to wait"
        )
        _sync_replication(postgres_db, None)
        committer.join(30)
        assert committed.is_set()
        wait_records(bootstrap, notes, lambda rs: "COMPLETED" in notification_types(rs), "COMPLETED")
        run_sql(postgres_db, "INSERT INTO t VALUES (2000, 0)")  # the end marker
        events = wait_records(bootstrap, topic, lambda rs: any(key(r) == {"id": 2000} for r in rs), "the end marker")
    finally:
        _sync_replication(postgres_db, None)
        held_back.set()
        if committer.is_alive():
            committer.join(10)
        if committer.is_alive():  # the commit still waits: cancelling the wait lets it finish
            run_sql(postgres_db, f"SELECT pg_cancel_backend({pid})")
            committer.join(10)
        held.close()
        w.stop()
    last = {key(r)["id"]: value(r)["after"]["v"] for r in events}
    table = dict(run_sql(postgres_db, "SELECT id, v FROM t"))
    assert last[103] == table[103], [(value(r)["op"], value(r)["after"]) for r in events if key(r) == {"id": 103}]
    assert last == table
