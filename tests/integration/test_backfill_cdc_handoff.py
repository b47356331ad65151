"""A table backfilled on Spark while it changes, then streamed by CDC from the recorded position.

What a user of the hand-off checks: replaying the backfill's records and then the CDC connector's
events key by key gives exactly the table as it ends up — no change missing, re-deliveries only
of the same row. A writer thread inserts, updates and deletes rows (one- and multi-statement
transactions) the whole time: before the backfill, while Spark reads, and after the CDC connector
started from ``source_position``.

The test also shows it would catch a wrong position: with the CDC events cut at an LSN taken once
the read had begun, or at the LSN current when the backfill ended, the same replay no longer
gives the final table (the writer's changes in between are in neither).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition

from sluice.deploy.kafka_stack import KafkaBroker
from sluice.worker.backfill import BackfillManager, JobState
from tests.integration.cdc_helpers import (
    BackgroundWriter,
    cdc_config,
    dbname,
    key,
    run_sql,
    value,
    worker,
    write_connector,
)
from tests.integration.kafka_helpers import ConsumedRecord, consume_all, unique_topic_name
from tests.services.postgres import PostgresServer
from tests.sizes import size

pytestmark = pytest.mark.integration

#: Rows before the writer starts: 5,000 by default (20,000, the size the test was written with,
#: with ``SLUICE_TEST_FULL_SIZES=1``). What the test checks does not grow with the table: any size
#: read in 4 Spark partitions while the writer commits covers it.
INITIAL_ROWS = size(5_000, 20_000)
SENTINEL = -1


class Writer(BackgroundWriter):
    """Random committed changes to ``accounts`` until stopped; the table is the truth, not this."""

    def __init__(self, url: str, first_new_id: int) -> None:
        super().__init__(url, name="handoff-writer", seed=7, pause_s=0.002)
        self._next_id = first_new_id
        self._live = list(range(1, first_new_id))

    def step(self, conn: psycopg.Connection[Any], rnd: random.Random) -> None:
        roll = rnd.random()
        if roll < 0.35:
            conn.execute("UPDATE accounts SET balance = balance + 1, label = %s WHERE id = %s", (f"u{self.commits}", rnd.choice(self._live)))
        elif roll < 0.65:
            conn.execute("INSERT INTO accounts VALUES (%s, 0, 'new')", (self._next_id,))
            self._live.append(self._next_id)
            self._next_id += 1
        elif roll < 0.85:
            victim = self._live.pop(rnd.randrange(len(self._live)))
            conn.execute("DELETE FROM accounts WHERE id = %s", (victim,))
        else:  # several statements in one transaction
            with conn.transaction():
                a, b = rnd.sample(self._live, 2)
                conn.execute("UPDATE accounts SET balance = balance - 5 WHERE id = %s", (a,))
                conn.execute("UPDATE accounts SET balance = balance + 5 WHERE id = %s", (b,))
                conn.execute("INSERT INTO accounts VALUES (%s, 5, 'tx')", (self._next_id,))
            self._live.append(self._next_id)
            self._next_id += 1


def current_lsn(url: str) -> int:
    return int(run_sql(url, "SELECT (pg_current_wal_lsn() - '0/0')::bigint")[0][0])


def read_until_sentinel(bootstrap: str, topic: str, timeout: float = 180) -> list[ConsumedRecord]:
    """Every record of ``topic`` up to the sentinel row's insert (then a short settle)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    records: list[ConsumedRecord] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            meta = consumer.list_topics(topic, timeout=10).topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic} never appeared")
            time.sleep(0.5)
        consumer.assign([TopicPartition(topic, p, 0) for p in sorted(meta.partitions)])
        settle_until: float | None = None
        while settle_until is None or time.monotonic() < settle_until:
            if settle_until is None and time.monotonic() > deadline:
                raise TimeoutError(f"no sentinel in {topic} after {len(records)} records")
            for msg in consumer.consume(2000, timeout=0.5):
                assert msg.error() is None, msg.error()
                record = ConsumedRecord(topic, msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value())
                records.append(record)
                if settle_until is None and record.value is not None and (key(record) or {}).get("id") == SENTINEL:
                    settle_until = time.monotonic() + 2.0
    finally:
        consumer.close()
    return sorted(records, key=lambda r: (r.partition, r.offset))


def replay(backfilled: list[ConsumedRecord], events: list[ConsumedRecord], *, from_lsn: int = 0) -> dict[int, dict[str, Any]]:
    """The table a consumer builds: backfill rows, then change events in order (per partition = per key)."""
    state: dict[int, dict[str, Any]] = {}
    for record in backfilled:
        row = value(record)
        state[row["id"]] = row
    for record in events:
        event = value(record)
        if event is None or event["source"]["lsn"] < from_lsn:  # tombstone, or cut off by a control
            continue
        if event["op"] == "d":
            state.pop(key(record)["id"], None)
        else:
            state[event["after"]["id"]] = event["after"]
    return state


def test_backfill_then_cdc_from_the_recorded_position_loses_no_change(
    backfills: BackfillManager, postgres: PostgresServer, postgres_db: str, kafka: KafkaBroker, tmp_path: Path
) -> None:
    """The replay of backfill + stream equals the final table; the two later positions do not.

    The small size (:data:`INITIAL_ROWS` = 5,000) still covers every path: 4 Spark partitions of
    1,250+ rows each (the writer's inserts come on top), read in two waves on the 2 local cores from the exported snapshot while the
    writer keeps committing (updates, deletes and multi-statement transactions on rows of every
    partition, inserts above them), thousands of change events streamed after the hand-off, and
    changes on both sides of each control position.
    ``SLUICE_TEST_FULL_SIZES=1`` runs the original 20,000 rows."""
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("handoff")
    config = cdc_config(
        postgres.port, dbname(postgres_db), prefix, **{"table.include.list": r"public\.accounts", "tombstones.on.delete": "false"}
    )
    run_sql(
        postgres_db,
        "CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL, label text)",
        f"INSERT INTO accounts SELECT i, i % 1000, 'initial' FROM generate_series(1, {INITIAL_ROWS}) i",
        # The publication exists before the slot, so pgoutput finds it at every decoded position.
        f"CREATE PUBLICATION {config['publication.name']} FOR TABLE accounts",
    )
    writer = Writer(postgres_db, INITIAL_ROWS + 1)
    writer.start()
    try:
        time.sleep(0.5)
        topic = unique_topic_name("handoff-backfill")
        job = f"bf-{topic}"
        backfills.submit(
            {
                "id": job,
                "kind": "jdbc_to_topic",
                "source": {
                    "connection.url": postgres.jdbc_url(dbname(postgres_db)),
                    "connection.user": "postgres",
                    "table": "public.accounts",
                    "num.partitions": 4,
                    "cdc.slot.name": config["slot.name"],
                },
                "target": {"topic": topic, "partitions": 2},
            }
        )
        lsn_read_began = 0
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            status = backfills.get(job)["status"]
            if not lsn_read_began and status["rows_done"] > 0:
                lsn_read_began = current_lsn(postgres_db)
            if status["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                break
            time.sleep(0.05)
        final_status = backfills.wait(job, timeout=60)
        assert final_status.state is JobState.SUCCEEDED, final_status.error
        lsn_after_backfill = current_lsn(postgres_db)
        commits_during_backfill = writer.commits

        # What GET /backfills/{id} shows: the LSN and the CDC settings to continue with.
        position = backfills.get(job)["status"]["source_position"]
        assert position["database"] == "postgresql" and position["slot"] == config["slot.name"]
        assert position["slot_created"] is True
        assert position["cdc"]["slot.name"] == config["slot.name"]
        assert position["cdc"]["snapshot.mode"] == "no_data"
        assert lsn_read_began, "the backfill finished before its progress was seen"

        connector = {**config, **position["cdc"]}
        w = worker(tmp_path, bootstrap).start(write_connector(tmp_path / "cdc.json", "cdc", connector))
        try:
            w.wait_running("cdc")
            time.sleep(2.0)  # the writer keeps going while the stream runs
            writer.stop()
            run_sql(postgres_db, f"INSERT INTO accounts VALUES ({SENTINEL}, 0, 'sentinel')")
            try:
                events = read_until_sentinel(bootstrap, f"{prefix}.public.accounts")
            except TimeoutError as exc:
                raise AssertionError(f"{exc}; worker log:\n{w.log()[-3000:]}") from None
        finally:
            w.stop()
    finally:
        writer.stop()

    assert writer.commits > commits_during_backfill > 0
    final = {row[0]: {"id": row[0], "balance": row[1], "label": row[2]} for row in run_sql(postgres_db, "SELECT id, balance, label FROM accounts")}
    backfilled = consume_all(bootstrap, topic, final_status.rows_done, timeout=120)
    assert len(backfilled) == final_status.rows_done == final_status.rows_total
    assert len({r.key for r in backfilled}) == len(backfilled)  # each row of the snapshot once

    rebuilt = replay(backfilled, events)
    missing = sorted(set(final) - set(rebuilt))[:5]
    extra = sorted(set(rebuilt) - set(final))[:5]
    wrong = sorted(k for k in set(final) & set(rebuilt) if final[k] != rebuilt[k])[:5]
    same = rebuilt == final  # a bool, so a failure prints the summary, not two 20,000-row dicts
    assert same, f"missing {missing}, extra {extra}, different {wrong} (of {len(final)} rows, {len(events)} change events)"

    # Exactly one side per transaction: the read is the snapshot at the recorded LSN, so no row
    # inserted after it was read (ids are never reused), and every row changed after it was.
    backfilled_ids = {value(r)["id"] for r in backfilled}
    streamed = [(value(r)["op"], key(r)["id"]) for r in events if r.value is not None]
    inserted_later = {i for op, i in streamed if op == "c"}
    assert not backfilled_ids & inserted_later, sorted(backfilled_ids & inserted_later)[:5]
    changed_unseen = {i for op, i in streamed if op in ("u", "d")} - backfilled_ids - inserted_later
    assert not changed_unseen, sorted(changed_unseen)[:5]

    # Controls: a position later than the snapshot's — taken once the read had begun, or the
    # LSN current when CDC was started — loses the changes made in between, and the check sees it.
    late_read = replay(backfilled, events, from_lsn=lsn_read_began) == final
    late_stream = replay(backfilled, events, from_lsn=lsn_after_backfill) == final
    assert not late_read and not late_stream, "the writer made no change the check depends on"


def test_a_failed_backfill_drops_the_slot_it_created_for_the_handoff(
    backfills: BackfillManager, postgres: PostgresServer, postgres_db: str
) -> None:
    run_sql(
        postgres_db,
        "CREATE TABLE base (id bigint PRIMARY KEY)",
        "INSERT INTO base SELECT generate_series(1, 1000)",
        # Reading x divides by zero on row 500: the read fails in the executors, after the slot exists.
        "CREATE VIEW broken AS SELECT id, 1 / (id - 500) AS x FROM base",
    )
    slot = f"handoff_{unique_topic_name('s').replace('-', '_')}"[:63].lower()
    job = "bf-broken-handoff"
    backfills.submit(
        {
            "id": job,
            "kind": "jdbc_to_topic",
            "source": {
                "connection.url": postgres.jdbc_url(dbname(postgres_db)),
                "connection.user": "postgres",
                "table": "public.broken",
                "partition.column": "id",
                "cdc.slot.name": slot,
            },
            "target": {"topic": unique_topic_name("broken-handoff")},
        }
    )
    status = backfills.wait(job, timeout=300)
    assert status.state is JobState.FAILED and status.error is not None and "division by zero" in status.error
    assert status.source_position is not None and status.source_position["slot"] == slot  # it was created…
    assert run_sql(postgres_db, "SELECT slot_name FROM pg_replication_slots WHERE slot_name = %s", params=(slot,)) == []  # …and dropped
