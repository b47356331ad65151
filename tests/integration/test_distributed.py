"""Distributed mode: three worker processes coordinated through a real Kafka broker.

What a Kafka Connect operator checks after a failover: the work was spread, a killed worker's
tasks came back elsewhere within ``scheduled.rebalance.max.delay.ms`` + the session timeout,
every record produced reached the sink, and untouched connectors never restarted.

The tests that take a worker away (a kill, a freeze, the leader's death) give their cluster a
``scheduled.rebalance.max.delay.ms`` of :data:`FAILOVER_DELAY_MS`: what they check is that the work
moves after the session timeout and that delay, not how long the delay is, and the default of
these clusters (4 s) only adds waiting. The other tests keep the default, which also keeps a
worker that a loaded machine starves past its session timeout from losing its tasks at once.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.distributed_helpers import SESSION_TIMEOUT_MS, Cluster, wait_for
from tests.integration.jdbc_helpers import sql
from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name
from tests.sizes import size

REPO = Path(__file__).resolve().parents[2]

#: ``scheduled.rebalance.max.delay.ms`` of the clusters whose tests take a worker away.
FAILOVER_DELAY_MS = 1_000
FAILOVER = {"scheduled.rebalance.max.delay.ms": str(FAILOVER_DELAY_MS)}


@pytest.fixture
def cluster(tmp_path: Path, kafka: KafkaBroker) -> Any:
    made: list[Cluster] = []

    def make(size: int = 3, **overrides: Any) -> Cluster:
        c = Cluster(tmp_path, kafka.bootstrap_servers, size, **overrides)
        made.append(c)
        return c.start()

    yield make
    for c in made:
        c.stop()


def _owners(status: dict[str, Any]) -> list[str]:
    return [t["worker_id"] for t in status["tasks"]]


def _is_leader(worker: Any) -> bool:
    """Whether the worker leads its group now: the role it last logged joining as (it logs a change only)."""
    joined = re.findall(r"Joined group \S+ as (the leader|a follower)", worker.log_path.read_text(errors="replace"))
    return bool(joined) and joined[-1] == "the leader"


def test_tasks_spread_and_survive_a_killed_worker_without_losing_records(
    cluster: Any, kafka: KafkaBroker, postgres_db: str
) -> None:
    """About 13 s of traffic per source task (20 s with ``SLUICE_TEST_FULL_SIZES=1``): the worker is
    killed once rows of every task reach the table, and the survivors' sources still write while the
    killed worker's tasks move (the session timeout and the delay, about 7 s); the moved source task
    then writes the rest of its sequence from its committed offset."""
    c: Cluster = cluster(3, **FAILOVER)
    topic = unique_topic_name("dist")
    create_topic(kafka.bootstrap_servers, topic, partitions=6)
    per_task, rate = size(2000, 3000), 150
    c.put_config(
        c.workers[0],
        "seq",
        {
            "connector.class": "SequenceSource",
            "tasks.max": "3",
            "topic": topic,
            "sequence.count": str(per_task),
            "sequence.rate": str(rate),
            "sequence.batch.size": "25",
        },
    )
    c.put_config(
        c.workers[1],
        "to-db",
        {
            "connector.class": "JdbcSink",
            "tasks.max": "3",
            "topics": topic,
            "connection.url": postgres_db,
            "table.name.format": "seq_rows",
            "insert.mode": "upsert",
            "pk.mode": "record_value",
            "pk.fields": "task,seq",
            "auto.create": "true",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        },
    )
    source = c.wait_running("seq", 3)
    sink = c.wait_running("to-db", 3)

    # Spread: each connector's three tasks on three different workers, two tasks per worker.
    assert len(set(_owners(source))) == 3, source
    assert len(set(_owners(sink))) == 3, sink
    per_worker = Counter(_owners(source) + _owners(sink))
    assert sorted(per_worker.values()) == [2, 2, 2], per_worker

    def rows() -> list[tuple[Any, ...]]:
        try:
            return sql(postgres_db, "SELECT task, count(DISTINCT seq), min(seq), max(seq) FROM seq_rows GROUP BY task ORDER BY task")
        except psycopg.errors.UndefinedTable:  # the sink creates the table with its first records
            return []

    # Under load: records of every source task flow through both connectors into the table.
    wait_for(rows, lambda r: [t for t, *_ in r] == [0, 1, 2], timeout=60, what="rows of every source task in the table")
    victim = c.worker_by_id(source["tasks"][0]["worker_id"])
    survivor = next(w for w in c.workers if w is not victim)
    victim.kill()
    killed_at = time.monotonic()

    def moved(name: str) -> bool:
        body = c.status(survivor, name)
        return all(t["state"] == "RUNNING" and not victim.url.endswith(t["worker_id"]) for t in body.get("tasks", [])) and (
            len(body.get("tasks", [])) == 3
        )

    wait_for(lambda: moved("seq") and moved("to-db"), bool, timeout=60, what="tasks moved off the killed worker")
    took = time.monotonic() - killed_at
    budget = (FAILOVER_DELAY_MS + SESSION_TIMEOUT_MS) / 1000
    print(f"tasks resumed on the surviving workers {took:.1f}s after the SIGKILL (delay + session timeout = {budget:.0f}s)")
    # Detection takes the session timeout, reassignment the delay; allow a few seconds for the
    # group rebalance and the tasks' start-up (a new Python process per task, about a second
    # each on this 2-core machine, more when it is loaded).
    assert took <= budget + 6, f"took {took:.1f}s"

    # No record lost: every (task, seq) of every source task reaches the table.
    final = wait_for(
        rows, lambda r: r == [(t, per_task, 0, per_task - 1) for t in range(3)], timeout=120, what="every record in the table"
    )
    assert final == [(t, per_task, 0, per_task - 1) for t in range(3)]


def test_untouched_connectors_keep_running_while_others_come_and_go(cluster: Any, kafka: KafkaBroker, tmp_path: Path) -> None:
    c: Cluster = cluster(3)
    topic = unique_topic_name("dist-steady")
    create_topic(kafka.bootstrap_servers, topic, partitions=3)

    def counting(name: str, tasks: int, rate: str = "20") -> dict[str, Any]:
        return {
            "connector.class": "tests.plugins.counting.CountingSequenceSource",
            "tasks.max": str(tasks),
            "topic": topic,
            "sequence.rate": rate,
            "starts.file": str(tmp_path / f"{name}.starts"),
        }

    def starts(name: str) -> Counter[str]:
        path = tmp_path / f"{name}.starts"
        return Counter(path.read_text().split()) if path.exists() else Counter()

    c.put_config(c.workers[0], "steady", counting("steady", 3))
    before = c.wait_running("steady", 3)
    assert starts("steady") == Counter({"0": 1, "1": 1, "2": 1})

    # Add, reconfigure and delete other connectors, through different workers.
    c.put_config(c.workers[1], "other", counting("other", 3))
    c.wait_running("other", 3)
    c.put_config(c.workers[2], "third", counting("third", 2))
    c.wait_running("third", 2)
    c.put_config(c.workers[0], "third", counting("third", 2, rate="40"))  # new config: its tasks restart
    wait_for(lambda: starts("third"), lambda s: s == Counter({"0": 2, "1": 2}), timeout=30, what="third restarted")
    c.wait_running("third", 2)
    response = c.request(c.workers[1], "DELETE", "/connectors/other")
    assert response.status_code == 204, response.text
    wait_for(lambda: c.status(c.workers[2], "other"), lambda b: b.get("http") == 404, timeout=30, what="other deleted")
    time.sleep(2)

    after = c.wait_running("steady", 3)
    assert starts("steady") == Counter({"0": 1, "1": 1, "2": 1}), "an untouched connector's tasks were restarted"
    assert _owners(after) == _owners(before)
    assert starts("other") == Counter({"0": 1, "1": 1, "2": 1})


def test_a_follower_forwards_writes_and_every_worker_reports_the_same_status(cluster: Any, kafka: KafkaBroker) -> None:
    c: Cluster = cluster(3)
    topic = unique_topic_name("dist-fwd")
    base = {"connector.class": "SequenceSource", "tasks.max": "2", "topic": topic, "sequence.rate": "10"}
    created = c.request(c.workers[2], "POST", "/connectors", json={"name": "fwd", "config": base})
    assert created.status_code == 201, created.text
    assert created.headers["Location"] == "/connectors/fwd"
    c.wait_running("fwd", 2)

    # Writes through each worker in turn: at least two of them are followers that forward. (Small
    # batches: at 10 records/s a task polls a batch for batch/10 s, and a pause waits for the poll.)
    for i, worker in enumerate(c.workers):
        c.put_config(worker, "fwd", {**base, "sequence.batch.size": str(1 + i)})
        for other in c.workers:
            wait_for(
                lambda other=other: httpx.get(f"{other.url}/connectors/fwd/config", timeout=10).json(),
                lambda cfg, i=i: cfg.get("sequence.batch.size") == str(1 + i),
                timeout=30,
                what=f"config written through worker {i} visible on {other.url}",
            )
    c.wait_running("fwd", 2)

    paused = c.request(c.workers[1], "PUT", "/connectors/fwd/pause")
    assert paused.status_code == 202

    def every_status() -> list[dict[str, Any]]:
        return [c.status(w, "fwd") for w in c.workers]

    def agreed_paused(bodies: list[dict[str, Any]]) -> bool:
        first = bodies[0]
        return all(b == first for b in bodies) and first["connector"]["state"] == "PAUSED" and all(
            t["state"] == "PAUSED" for t in first["tasks"]
        )

    wait_for(every_status, agreed_paused, timeout=30, what="every worker reporting PAUSED")

    # An unknown connector is a 404 from every worker, forwarded or not.
    for worker in c.workers:
        assert c.request(worker, "DELETE", "/connectors/nope").status_code == 404
    # A config error is reported by the leader and passed on unchanged.
    bad = c.request(c.workers[0], "PUT", "/connectors/bad/config", json={"connector.class": "SequenceSource", "tasks.max": "0"})
    assert bad.status_code == 400 and "tasks.max" in bad.json()["message"], bad.text


def test_a_failed_task_restarts_automatically_and_status_shows_the_attempts(
    cluster: Any, kafka: KafkaBroker, tmp_path: Path
) -> None:
    c: Cluster = cluster(1, **{"task.restart.max.attempts": "2", "task.restart.backoff.initial.ms": "500"})
    flag = tmp_path / "fail"
    flag.touch()
    config = {
        "connector.class": "tests.plugins.controllable.ControllableSource",
        "topic": unique_topic_name("dist-restart"),
        "fail.flag": str(flag),
    }
    c.put_config(c.workers[0], "flaky", config)
    seen: list[dict[str, Any]] = []

    def task_state() -> dict[str, Any]:
        body = c.status(c.workers[0], "flaky")
        task = (body.get("tasks") or [{}])[0]
        if task and (not seen or seen[-1] != task):
            seen.append(task)
        return task

    final = wait_for(task_state, lambda t: t.get("state") == "FAILED", timeout=30, what="FAILED after the restart budget")
    attempts = [t.get("restart_attempt") for t in seen if t.get("state") == "RESTARTING"]
    assert attempts == [1, 2], seen
    assert all(t.get("restart_attempts_max") == 2 for t in seen if t.get("state") == "RESTARTING")
    assert "poll failed" in final["trace"]

    # Fixed: an explicit restart runs it again with a fresh budget.
    flag.unlink()
    restarted = c.request(c.workers[0], "POST", "/connectors/flaky/restart", params={"includeTasks": "true", "onlyFailed": "true"})
    assert restarted.status_code == 202, restarted.text
    c.wait_running("flaky", 1)


def test_a_misconfigured_internal_topic_stops_the_worker_with_a_clear_error(kafka: KafkaBroker, tmp_path: Path) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    group = unique_topic_name("badcfg")
    admin.create_topics([NewTopic(f"{group}-configs", 1, 1, config={"cleanup.policy": "delete"})])[f"{group}-configs"].result(30)
    props = tmp_path / "worker.properties"
    props.write_text(
        "\n".join(
            [
                f"bootstrap.servers={kafka.bootstrap_servers}",
                f"group.id={group}",
                f"config.storage.topic={group}-configs",
                f"offset.storage.topic={group}-offsets",
                f"status.storage.topic={group}-status",
                "config.storage.replication.factor=1",
                "offset.storage.replication.factor=1",
                "status.storage.replication.factor=1",
                "listeners=http://127.0.0.1:0",
            ]
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "sluice.cli", "distributed", str(props)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert f"Topic '{group}-configs' supplied via the 'config.storage.topic' property" in done.stderr
    assert "cleanup.policy=compact" in done.stderr


def test_a_frozen_worker_does_not_write_after_its_tasks_moved(cluster: Any, kafka: KafkaBroker) -> None:
    """SIGSTOP a worker past the session timeout and the delay, then SIGCONT it: its task runs
    elsewhere meanwhile, and the thawed worker must not write another record for it."""
    c: Cluster = cluster(2, **FAILOVER)
    topic = unique_topic_name("dist-frozen")
    create_topic(kafka.bootstrap_servers, topic, partitions=1)  # one partition: the topic is the write order
    batch = 5
    c.put_config(
        c.workers[0],
        "seq",
        {"connector.class": "SequenceSource", "tasks.max": "2", "topic": topic, "sequence.rate": "100", "sequence.batch.size": str(batch)},
    )
    status = c.wait_running("seq", 2)
    victim = c.worker_by_id(status["tasks"][0]["worker_id"])
    other = next(w for w in c.workers if w is not victim)

    def committed(body: dict[str, Any]) -> bool:
        return sorted(o["partition"]["task"] for o in body.get("offsets", [])) == [0, 1]

    # Records flowing: both tasks have written and committed offsets (the new owner resumes from one).
    wait_for(lambda: c.request(other, "GET", "/connectors/seq/offsets").json(), committed, timeout=30, what="offsets of both tasks")
    assert victim.proc is not None
    victim.proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(
            lambda: c.status(other, "seq"),
            lambda b: all(t["state"] == "RUNNING" and other.url.endswith(t["worker_id"]) for t in b["tasks"]),
            timeout=60,
            what="both tasks on the other worker",
        )
        time.sleep(1)
    finally:
        victim.proc.send_signal(signal.SIGCONT)

    def rejoined(log: str) -> bool:
        # The thawed worker notices, stops its tasks, and rejoins (and may get work back).
        lost = max(log.rfind("Lost contact with group"), log.rfind("unresponsive"))
        return lost >= 0 and "In contact with group" in log[lost:]

    wait_for(lambda: victim.log(200_000), rejoined, timeout=60, what="the thawed worker noticing and rejoining")
    assert "Lost contact with group" in victim.log() or "unresponsive" in victim.log(), victim.log()
    c.wait_running("seq", 2, on=other)
    # One partition, so the topic is the order of writes. With one writer at a time, each task's
    # numbers only go up by one, or step back where a new owner resumed from the committed
    # offset. A second writer shows as a jump forward: the old writer's run continuing after the
    # new owner started. The frozen worker polls and commits nothing once thawed; what its
    # producer had already queued at the instant of the SIGSTOP may still go out (without
    # exactly-once fencing Kafka Connect has the same window), so allow at most two batches.
    records = consume_all(kafka.bootstrap_servers, topic, 1, timeout=30, settle=2.0)
    by_task: dict[int, list[int]] = {}
    for record in records:
        task, seq = (int(x) for x in record.key.decode().split("-"))
        by_task.setdefault(task, []).append(seq)
    assert sorted(by_task) == [0, 1]
    for task, seqs in by_task.items():
        late = 0
        for i in range(1, len(seqs)):
            if seqs[i] > seqs[i - 1] + 1:  # a jump forward: count the foreign run that follows
                j = i
                while j + 1 < len(seqs) and seqs[j + 1] == seqs[j] + 1:
                    j += 1
                late += j - i + 1
        assert late <= 2 * batch, f"task {task}: {late} records written by a second writer: {seqs}"
        assert set(range(max(seqs) + 1)) <= set(seqs), f"task {task}: numbers missing"


def test_writes_work_again_after_the_leader_dies(cluster: Any, kafka: KafkaBroker) -> None:
    c: Cluster = cluster(2, **FAILOVER)
    config = {"connector.class": "SequenceSource", "tasks.max": "1", "topic": unique_topic_name("dist-leader"), "sequence.rate": "5"}
    c.put_config(c.workers[0], "first", config)
    c.wait_running("first", 1)
    leaders = [w for w in c.workers if "Became the leader" in w.log_path.read_text(errors="replace")]
    assert leaders, "no worker logged its leadership"
    # The workers start side by side, so either may have led for a while: the leader is the one
    # whose last role is leader.
    leader = next((w for w in c.workers if _is_leader(w)), None)
    assert leader is not None and leader in leaders, [w.log() for w in c.workers]
    follower = next(w for w in c.workers if w is not leader)
    leader.kill()
    # Until the group notices, the follower forwards to a dead leader: 409 with Retry-After.
    early = httpx.put(f"{follower.url}/connectors/second/config", json=config, timeout=30)
    if early.status_code == 409:
        assert early.headers.get("Retry-After") == "1"
    c.put_config(follower, "second", config)  # retries the 409s until the follower leads
    c.wait_running("second", 1, on=follower, timeout=60)
    c.wait_running("first", 1, on=follower, timeout=60)


def test_active_topics_answer_the_same_on_every_worker_and_reset_from_any(cluster: Any, kafka: KafkaBroker) -> None:
    c: Cluster = cluster(2)
    topic = unique_topic_name("dist-topics")
    create_topic(kafka.bootstrap_servers, topic)
    name = "seq-topics"
    # Small batches: at 50 records/s the default batch (1000) takes 20 s to poll, and the topic is
    # used, and a pause done, only once a poll returns.
    seq = {"connector.class": "SequenceSource", "tasks.max": "1", "topic": topic, "sequence.rate": "50", "sequence.batch.size": "5"}
    c.put_config(c.workers[0], name, seq)
    status = c.wait_running(name, 1)
    runs_it = c.worker_by_id(status["tasks"][0]["worker_id"])
    other = next(w for w in c.workers if w is not runs_it)

    def topics(worker: Any) -> list[str]:
        response = c.request(worker, "GET", f"/connectors/{name}/topics")
        assert response.status_code == 200, response.text
        return list(response.json()[name]["topics"])

    for worker in c.workers:
        wait_for(lambda w=worker: topics(w), lambda t: t == [topic], timeout=30, what=f"the active topic on {worker.url}")

    # Paused, nothing uses the topic: a reset taken by the worker that does not run the task holds everywhere.
    assert c.request(other, "PUT", f"/connectors/{name}/pause").status_code == 202
    wait_for(lambda: c.status(runs_it, name)["tasks"][0]["state"], lambda s: s == "PAUSED", timeout=30, what="the task paused")
    assert c.request(other, "PUT", f"/connectors/{name}/topics/reset").status_code == 202
    for worker in c.workers:
        wait_for(lambda w=worker: topics(w), lambda t: t == [], timeout=30, what=f"the reset on {worker.url}")
    time.sleep(2)  # a few herder ticks: the running worker does not bring the topic back on its own
    assert topics(runs_it) == [] and topics(other) == []

    # Resumed, the task uses the topic again and every worker shows it again.
    assert c.request(other, "PUT", f"/connectors/{name}/resume").status_code == 202
    for worker in c.workers:
        wait_for(lambda w=worker: topics(w), lambda t: t == [topic], timeout=30, what=f"the topic back on {worker.url}")
