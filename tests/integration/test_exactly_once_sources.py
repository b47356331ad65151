"""Exactly-once source delivery (KIP-618) on distributed workers with
``exactly.once.source.support=enabled``: a ``read_committed`` consumer sees every record exactly
once — no duplicate, no gap — however the worker running a source task goes away.

- SIGKILL: one worker runs five sources — the counting sequence source, the JDBC source (a
  PostgreSQL table in ``mode=incrementing``), the PostgreSQL CDC source and the MariaDB binlog CDC
  source (inserts and updates; on MariaDB one to three changes per transaction), and the
  FileStream source (numbered lines appended to a file) — while writers change the tables and
  append to the file (starting once each CDC source's initial snapshot is delivered); it is
  SIGKILLed three times at random points. What a killed task had produced since its last commit
  is in an open transaction that the restarted task's ``init_transactions`` aborts, and its
  offsets were never committed, so the restarted task produces those records again, once; the
  CDC sources' own at-least-once replays (PostgreSQL's slot streams again from the last LSN it
  confirmed, which lags the committed offsets; the binlog source reconnects at its transaction's
  first event and skips what its offset says was delivered) must not show either. Beside it a
  worker with the feature off runs the sequence source and a second FileStream source on the same
  file and is killed once with the first kill: both re-send what they produced since their last
  offset commit, which proves the test can fail.
- SIGSTOP: the task's worker (and its task host processes) frozen until the task runs on the
  other worker, then thawed. The zombie task holds its writes once it finds its worker out of
  contact with the group, and its producer was fenced by its replacement's ``init_transactions``
  anyway: nothing it sends after thawing can commit. (The records say which of the two stopped
  it only through its log.)
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.binlog_helpers import connector_config, mysql
from tests.integration.cdc_helpers import BackgroundWriter, cdc_config, dbname, read_events, run_sql, value
from tests.integration.distributed_helpers import Cluster, wait_for
from tests.integration.jdbc_helpers import JDBC_SOURCE, JSON_CONVERTER
from tests.integration.kafka_helpers import consume_all, consume_to_end, create_topic, unique_topic_name
from tests.integration.worker_process import WorkerProcess
from tests.services.mariadb import MariaDbServer
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
    records = consume_to_end(bootstrap, topic)  # both partitions whole: one may lag the other
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


#: The rows of each ``counters`` table, PostgreSQL's and MariaDB's, that the writers change.
_KEYS = 40
#: The row of each ``counters`` there before its source starts, for the initial snapshot to read.
_READY = _KEYS


class _Writer(BackgroundWriter):
    """Inserts a row into ``items`` (the JDBC source's table), inserts or updates a row of
    ``counters`` (the PostgreSQL CDC source's) and appends a numbered line to the FileStream
    sources' file at each step, remembering what each row of ``counters`` went through in commit
    order."""

    def __init__(self, url: str, lines: Path) -> None:
        super().__init__(url, name="eos-writer", seed=11, pause_s=0.004)
        self.items = 0
        self.counters: dict[int, list[int]] = {}
        self.lines = 0
        self._path = lines

    def step(self, conn: psycopg.Connection[Any], rnd: random.Random) -> None:
        conn.execute("INSERT INTO items (label) VALUES (%s)", (f"item {self.items}",))
        self.items += 1
        key = rnd.randrange(_KEYS)
        values = self.counters.setdefault(key, [])
        n = len(values) + 1
        if n == 1:
            conn.execute("INSERT INTO counters VALUES (%s, 1)", (key,))
        else:
            conn.execute("UPDATE counters SET n = %s WHERE id = %s", (n, key))
        values.append(n)
        with self._path.open("a") as file:  # closed, so flushed, line by line: the source may read any prefix
            file.write(f"{self.lines}\n")
        self.lines += 1


class _BinlogWriter(threading.Thread):
    """Inserts or updates rows of MariaDB's ``counters`` (the binlog source's table), one to three
    changes per transaction, until :meth:`stop`, remembering what each row went through in commit
    order; an error is raised by :meth:`stop`."""

    def __init__(self, server: MariaDbServer, database: str) -> None:
        super().__init__(name="eos-binlog-writer", daemon=True)
        self._server, self._database = server, database
        self._stopping = threading.Event()
        self._written: dict[int, int] = {}
        self.counters: dict[int, list[int]] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        rnd = random.Random(12)
        try:
            conn = self._server.connect(self._database, autocommit=False)
            try:
                with conn.cursor() as cur:
                    while not self._stopping.is_set():
                        changes = [self._change(cur, rnd.randrange(_KEYS)) for _ in range(rnd.randint(1, 3))]
                        conn.commit()
                        for key, n in changes:
                            self.counters.setdefault(key, []).append(n)
                        time.sleep(0.004)
            finally:
                conn.close()
        except BaseException as exc:  # noqa: BLE001 - raised by stop()
            self.error = exc

    def _change(self, cur: Any, key: int) -> tuple[int, int]:
        n = self._written[key] = self._written.get(key, 0) + 1
        if n == 1:
            cur.execute("INSERT INTO counters VALUES (%s, 1)", (key,))
        else:
            cur.execute("UPDATE counters SET n = %s WHERE id = %s", (n, key))
        return key, n

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=30)
        if self.error is not None:
            raise AssertionError(f"the MariaDB writer failed: {self.error!r}")


def _lines(path: Path, topic: str) -> dict[str, Any]:
    return {"connector.class": "FileStreamSource", "file": str(path), "topic": topic}


def _binlog(mariadb: MariaDbServer, database: str, bootstrap: str, prefix: str) -> dict[str, Any]:
    """The binlog source on MariaDB's ``counters``, its schema history in a Kafka topic (a restarted
    task reads the table's shape at its stored position from there). ``transaction.boundary`` stays
    ``poll``, as for the PostgreSQL CDC source: a Kafka transaction may end inside a database
    transaction, and its offset then says how many of that transaction's events were delivered."""
    return connector_config(
        mariadb,
        prefix,
        **{
            "table.include.list": rf"{database}\.counters",
            "poll.interval.ms": "200",
            "schema.history.internal.kafka.topic": f"{prefix}.history",
            "schema.history.internal.kafka.bootstrap.servers": bootstrap,
        },
    )


def _connectors(tmp_path: Path, postgres: PostgresServer, url: str, prefix: str) -> dict[str, dict[str, Any]]:
    """The PostgreSQL sources of the SIGKILL test and the file source, by name."""
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
    lines = _lines(tmp_path / "lines.txt", f"{prefix}-lines")
    return {"seq": _sequence(tmp_path, f"{prefix}-seq", "seq"), "jdbc": jdbc, "cdc": cdc, "lines": lines}


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


def _first_difference(got: list[int], expected: list[int]) -> int:
    return next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))


def _check_changes(source: str, bootstrap: str, topic: str, committed: dict[int, list[int]]) -> None:
    """Every committed change of ``counters`` once, in commit order per key (``source``: whose)."""
    total = sum(len(values) for values in committed.values())
    seen: dict[int, list[int]] = {}
    ops: dict[int, list[str]] = {}
    for record in read_events(bootstrap, topic, total, timeout=60, settle=1.5):
        payload = value(record)
        if payload is not None:
            seen.setdefault(payload["after"]["id"], []).append(payload["after"]["n"])
            ops.setdefault(payload["after"]["id"], []).append(payload["op"])
    for key, values in committed.items():
        # A replay would repeat a suffix, a gap skip a change.
        got = seen.get(key, [])
        at = _first_difference(got, values)
        assert got == values, (
            f"{source} key {key}: {len(values)} changes committed, {len(got)} in the topic; from change {at} on "
            f"committed {values[at : at + 5]}, topic {got[at : at + 5]} (ops {ops.get(key, [])[at : at + 5]})"
        )
    assert set(seen) == set(committed), f"{source}: keys never written: {sorted(set(seen) - set(committed))}"


def _check_lines(bootstrap: str, topic: str, written: int, *, exactly_once: bool) -> None:
    """The file's lines ``0 … written - 1`` in ``topic`` (one partition): each once and in order, or
    (at least once) each at least once and some more than once."""
    lines = [int(value(r)) for r in consume_all(bootstrap, topic, written, timeout=60, settle=1.5)]
    if exactly_once:
        first = _first_difference(lines, list(range(written)))
        assert lines == list(range(written)), (
            f"{topic}: {len(lines)} lines for {written} written; from record {first} on: {lines[first : first + 10]}"
        )
        return
    assert set(lines) == set(range(written)), f"{topic}: lines missing: {sorted(set(range(written)) - set(lines))[:20]}"
    assert len(lines) > written, "at least once, the kill should have re-sent lines: the modes look alike"


def _binlog_topic(prefix: str, database: str) -> str:
    return f"{prefix}-bin.{database}.counters"


def _create_tables(postgres_db: str, mariadb: MariaDbServer, database: str) -> None:
    """The sources' tables; each ``counters`` holds the row ``_READY`` for the initial snapshot to read."""
    run_sql(
        postgres_db,
        "CREATE TABLE items (id serial PRIMARY KEY, label text NOT NULL)",
        "CREATE TABLE counters (id int PRIMARY KEY, n int NOT NULL)",
        f"INSERT INTO counters VALUES ({_READY}, 0)",
    )
    mysql(
        mariadb,
        database,
        "CREATE TABLE counters (id INT PRIMARY KEY, n INT NOT NULL)",
        f"INSERT INTO counters VALUES ({_READY}, 0)",
    )


def _wait_streaming(cluster: Cluster, names: list[str], bootstrap: str, cdc_topics: list[str]) -> None:
    """Every source running, and each CDC source's initial snapshot delivered (its read of ``_READY``).
    The snapshots read their chunks beside streaming (DBLog watermarks): a change committed between
    the start of streaming and a chunk's low watermark goes out twice, streamed and read as ``r``
    (one state seen twice, which a snapshot may do), so the writers wait for them."""
    for name in names:
        cluster.wait_running(name, 1)
    for topic in cdc_topics:
        read_events(bootstrap, topic, 1, timeout=60, settle=0)


def _check_all(bootstrap: str, prefix: str, writer: _Writer, binlog: _BinlogWriter, database: str) -> None:
    """The SIGKILL test's checks, side by side; every failure is reported."""
    checks = {
        "jdbc": (_check_jdbc, bootstrap, f"{prefix}-items", writer.items),
        "cdc": (_check_changes, "CDC", bootstrap, f"{prefix}.public.counters", {_READY: [0], **writer.counters}),
        "binlog": (
            _check_changes,
            "binlog",
            bootstrap,
            _binlog_topic(prefix, database),
            {_READY: [0], **binlog.counters},
        ),
        "lines": (partial(_check_lines, exactly_once=True), bootstrap, f"{prefix}-lines", writer.lines),
        "seq": (partial(_check_sequence, exactly_once=True), bootstrap, f"{prefix}-seq"),
        "control": (partial(_check_sequence, exactly_once=False), bootstrap, f"{prefix}-control"),
        "control lines": (
            partial(_check_lines, exactly_once=False),
            bootstrap,
            f"{prefix}-control-lines",
            writer.lines,
        ),
    }
    with ThreadPoolExecutor(len(checks)) as pool:
        futures = {name: pool.submit(*check) for name, check in checks.items()}
    # The first line of each: the message, without pytest's comparison of the whole lists.
    failures = [f"{name}: {(str(e) or repr(e)).splitlines()[0]}" for name, f in futures.items() if (e := f.exception())]
    assert not failures, "\n".join(failures)


def test_workers_killed_three_times_deliver_every_row_and_change_once(
    kafka: KafkaBroker,
    postgres: PostgresServer,
    postgres_db: str,
    mariadb: MariaDbServer,
    mariadb_db: str,
    tmp_path: Path,
) -> None:
    bootstrap, database = kafka.bootstrap_servers, dbname(mariadb_db)
    prefix = unique_topic_name("eos")
    for topic, partitions in (("seq", 2), ("control", 2), ("lines", 1), ("control-lines", 1)):
        create_topic(bootstrap, f"{prefix}-{topic}", partitions=partitions)
    _create_tables(postgres_db, mariadb, database)
    cluster = Cluster(tmp_path / "eos", bootstrap, 1, **{**_SETTINGS, "exactly.once.source.support": "enabled"})
    # At least once, with no offset commit before the kill (the first is due after 60 s): the restarted
    # task re-sends everything. (A shorter interval can end right before the kill, with nothing sent since.)
    control = Cluster(tmp_path / "alo", bootstrap, 1, **{**_SETTINGS, "offset.flush.interval.ms": "60000"})
    writer, binlog = _Writer(postgres_db, tmp_path / "lines.txt"), _BinlogWriter(mariadb, database)
    sources = {
        **_connectors(tmp_path, postgres, postgres_db, prefix),
        "binlog": _binlog(mariadb, database, bootstrap, f"{prefix}-bin"),
    }
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(Cluster.start, (cluster, control)))
    try:
        for name, config in sources.items():
            cluster.put_config(cluster.workers[0], name, config)
        control.put_config(control.workers[0], "control", _sequence(tmp_path, f"{prefix}-control", "control"))
        control.put_config(
            control.workers[0], "control-lines", _lines(tmp_path / "lines.txt", f"{prefix}-control-lines")
        )
        _wait_streaming(
            cluster, list(sources), bootstrap, [f"{prefix}.public.counters", _binlog_topic(prefix, database)]
        )
        wait_for(
            lambda: (_starts(tmp_path), _starts(tmp_path, "control")),
            lambda n: n == (1, 1),
            what="the sequence tasks' starts",
        )
        writer.start()
        binlog.start()
        _kill_three_times(cluster, control, tmp_path, random.Random(42))
        time.sleep(1)
        writer.stop()
        binlog.stop()
        for name in sources:
            cluster.wait_running(name, 1)  # none failed after its last start
        cluster.request(cluster.workers[0], "PUT", "/connectors/seq/stop")
        control.request(control.workers[0], "PUT", "/connectors/control/stop")
        assert _starts(tmp_path) == 4 and _starts(tmp_path, "control") == 2
        time.sleep(1)  # the sequence tasks stop
        _check_all(bootstrap, prefix, writer, binlog, database)
    finally:
        for thread in (writer, binlog):
            if thread.is_alive():
                thread.stop()
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
