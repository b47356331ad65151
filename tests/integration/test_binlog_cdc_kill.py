"""A worker running the binlog CDC source is SIGKILLed while a writer keeps changing rows — and
altering the table just before the kill: the restarted worker loses no change, keeps each key's
commit order, and decodes every row with the shape the table had when the row was written.

This is the whole product path (a standalone worker process, its file offset store, the Kafka
schema history topic, the JSON converter), not the task alone as in ``test_binlog_cdc.py``'s
restart tests. Offsets are flushed every 1.5 s and the kill comes ~0.3 s after the ALTER, so the
restarted task usually resumes from a position before the ALTER: it must replay rows of the old
shape (no ``note``) and then rows of the new one, from the history topic's records alone.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.binlog_helpers import connector_config, mysql
from tests.integration.cdc_helpers import read_events, value, worker, write_connector
from tests.integration.kafka_helpers import unique_topic_name
from tests.services.mariadb import MariaDbServer

pytestmark = pytest.mark.integration

KEYS = 40


class _Writer(threading.Thread):
    """Inserts and updates ``counters`` rows on its own autocommit connection until stopped; adds
    the ``note`` column when :attr:`alter` is set, and fills it in every change after that."""

    def __init__(self, server: MariaDbServer, database: str) -> None:
        super().__init__(name="binlog-writer", daemon=True)
        self._conn = server.connect(database)
        self._conn.autocommit(True)
        self.alter = threading.Event()
        self.altered = threading.Event()
        self.stopping = threading.Event()
        #: key → the (n, has note) of each committed change, in commit order
        self.committed: dict[int, list[tuple[int, bool]]] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        rng, counts = random.Random(11), dict.fromkeys(range(KEYS), 0)
        try:
            with self._conn.cursor() as cur:
                while not self.stopping.is_set():
                    if self.alter.is_set() and not self.altered.is_set():
                        cur.execute("ALTER TABLE counters ADD COLUMN note VARCHAR(20) NULL")
                        self.altered.set()
                    k = rng.randrange(KEYS)
                    n = counts[k] = counts[k] + 1
                    noted = self.altered.is_set()
                    columns, values = ("id, n, note", (k, n, f"n{n}")) if noted else ("id, n", (k, n))
                    marks = ", ".join(["%s"] * len(values))
                    cur.execute(f"INSERT INTO counters ({columns}) VALUES ({marks}) ON DUPLICATE KEY UPDATE n = VALUES(n)"
                                + (", note = VALUES(note)" if noted else ""), values)  # fmt: skip
                    self.committed.setdefault(k, []).append((n, noted))
                    time.sleep(0.002)
        except BaseException as exc:  # noqa: BLE001 - raised by finish()
            self.error = exc
        finally:
            self._conn.close()

    def finish(self) -> int:
        self.stopping.set()
        self.join(30)
        if self.error is not None:
            raise AssertionError(f"the writer failed: {self.error!r}")
        return sum(len(v) for v in self.committed.values())


def test_a_worker_killed_under_load_right_after_an_alter_loses_nothing(
    kafka: Any, mariadb: MariaDbServer, mariadb_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    database = mariadb_db.rsplit("/", 1)[-1]
    mysql(mariadb, database, "CREATE TABLE counters (id INT PRIMARY KEY, n INT NOT NULL)")
    prefix = unique_topic_name("binkill")
    config = connector_config(
        mariadb,
        prefix,
        **{
            "table.include.list": rf"{database}\.counters",
            "poll.interval.ms": "100",
            "schema.history.internal.kafka.topic": f"{prefix}.history",
            "schema.history.internal.kafka.bootstrap.servers": bootstrap,
            "value.converter.schemas.enable": "false",
        },
    )
    connector = write_connector(tmp_path / "binlog.json", "binlog", config)
    writer = _Writer(mariadb, database)
    w = worker(tmp_path, bootstrap, **{"offset.flush.interval.ms": "1500"}).start(connector)
    try:
        w.wait_running("binlog")
        writer.start()
        time.sleep(2.5)
        writer.alter.set()
        assert writer.altered.wait(20), "the ALTER did not run"
        time.sleep(0.3)
        w.kill()
        time.sleep(1)  # the writer goes on while no worker runs
        w = worker(tmp_path, bootstrap).start(connector)
        w.wait_running("binlog")
        time.sleep(2)
        total = writer.finish()
        events = read_events(bootstrap, f"{prefix}.{database}.counters", total, timeout=120, settle=2)
    finally:
        writer.stopping.set()
        w.stop()
    seen: dict[int, list[tuple[int, bool]]] = {}
    for record in events:
        payload = value(record)
        if payload is None or payload["op"] == "r":
            continue
        after = payload["after"]
        assert ("note" in after) == (after.get("note") is not None), f"a row decoded with the wrong shape: {after}"
        if "note" in after:
            assert after["note"] == f"n{after['n']}", after
        change = (after["n"], "note" in after)
        first = seen.setdefault(after["id"], [])
        if change not in first:  # a replay after the restart repeats a suffix; keep first occurrences
            first.append(change)
    assert seen.keys() == writer.committed.keys()
    for k, committed in writer.committed.items():
        assert seen[k] == committed, f"key {k}: committed {committed}, topic {seen[k]}"
    assert any(noted for changes in writer.committed.values() for _, noted in changes)
    assert any(not noted for changes in writer.committed.values() for _, noted in changes)
