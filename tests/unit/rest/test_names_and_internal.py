"""Connector names that a URL, a log or a terminal would show as something else are refused, and
the internal task-config route tells nothing about which names exist."""

from __future__ import annotations

import base64
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

STOPPED = "STOPPED"


def create(client: TestClient, name: str) -> tuple[int, dict]:
    response = client.post(
        "/connectors",
        json={"name": name, "config": {"connector.class": "FileStreamSource", "file": "/dev/null", "topic": "t"}, "initial_state": STOPPED},
    )
    return response.status_code, response.json()


@pytest.mark.parametrize(
    "name",
    [".", "..", "a/b", "a\\b", "evil\u202etxt.exe", "zero\u200bwidth", "line\u2028break", "tab\tname", "cafe\u0301", "x" * 256],
)
def test_names_a_url_or_terminal_would_change_are_refused(client: TestClient, name: str) -> None:
    status, body = create(client, name)
    assert status == 400, body
    assert body["error_code"] == 400
    assert "name" in body["message"]
    assert client.get("/connectors").json() == []


@pytest.mark.parametrize("name", ["orders", "orders.v2-eu_1", "café", "名前", "with space", "..a", "a" * 255])
def test_ordinary_names_are_accepted_and_reachable(client: TestClient, name: str) -> None:
    status, body = create(client, name)
    assert status == 201, body
    assert client.get("/connectors").json() == [name]
    assert client.get(f"/connectors/{quote(name, safe='')}/config").status_code == 200
    assert client.delete(f"/connectors/{quote(name, safe='')}").status_code == 204


def test_internal_task_route_answers_alike_for_existing_and_missing_names(make_client) -> None:
    token = base64.b64encode(b"alice:pw").decode()
    client = make_client(**{"rest.auth.basic.users": "alice:pw"})
    admin = {"Authorization": f"Basic {token}"}
    assert client.post(
        "/connectors",
        json={"name": "exists", "config": {"connector.class": "FileStreamSource", "file": "/dev/null", "topic": "t"}, "initial_state": STOPPED},
        headers=admin,
    ).status_code == 201
    signed = {"X-Connect-Authorization": "Zm9v", "Content-Type": "application/json"}
    answers = []
    for name in ("exists", "missing"):
        for headers in (signed, {**signed, **admin}):
            response = client.post(f"/connectors/{name}/tasks", content=b"[]", headers=headers)
            answers.append((response.status_code, response.json()["message"]))
    assert len(set(answers)) == 1, answers
    assert answers[0][0] == 403
