"""The live tap (``POST /connectors/{name}/tap``) on a two-worker cluster with REST authentication,
tasks in task host processes: a source's records after its transforms and converters, gathered
from the worker that runs them when another worker is asked; a sink's records as its task gets
them. Also what the console's overview asks of a cluster: every worker's health
(``GET /cluster?health=true``) and every worker's metrics (``GET /cluster/metrics``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.distributed_helpers import Cluster, wait_for
from tests.integration.kafka_helpers import OutgoingRecord, create_topic, produce, unique_topic_name
from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

ADMIN = ("tap-admin", "tap-admin-pw")


@pytest.fixture(scope="module")
def cluster(kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Authentication on: a tap (and /cluster's questions) reach the other worker with the caller's credentials.
    c = Cluster(
        tmp_path_factory.mktemp("tap"),
        kafka.bootstrap_servers,
        2,
        auth=ADMIN,
        **{
            "rest.auth.basic.users": f"{ADMIN[0]}:{ADMIN[1]}",
            "rest.auth.roles": f"{ADMIN[0]}:admin",
            "metrics.history.interval.ms": "1000",  # the console's charts: a sample a second
        },
    )
    c.start()
    yield c
    c.stop()


def _tap(c: Cluster, worker: WorkerProcess, name: str, count: int, timeout: float = 20) -> dict[str, Any]:
    response = c.request(worker, "POST", f"/connectors/{name}/tap", params={"count": count, "timeout": timeout})
    assert response.status_code == 200, response.text
    return dict(response.json())


def _cluster_views(c: Cluster) -> list[dict[str, Any]] | None:
    """Every worker's ``GET /cluster`` once all list the same two workers and one leader, else ``None``."""
    answers = [c.request(w, "GET", "/cluster") for w in c.workers]
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    views = [dict(a.json()) for a in answers]
    same = [{k: v[k] for k in ("mode", "leader", "workers")} for v in views]
    if len(views[0]["workers"]) != 2 or any(s != same[0] for s in same) or views[0]["mode"] != "distributed":
        return None
    return views


def _two_sequences(topic: str) -> dict[str, str]:
    """Two sequence tasks (one on each worker, as the assignor spreads them), 20 records/s each in pairs."""
    return {
        "connector.class": "SequenceSource",
        "tasks.max": "2",
        "topic": topic,
        "sequence.rate": "20",
        "sequence.batch.size": "2",
    }


def test_a_sources_records_come_after_its_transforms_from_whichever_worker_runs_them(
    cluster: Cluster, kafka: KafkaBroker
) -> None:
    c, topic = cluster, unique_topic_name("tapped")
    config = {
        **_two_sequences(topic),
        "transforms": "route",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": "(.*)",
        "transforms.route.replacement": "$1-routed",
    }
    c.put_config(c.workers[0], "tapped", config)
    status = c.wait_running("tapped", 2)
    owners = {t["id"]: t["worker_id"] for t in status["tasks"]}
    # GET /cluster: both workers, exactly one leader, the same answer from either worker.
    views = wait_for(
        lambda: _cluster_views(c), bool, timeout=20, what="both workers to report the same two-worker cluster"
    )
    assert views is not None
    assert {w["id"] for w in views[0]["workers"]} == set(owners.values()) and len(views[0]["workers"]) == 2, views
    assert [w["id"] for w in views[0]["workers"] if w["leader"]] == [views[0]["leader"]], views
    assert all(c.workers[i].url.endswith(v["worker_id"]) for i, v in enumerate(views)), views
    # Ask a worker that does not run task 0: its records can only come from the other worker.
    asked = next(w for w in c.workers if not w.url.endswith(owners[0]))
    body = _tap(c, asked, "tapped", 12)
    assert body["complete"] and body["unreachable"] == [] and len(body["records"]) == 12, body
    assert {r["topic"] for r in body["records"]} == {f"{topic}-routed"}
    assert 0 in {r["task"] for r in body["records"]}
    for record in body["records"]:
        value = record["value"]
        assert set(value) == {"task", "seq", "payload"} and value["task"] == record["task"], record
        assert record["key"] == f"{value['task']}-{value['seq']}"
    # Nobody taps any more: the tasks keep running, the next tap starts afresh.
    assert len(_tap(c, c.workers[0], "tapped", 2)["records"]) == 2
    c.request(c.workers[0], "DELETE", "/connectors/tapped")


def test_a_sinks_records_come_decoded_with_their_coordinates(cluster: Cluster, kafka: KafkaBroker, tmp_path: Path) -> None:
    c, topic = cluster, unique_topic_name("tapsink")
    create_topic(kafka.bootstrap_servers, topic)
    config = {
        "connector.class": "FileStreamSink",
        "topics": topic,
        "file": str(tmp_path / "out.txt"),
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
    }
    c.put_config(c.workers[0], "tapsink", config)
    c.wait_running("tapsink", 1)
    answers: list[dict[str, Any]] = []
    tapping = threading.Thread(target=lambda: answers.append(_tap(c, c.workers[1], "tapsink", 3)))
    tapping.start()
    time.sleep(2)  # the tap is subscribed before the records exist
    records = [OutgoingRecord(b'{"order": %d, "note": "x"}' % i, key=f"k{i}", headers=[("origin", b"test")]) for i in range(3)]
    produce(kafka.bootstrap_servers, topic, records)
    tapping.join(30)
    [body] = answers
    assert [(r["offset"], r["key"], r["value"]) for r in body["records"]] == [
        (0, "k0", {"order": 0, "note": "x"}),
        (1, "k1", {"order": 1, "note": "x"}),
        (2, "k2", {"order": 2, "note": "x"}),
    ], body
    assert body["records"][0]["topic"] == topic and body["records"][0]["partition"] == 0
    assert body["records"][0]["headers"] == [{"key": "origin", "value": "test"}]
    wait_for(lambda: (tmp_path / "out.txt").exists(), lambda found: found, what="the sink file")


def test_a_tap_is_bounded_and_names_what_it_cannot_do(cluster: Cluster) -> None:
    c = cluster
    assert c.request(c.workers[0], "POST", "/connectors/nothing-here/tap").status_code == 404
    for params in ({"count": 0}, {"count": 1000}, {"timeout": 0}, {"timeout": 600}):
        response = c.request(c.workers[0], "POST", "/connectors/nothing-here/tap", params=params)
        assert response.status_code in (400, 422), (params, response.text)


def test_any_worker_reports_every_workers_health_and_metrics(cluster: Cluster) -> None:
    c, topic = cluster, unique_topic_name("probed")
    c.put_config(c.workers[0], "probed", _two_sequences(topic))
    status = c.wait_running("probed", 2)
    owners = {t["id"]: t["worker_id"] for t in status["tasks"]}
    asked = c.workers[1]
    view = c.request(asked, "GET", "/cluster", params={"health": "true"}).json()
    assert {w["id"]: w["health"]["status"] for w in view["workers"]} == {
        w.url.removeprefix("http://"): "healthy" for w in c.workers
    }, view

    family = "kafka_connect_source_task_metrics_source_record_write_total"

    def written(worker_text: str | None, task: int) -> bool:
        return worker_text is not None and f'{family}{{connector="probed",task="{task}"}}' in worker_text

    def gathered() -> dict[str, str | None]:
        answer = c.request(asked, "GET", "/cluster/metrics", params={"name": family})
        assert answer.status_code == 200, answer.text
        return {w["id"]: w["metrics"] for w in answer.json()["workers"]}

    texts = wait_for(gathered, lambda t: all(written(t.get(owners[i]), i) for i in (0, 1)), timeout=20, what="both tasks' metrics")
    assert set(texts) == {w.url.removeprefix("http://") for w in c.workers}
    for text in texts.values():  # the name filter: only that family
        assert text is not None and all(line.startswith(("#", family)) for line in text.splitlines() if line), text
    assert c.request(asked, "GET", "/cluster/metrics", auth=None).status_code == 401

    # The connector's history: each worker's samples of its own task, summed instant by instant.
    def history(worker: WorkerProcess, local: bool = False) -> dict[str, Any]:
        headers = {"X-Sluice-Forwarded": "true"} if local else {}  # as another worker asks: its own part only
        answer = c.request(worker, "GET", "/connectors/probed/metrics/history", headers=headers)
        assert answer.status_code == 200, answer.text
        return dict(answer.json())

    wait_for(lambda: history(asked)["points"], lambda p: len(p) >= 4, timeout=20, what="4 samples of the history")
    parts = [{p["at"]: p for p in history(w, local=True)["points"]} for w in c.workers]
    merged = history(asked)
    assert merged["interval_ms"] == 1000 and merged["unreachable"] == [], merged
    common = [p for p in merged["points"] if all(p["at"] in part for part in parts)]
    assert len(common) >= 3, (merged, parts)
    for point in common:
        assert point["out"] == sum(part[point["at"]]["out"] for part in parts), (point, parts)
        assert point["lag"] is None  # a source has no consumer lag
    assert all(any(p["out"] > 0 for p in part.values()) for part in parts), parts  # both workers' tasks counted

    # A worker that does not answer is named, and the rest of the answer stands.
    frozen = c.workers[0]
    frozen.freeze()
    try:
        view = c.request(asked, "GET", "/cluster", params={"health": "true"}).json()
    finally:
        frozen.thaw()
    health = {w["id"]: w["health"] for w in view["workers"]}
    assert health[frozen.url.removeprefix("http://")]["status"] == "unreachable", health
    assert health[asked.url.removeprefix("http://")]["status"] == "healthy", health
    c.request(c.workers[0], "DELETE", "/connectors/probed")
