"""How the REST layer answers for a cluster: no leader, a leader's error, internal requests."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from sluice.rest import create_app
from sluice.worker.distributed.forwarding import ForwardedError, request_headers
from sluice.worker.herder.api import NO_LEADER_MESSAGE, NoLeader
from sluice.worker.standalone import StandaloneHerder


class _ClusterLike(StandaloneHerder):
    seen_headers: dict[str, str]

    def delete_connector(self, name: str) -> None:
        raise NoLeader()

    def set_target_state(self, name: str, state: Any) -> None:
        raise ForwardedError(404, f"Connector {name} not found")

    def connectors(self) -> list[str]:
        self.seen_headers = dict(request_headers.get())
        return []


def _client(client: TestClient) -> tuple[TestClient, _ClusterLike]:
    herder: Any = client.app.state.herder  # type: ignore[attr-defined]
    cluster = _ClusterLike(herder.worker)
    cluster.start()
    return TestClient(create_app(cluster), raise_server_exceptions=False), cluster


def test_no_leader_is_a_409_with_retry_after(client: TestClient) -> None:
    api, _ = _client(client)
    response = api.delete("/connectors/x")
    assert response.status_code == 409
    assert response.headers["Retry-After"] == "1"
    assert response.json() == {"error_code": 409, "message": NO_LEADER_MESSAGE}


def test_the_leaders_error_is_passed_on_unchanged(client: TestClient) -> None:
    api, _ = _client(client)
    response = api.put("/connectors/x/pause")
    assert response.status_code == 404
    assert response.json() == {"error_code": 404, "message": "Connector x not found"}


def test_the_herder_sees_the_request_headers(client: TestClient) -> None:
    api, cluster = _client(client)
    assert api.get("/connectors", headers={"Authorization": "Bearer t"}).status_code == 200
    assert cluster.seen_headers.get("authorization") == "Bearer t"


def test_internal_task_configs_are_refused_by_a_standalone_worker(client: TestClient) -> None:
    # The same answer for a name that exists and one that does not: the route tells nothing.
    unknown = client.post("/connectors/x/tasks", content=b"[]", headers={"Content-Type": "application/json"})
    assert unknown.status_code == 403
    created = client.put("/connectors/x/config", json={"connector.class": "FileStreamSource", "topic": "t", "file": "/dev/null"})
    assert created.status_code == 201, created.text
    response = client.post("/connectors/x/tasks", content=b"[]", headers={"Content-Type": "application/json"})
    assert response.status_code == 403
    assert "distributed" in response.json()["message"]


def test_a_leader_that_stepped_down_answers_retry_after_through_the_follower() -> None:
    """A follower forwards a write to the leader, which lost the leadership meanwhile and answers
    409 with Retry-After: the client must get the Retry-After too, or it takes the 409 as final
    (a CI run failed on exactly this while a new cluster settled)."""
    import httpx

    from sluice.worker.distributed.forwarding import Forwarder

    def leader(request: httpx.Request) -> httpx.Response:
        body = {"error_code": 409, "message": "This worker is not the leader (any more); retry the request"}
        if request.url.path == "/final":
            return httpx.Response(409, json={"error_code": 409, "message": "Connector x already exists"})
        return httpx.Response(409, json=body, headers={"Retry-After": "1"})

    forwarder = Forwarder()
    forwarder._client = httpx.Client(transport=httpx.MockTransport(leader))
    with pytest.raises(NoLeader, match="not the leader") as stepped_down:
        forwarder.send("http://leader:8083", "PUT", "/connectors/x/config", body={})
    assert stepped_down.value.retry_after_s == 1
    with pytest.raises(ForwardedError, match="already exists") as final:  # no Retry-After: the leader's last word
        forwarder.send("http://leader:8083", "PUT", "/final", body={})
    assert final.value.status == 409
