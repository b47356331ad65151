"""Exactly-once source delivery (KIP-618) on distributed workers with
``exactly.once.source.support=enabled``: a ``read_committed`` consumer sees every record exactly
once — no duplicate, no gap — however the worker running a source task goes away.

- SIGKILL: one worker runs the counting sequence source, the JDBC source (a PostgreSQL table in
  ``mode=incrementing``) and the PostgreSQL CDC source (inserts and updates) while a writer changes
  both tables; it is SIGKILLed three times at random points. What a killed task had produced since
  its last commit is in an open transaction that the restarted task's ``init_transactions``
  aborts, and its offsets were never committed, so the restarted task produces those records
  again, once; the CDC source's own at-least-once replays (its slot streams again from the last
  LSN it confirmed, which lags the committed offsets) must not show either. Beside it a worker
  with the feature off runs the sequence source and is killed once with the first kill: it
  re-sends what it produced since its last offset commit, which proves the test can fail.
- SIGSTOP: the task's worker (and its task host processes) frozen until the task runs on the
  other worker, then thawed. The zombie task holds its writes once it finds its worker out of
  contact with the group, and its producer was fenced by its replacement's ``init_transactions``
  anyway: nothing it sends after thawing can commit. (The records say which of the two stopped
  it only through its log.)
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.cdc_helpers import BackgroundWriter, cdc_config, dbname, read_events, run_sql, value
from tests.integration.distributed_helpers import Cluster, wait_for
from tests.integration.jdbc_helpers import JDBC_SOURCE, JSON_CONVERTER
from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name
from tests.integration.worker_process import WorkerProcess
from tests.services.postgres import PostgresServer

pytestmark = pytest.mark.integration

#: Worker keys of both tests: a task comes back as soon as its old worker's membership expires.
_SETTINGS = {"scheduled.rebalance.max.delay.ms": "0"}


def _sequence(tmp_path: Path, topic: str, name: str) -> dict[str, Any]:
    return {
        "connector.class": "tests.plugins.counting.CountingSequenceSource",
        "tasks.max": "1",
        "topic": topic,
        "sequence.rate": "1000",
        "starts.file": str(tmp_path / f"{name}.starts"),
    }


def _starts(tmp_path: Path, name: str = "seq") -> int:
    path = tmp_path / f"{name}.starts"
    return len(path.read_text().split()) if path.exists() else 0


def _gaps_and_repeats(bootstrap: str, topic: str) -> tuple[list[int], dict[int, int]]:
    """The sequence numbers of ``topic`` missing below the highest, and those delivered more than once."""
    records = consume_all(bootstrap, topic, 1, timeout=60, settle=2)
    counts = Counter(json.loads(r.value)["payload"]["seq"] for r in records if r.value is not None)
    missing = sorted(set(range(max(counts) + 1)) - set(counts))
    return missing, {seq: n for seq, n in counts.items() if n > 1}


def _check_sequence(bootstrap: str, topic: str, *, exactly_once: bool) -> None:
    missing, repeated = _gaps_and_repeats(bootstrap, topic)
    assert not missing, f"{topic}: gaps {missing[:20]} …"
    if exactly_once:
        assert not repeated, f"{topic}: {len(repeated)} records delivered more than once, e.g. {sorted(repeated)[:10]}"
    else:
        assert repeated, "at least once, the kill should have re-sent records: the test cannot tell the modes apart"


class _Writer(BackgroundWriter):
    """Inserts a row into ``items`` (the JDBC source's table) and inserts or updates a row of
    ``counters`` (the CDC source's) at each step, remembering what each row of ``counters`` went
    through in commit order."""

    def __init__(self, url: str) -> None:
        super().__init__(url, name="eos-writer", seed=11, pause_s=0.004)
        self.items = 0
        self.counters: dict[int, list[int]] = {}

    def step(self, conn: psycopg.Connection[Any], rnd: random.Random) -> None:
        conn.execute("INSERT INTO items (label) VALUES (%s)", (f"item {self.items}",))
        self.items += 1
        key = rnd.randrange(40)
        values = self.counters.setdefault(key, [])
        n = len(values) + 1
        if n == 1:
            conn.execute("INSERT INTO counters VALUES (%s, 1)", (key,))
        else:
            conn.execute("UPDATE counters SET n = %s WHERE id = %s", (n, key))
        values.append(n)


def _connectors(tmp_path: Path, postgres: PostgresServer, url: str, prefix: str) -> dict[str, dict[str, Any]]:
    """The three sources of the SIGKILL test, by name."""
    jdbc = {
        "connector.class": JDBC_SOURCE,
        "connection.url": url,
        "mode": "incrementing",
        "incrementing.column.name": "id",
        "table.whitelist": "items",
        "topic.prefix": f"{prefix}-",
        "poll.interval.ms": "200",
        "value.converter": JSON_CONVERTER,
    }
    cdc = cdc_config(postgres.port, dbname(url), prefix, **{"table.include.list": r"public\.counters"})
    return {"seq": _sequence(tmp_path, f"{prefix}-seq", "seq"), "jdbc": jdbc, "cdc": cdc}


def _restart(worker: WorkerProcess, starts: Callable[[], int]) -> float:
    """SIGKILL ``worker``, start it again and wait until its tasks started again; the seconds that took."""
    before = starts()
    worker.kill()
    t0 = time.monotonic()
    worker.start()
    # The status topic may still say RUNNING from before the kill: count the task's starts.
    wait_for(starts, lambda n: n > before, what="the task's start after a kill")
    return time.monotonic() - t0


def _kill_three_times(cluster: Cluster, control: Cluster, tmp_path: Path, rng: random.Random) -> None:
    """Three kills of ``cluster``'s worker at random points, the first with ``control``'s."""
    worker, other = cluster.workers[0], control.workers[0]
    for kill in range(3):
        time.sleep(1 + rng.random() * 2)
        with ThreadPoolExecutor(2) as pool:
            back = pool.submit(_restart, worker, lambda: _starts(tmp_path))
            if kill == 0:
                pool.submit(_restart, other, lambda: _starts(tmp_path, "control")).result()
            print(f"kill {kill}: tasks back in {back.result():.1f} s")


def _check_jdbc(bootstrap: str, topic: str, rows: int) -> None:
    ids = Counter(
        json.loads(r.value)["payload"]["id"]
        for r in consume_all(bootstrap, topic, rows, timeout=60, settle=1.5)
        if r.value
    )
    missing = sorted(set(range(1, rows + 1)) - set(ids))
    assert not missing, f"JDBC: rows missing from the topic: {missing[:20]} …"
    repeated = {i: n for i, n in ids.items() if n > 1}
    assert not repeated and len(ids) == rows, (
        f"JDBC: {len(repeated)} rows delivered more than once, e.g. {sorted(repeated)[:10]}"
    )


def _check_cdc(bootstrap: str, topic: str, committed: dict[int, list[int]]) -> None:
    total = sum(len(values) for values in committed.values())
    seen: dict[int, list[int]] = {}
    for record in read_events(bootstrap, topic, total, timeout=60, settle=1.5):
        payload = value(record)
        if payload is not None:
            seen.setdefault(payload["after"]["id"], []).append(payload["after"]["n"])
    for key, values in committed.items():
        # Every committed change once, in commit order: a replay would repeat a suffix.
        assert seen.get(key, []) == values, f"CDC key {key}: committed {values}, topic {seen.get(key)}"
    assert set(seen) == set(committed), f"CDC: keys never written: {sorted(set(seen) - set(committed))}"


def test_workers_killed_three_times_deliver_every_row_and_change_once(
    kafka: KafkaBroker, postgres: PostgresServer, postgres_db: str, tmp_path: Path
) -> None:
    bootstrap = kafka.bootstrap_servers
    prefix = unique_topic_name("eos")
    create_topic(bootstrap, f"{prefix}-seq", partitions=2)
    create_topic(bootstrap, f"{prefix}-control", partitions=2)
    run_sql(postgres_db, "CREATE TABLE items (id serial PRIMARY KEY, label text NOT NULL)")
    run_sql(postgres_db, "CREATE TABLE counters (id int PRIMARY KEY, n int NOT NULL)")
    cluster = Cluster(tmp_path / "eos", bootstrap, 1, **{**_SETTINGS, "exactly.once.source.support": "enabled"})
    # At least once, with no offset commit before the kill (the first is due after 60 s): the restarted
    # task re-sends everything. (A shorter interval can end right before the kill, with nothing sent since.)
    control = Cluster(tmp_path / "alo", bootstrap, 1, **{**_SETTINGS, "offset.flush.interval.ms": "60000"})
    writer = _Writer(postgres_db)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(Cluster.start, (cluster, control)))
    try:
        for name, config in _connectors(tmp_path, postgres, postgres_db, prefix).items():
            cluster.put_config(cluster.workers[0], name, config)
        control.put_config(control.workers[0], "control", _sequence(tmp_path, f"{prefix}-control", "control"))
        for name in ("seq", "jdbc", "cdc"):
            cluster.wait_running(name, 1)
        wait_for(
            lambda: (_starts(tmp_path), _starts(tmp_path, "control")),
            lambda n: n == (1, 1),
            what="the sequence tasks' starts",
        )
        writer.start()
        _kill_three_times(cluster, control, tmp_path, random.Random(42))
        time.sleep(1)
        writer.stop()
        for name in ("seq", "jdbc", "cdc"):
            cluster.wait_running(name, 1)  # none failed after its last start
        cluster.request(cluster.workers[0], "PUT", "/connectors/seq/stop")
        control.request(control.workers[0], "PUT", "/connectors/control/stop")
        assert _starts(tmp_path) == 4 and _starts(tmp_path, "control") == 2
        time.sleep(1)  # the sequence tasks stop
        with ThreadPoolExecutor(4) as pool:
            checks = [
                pool.submit(_check_jdbc, bootstrap, f"{prefix}-items", writer.items),
                pool.submit(_check_cdc, bootstrap, f"{prefix}.public.counters", writer.counters),
                pool.submit(_check_sequence, bootstrap, f"{prefix}-seq", exactly_once=True),
                pool.submit(_check_sequence, bootstrap, f"{prefix}-control", exactly_once=False),
            ]
        for check in checks:
            check.result()
    finally:
        if writer.is_alive():
            writer.stop()
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(Cluster.stop, (cluster, control)))


def _owner(cluster: Cluster, name: str, asking: WorkerProcess) -> WorkerProcess:
    """The worker that runs ``name``'s task, as ``asking`` reports it."""
    body = cluster.wait_running(name, 1, on=asking)
    return cluster.worker_by_id(body["tasks"][0]["worker_id"])


def _why_stopped(worker: WorkerProcess) -> list[str]:
    """The lines of ``worker``'s log where task seq-0 says it was fenced or out of contact."""
    lines = worker.log(50_000).splitlines()
    return [line for line in lines if "[seq|task-0]" in line and ("fenced" in line or "out of contact" in line)]


def test_a_frozen_workers_task_cannot_commit_after_its_replacement_started(kafka: KafkaBroker, tmp_path: Path) -> None:
    bootstrap = kafka.bootstrap_servers
    topic = unique_topic_name("eos-frozen")
    create_topic(bootstrap, topic, partitions=2)
    cluster = Cluster(tmp_path, bootstrap, 2, **{**_SETTINGS, "exactly.once.source.support": "enabled"}).start()
    try:
        cluster.put_config(cluster.workers[0], "seq", _sequence(tmp_path, topic, "seq"))
        wait_for(lambda: _starts(tmp_path), lambda n: n == 1, what="the task's start")
        a = _owner(cluster, "seq", cluster.workers[0])
        b = next(w for w in cluster.workers if w is not a)
        time.sleep(1)
        frozen = a.freeze()
        try:
            assert len(frozen) > 1, "the worker runs its tasks in processes of its own (task.executor=process)"
            # B's task fenced A's in initialize(), before its start() wrote the starts file.
            wait_for(lambda: _starts(tmp_path), lambda n: n == 2, what="the task's start on the other worker")
            wait_for(lambda: _owner(cluster, "seq", b), lambda owner: owner is b, what="the task on the other worker")
            time.sleep(1.5)  # B commits transactions while A's task sits in an open one
        finally:
            a.thaw()
        # Thawed, A's task resumes mid-loop: it finds its worker out of the group, or its producer fenced.
        reason = wait_for(lambda: _why_stopped(a), bool, timeout=30, what="A's log saying why its task stopped")
        time.sleep(1)  # what A's task would send after thawing, and B's task goes on committing
        cluster.request(b, "PUT", "/connectors/seq/stop")
        time.sleep(1)
        _check_sequence(bootstrap, topic, exactly_once=True)
    finally:
        cluster.stop()
    print("\n".join(reason))
