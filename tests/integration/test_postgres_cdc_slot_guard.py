"""The slot guard against a real PostgreSQL and Kafka, through a worker process: two CDC connectors
on one database are paused while the database keeps writing WAL; the worker's ``GET /metrics``
shows their slots' lag and retained WAL grow; past the warn point the log warns, naming the slot,
the bytes and the bound; at the bound the ``fail`` connector's task, still paused, is FAILED with a
message that says what to do, and the ``degrade`` connector's task, resumed, is RUNNING with that
text as its degraded trace;
the resumed ``degrade`` connector catches up, its slot's WAL comes back under the bound and the
trace clears.

A transaction held open over the pause keeps the slots' restart position (and so the WAL retained)
where it was after the connectors resume, so the degraded state lasts until the test commits it,
while the lag (what the connector has not confirmed) already falls."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from tests.integration.cdc_helpers import cdc_config, dbname, libpq, run_sql, worker, write_connector
from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.postgres_fixtures import ON_PG15_AND_PG18
from tests.integration.worker_process import WorkerProcess
from tests.services.postgres import PostgresServer

pytestmark = pytest.mark.integration

MiB = 1 << 20
#: The guard's bound: four WAL segments (16 MiB each); the warning comes at half of it.
BOUND = 64 * MiB
WARN_RATIO = 0.5
#: What the slot guard measures (slot_guard._USAGE_SQL), asked of the server directly.
RETAINED_SQL = (
    "SELECT slot_name, pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint"
    " FROM pg_replication_slots WHERE slot_name = ANY(%s)"
)


class Scenario:
    """The worker running the two connectors (``degrade`` and ``fail``), their slots as its
    ``GET /metrics`` reports them, and the database they capture."""

    def __init__(self, w: WorkerProcess, slots: dict[str, str], url: str) -> None:
        self.w, self.slots, self.url = w, slots, url

    def figure(self, name: str, family: str) -> float | None:
        text = httpx.get(f"{self.w.url}/metrics", timeout=10).text
        slot = self.slots[name]
        found = re.search(rf'^sluice_postgres_replication_slot_{family}{{[^}}]*slot="{slot}"[^}}]*}} (\S+)$', text, re.M)
        return float(found.group(1)) if found else None

    def retained(self, name: str) -> float:
        return self.figure(name, "retained_wal_bytes") or 0.0

    def task(self, name: str) -> dict[str, Any]:
        body = httpx.get(f"{self.w.url}/connectors/{name}/status", timeout=10).json()
        return dict((body.get("tasks") or [{}])[0])

    def wait(self, what: Callable[[], Any], timeout: float, why: Callable[[], str], tick: Callable[[], None] | None = None) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = what()
            if found:
                return found
            if tick is not None:
                tick()
            time.sleep(0.5)
        raise AssertionError(f"{why()}\n{self.w.log()}")

    def server_retained(self) -> dict[str, int]:
        """The WAL each slot retains, as the server says now (the worker measures every 5 s)."""
        rows = run_sql(self.url, RETAINED_SQL, params=(list(self.slots.values()),))
        by_slot = {slot: int(retained) for slot, retained in rows}
        return {name: by_slot.get(slot, 0) for name, slot in self.slots.items()}

    def grow_until(self, limit: float, names: Sequence[str] | None = None) -> None:
        """Move the server on one WAL segment at a time (a write first: an idle server does not
        switch) until every slot retains ``limit``, then wait until the worker's measurement (every
        5 s) of the slots of ``names`` (all by default) shows it. A switch moves the server on at
        most one segment (16 MiB), so the slots stop less than a segment past ``limit``."""
        names = list(names or self.slots)
        for _ in range(int(limit // (16 * MiB)) + 8):
            if min(self.server_retained().values()) >= limit:
                break
            run_sql(self.url, "UPDATE churn SET pad = md5(random()::text) WHERE id = 1")
            run_sql(self.url, "SELECT pg_switch_wal()")
        else:
            raise AssertionError(f"the slots do not retain {limit} bytes: {self.server_retained()}")
        self.wait(lambda: min(map(self.retained, names)) >= limit, 60,
                  lambda: f"the worker does not report {limit} bytes retained: {[self.retained(n) for n in names]}")  # fmt: skip


@ON_PG15_AND_PG18
def test_paused_connectors_slots_grow_the_guard_warns_degrades_fails_and_clears(
    kafka: Any, pg_server: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    run_sql(postgres_db, "CREATE TABLE churn (id int PRIMARY KEY, pad text)", "INSERT INTO churn VALUES (1, 'x')",
            "CREATE TABLE hold (n int)", "INSERT INTO hold VALUES (0)")  # fmt: skip
    guard = {
        "table.include.list": r"public\.churn",
        "slot.max.retained.wal.bytes": str(BOUND),
        "slot.retained.wal.warn.ratio": str(WARN_RATIO),
        # The resumed connector confirms what it streamed with its next status update (10 s by
        # default): each second is enough for the lag, then the retained WAL, to be seen falling.
        "status.update.interval.ms": "1000",
    }
    degrade = cdc_config(pg_server.port, dbname(postgres_db), unique_topic_name("guard"), **guard)
    fail = cdc_config(pg_server.port, dbname(postgres_db), unique_topic_name("guardfail"),
                      **guard, **{"slot.retained.wal.action": "fail"})  # fmt: skip
    # The fail connector's task fails again on each automatic restart: one, soon after, shows that
    # (the default budget, three with a backoff doubling from 1 s, only adds waiting).
    restarts = {"task.restart.max.attempts": "1", "task.restart.backoff.initial.ms": "100"}
    w = worker(tmp_path, kafka.bootstrap_servers, **restarts).start(
        write_connector(tmp_path / "degrade.json", "degrade", degrade), write_connector(tmp_path / "fail.json", "fail", fail)
    )
    held = psycopg.connect(libpq(postgres_db))
    try:
        run = Scenario(w, {"degrade": degrade["slot.name"], "fail": fail["slot.name"]}, postgres_db)
        _pause_and_grow(run, held)
        _fail_says_what_to_do(run)
        assert httpx.put(f"{w.url}/connectors/degrade/resume", timeout=10).status_code == 202
        _degraded_until_back_under(run, held)
    finally:
        held.close()
        w.stop()


def _pause_and_grow(run: Scenario, held: psycopg.Connection[Any]) -> None:
    """Paused, the slots confirm nothing: each WAL segment the server moves on to stays retained.
    ``held`` opens a transaction (with a write) that stays open until the test commits it."""
    w = run.w
    for name in run.slots:
        w.wait_running(name, timeout=60)
        run.wait(lambda n=name: run.figure(n, "retained_wal_bytes") is not None, 30, lambda: "no slot metrics")
        assert run.figure(name, "max_retained_wal_bytes") == BOUND
        assert httpx.put(f"{w.url}/connectors/{name}/pause", timeout=10).status_code == 202
    for name in run.slots:
        run.wait(lambda n=name: run.task(n).get("state") == "PAUSED", 30, lambda: "not paused")
    lag_paused = run.figure("degrade", "lag_bytes") or 0.0
    held.execute("UPDATE hold SET n = n + 1")
    run.grow_until(BOUND * WARN_RATIO)
    slot = run.slots["degrade"]
    warning = re.compile(rf"WARNING .*Replication slot {slot} retains (\d+) bytes of WAL, \d+% of slot.max.retained.wal.bytes={BOUND}")
    found = run.wait(lambda: warning.search(w.log(200_000)), 30, lambda: "no warning")
    assert BOUND * WARN_RATIO <= int(found.group(1)) < BOUND
    assert "degrade|task-0" in found.group(0)  # the task's context
    run.grow_until(BOUND, ["degrade"])  # the fail connector's task fails there, and its figures go
    assert (run.figure("degrade", "lag_bytes") or 0.0) >= lag_paused + BOUND / 2  # the lag grew too
    at_bound = re.compile(rf"ERROR .*Replication slot {run.slots['fail']} retains \d+ bytes of WAL, at or over")
    run.wait(lambda: at_bound.search(w.log(200_000)), 30, lambda: "no error at the bound")


def _fail_says_what_to_do(run: Scenario) -> None:
    """``fail``, still paused, fails at the bound with what to do: a paused connector's slot is
    the one most likely to fill the disk, so the guard does not wait for it to resume."""
    failed = run.wait(lambda: (t := run.task("fail")).get("state") == "FAILED" and t, 60, lambda: f"not failed: {run.task('fail')}")
    for text in (f"slot.max.retained.wal.bytes={BOUND}", "slot.retained.wal.action=fail", "pg_drop_replication_slot"):
        assert text in failed["trace"], failed


def _degraded_until_back_under(run: Scenario, held: psycopg.Connection[Any]) -> None:
    """``degrade``, resumed: RUNNING with the degraded trace while its slot retains WAL over the
    bound (the open transaction holds the slot's restart position), though it streams and confirms
    (the lag falls); once the transaction commits, the WAL retained falls and the trace clears."""
    degraded = run.wait(lambda: "slot.max.retained.wal.bytes" in ((t := run.task("degrade")).get("trace") or "") and t,
                        30, lambda: f"not degraded: {run.task('degrade')}")  # fmt: skip
    assert degraded["state"] == "RUNNING" and degraded["trace"].startswith("Degraded since "), degraded
    assert "resume it" in degraded["trace"] and run.slots["degrade"] in degraded["trace"]
    run.wait(lambda: (lag := run.figure("degrade", "lag_bytes")) is not None and lag < BOUND / 4, 60,
             lambda: f"the lag does not fall: {run.figure('degrade', 'lag_bytes')}")  # fmt: skip
    assert run.retained("degrade") >= BOUND and run.task("degrade")["trace"] == degraded["trace"]
    # A checkpoint logs the running transactions the slot's restart position moves on with, and a
    # write gives the stream something to confirm.
    held.commit()
    run.wait(lambda: run.retained("degrade") < BOUND and not run.task("degrade").get("trace"), 120,
             lambda: f"still over the bound: {run.retained('degrade')} {run.task('degrade')}",
             tick=lambda: run_sql(run.url, "UPDATE churn SET pad = 'y' WHERE id = 1", "CHECKPOINT"))  # fmt: skip
    assert run.task("degrade")["state"] == "RUNNING"
    assert f"Replication slot {run.slots['degrade']} is back under slot.max.retained.wal.bytes" in run.w.log(400_000)
