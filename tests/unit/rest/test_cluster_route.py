"""``GET /cluster`` (Sluice's own): a standalone worker is a cluster of one without a leader; a
cluster member answers from the leader's assignment (the two-worker case runs for real in
``tests/integration/test_live_tap.py``)."""

from __future__ import annotations

from types import SimpleNamespace

from fastapi.testclient import TestClient

from sluice.worker.distributed.assignor import CONNECTOR
from sluice.worker.distributed.cluster import ClusterAssignment
from sluice.worker.herder.stores.kafka_config_store import Assignment


def test_a_standalone_worker_is_alone_and_leaderless(client: TestClient) -> None:
    r = client.get("/cluster")
    assert r.status_code == 200, r.text
    body = r.json()
    worker_id = body["worker_id"]
    assert worker_id and worker_id.endswith(":8083"), body
    assert body == {
        "mode": "standalone",
        "worker_id": worker_id,
        "leader": None,
        "workers": [{"id": worker_id, "url": f"http://{worker_id}", "leader": False}],
    }


def _member(worker_id: str, assignment: Assignment | None) -> ClusterAssignment:
    """A cluster strategy reduced to what ``cluster()`` reads: its id, its URL and the store's snapshot."""
    member = ClusterAssignment.__new__(ClusterAssignment)
    member._worker_id = worker_id
    member.url = f"http://{worker_id}"
    member.configs = SimpleNamespace(snapshot=lambda: SimpleNamespace(assignment=assignment))  # type: ignore[assignment]
    return member


def test_a_cluster_member_lists_the_live_workers_of_the_plan_and_its_leader() -> None:
    plan = Assignment(
        generation=7,
        leader="b:8083",
        leader_url="http://b:8083",
        owners={"a:8083": {("c", CONNECTOR)}, "b:8083": {("c", 0)}, "gone:8083": {("d", 0)}},
        departed={"gone:8083": 1.0},  # its work is held for its return: not a live worker
        urls={"a:8083": "http://a:8083", "b:8083": "http://b:8083", "gone:8083": "http://gone:8083"},
    )
    answers = [_member(w, plan).cluster_view().to_json() for w in ("a:8083", "b:8083")]
    for worker_id, answer in zip(("a:8083", "b:8083"), answers, strict=True):
        assert answer == {
            "mode": "distributed",
            "worker_id": worker_id,
            "leader": "b:8083",
            "workers": [
                {"id": "a:8083", "url": "http://a:8083", "leader": False},
                {"id": "b:8083", "url": "http://b:8083", "leader": True},
            ],
        }


def test_a_member_before_the_first_plan_knows_only_itself() -> None:
    assert _member("a:8083", None).cluster_view().to_json() == {
        "mode": "distributed",
        "worker_id": "a:8083",
        "leader": None,
        "workers": [{"id": "a:8083", "url": "http://a:8083", "leader": False}],
    }
