"""``GET /backfills/kinds`` (the spec as a form) and ``POST /backfills/validate`` (submit's checks, nothing stored)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from sluice.worker.backfill.handoff_guard import HandoffGuard
from sluice.worker.backfill.models import KINDS
from tests.unit.backfill.test_handoff_guard import CDC, Directory


def jdbc_spec(**source: Any) -> dict[str, Any]:
    return {
        "id": "orders",
        "kind": "jdbc_to_topic",
        "source": {"connection.url": "jdbc:postgresql://db:5432/shop", "table": "orders", **source},
        "target": {"topic": "orders"},
    }


def test_kinds_describes_each_kind_as_a_form(client: TestClient) -> None:
    response = client.get("/backfills/kinds")
    assert response.status_code == 200, response.text
    forms = {form["kind"]: form for form in response.json()}
    assert list(forms) == list(KINDS)
    assert all(form["installed"] for form in forms.values())
    source = next(s for s in forms["jdbc_to_topic"]["sections"] if s["name"] == "source")
    password = next(f for f in source["fields"] if f["key"] == "source.connection.password")
    assert password["secret"] is True and password["path"] == ["source", "connection.password"]


def test_validate_names_each_bad_key_by_its_path_and_stores_nothing(client: TestClient) -> None:
    spec = jdbc_spec(**{"num.partitions": 0})
    del spec["source"]["connection.url"]
    response = client.post("/backfills/validate", json=spec)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["valid"] is False and body["warnings"] == []
    assert body["errors"][0] == {
        "key": "source.connection.url",
        "path": ["source", "connection.url"],
        "message": "Field required",
    }
    assert [e["key"] for e in body["errors"]] == ["source.connection.url", "source.num.partitions"]
    assert client.get("/backfills").json() == []
    # POST /backfills refuses the same spec with the same problems, in its own message.
    refused = client.post("/backfills", json=spec)
    assert refused.status_code == 400
    assert refused.json()["message"].startswith(
        "Invalid backfill spec: source.connection.url: Field required; source.num.partitions"
    )


def test_a_valid_spec_is_valid_and_neither_stored_nor_run(client: TestClient) -> None:
    body = client.post("/backfills/validate", json=jdbc_spec()).json()
    assert body == {"valid": True, "errors": [], "warnings": []}
    assert client.get("/backfills").json() == []
    assert client.get("/backfills/orders").status_code == 404


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"kind": "nope"}, ["kind"]),
        ({"id": "kinds"}, ["id"]),  # GET /backfills/kinds is the form, not a job
        ({"spark": {"conf": {"spark.jars": "/tmp/x.jar"}}}, ["spark", "conf"]),
        ({"schedule": {"cron": "every day"}}, ["schedule", "cron"]),
        ({"extra": 1}, ["extra"]),
    ],
)
def test_validate_and_submit_agree_on_the_key(client: TestClient, change: dict[str, Any], path: list[str]) -> None:
    spec = {**jdbc_spec(), **change}
    body = client.post("/backfills/validate", json=spec).json()
    assert body["valid"] is False
    assert body["errors"][0]["path"] == path, body
    refused = client.post("/backfills", json=spec)
    assert refused.status_code == 400
    assert refused.json()["message"].startswith(f"Invalid backfill spec: {'.'.join(path)}: "), refused.text
    assert client.get("/backfills").json() == []


def test_the_handoff_guard_refuses_on_target_topic_and_warns(client: TestClient) -> None:
    manager: Any = client.app.state.backfills  # type: ignore[attr-defined]
    spec = {**jdbc_spec(), "target": {"topic": "shop.public.orders"}}
    manager.handoff_guard = HandoffGuard(Directory({"shop-cdc": CDC}))
    body = client.post("/backfills/validate", json=spec).json()
    assert body["valid"] is False
    (error,) = body["errors"]
    assert error["path"] == ["target", "topic"] and error["key"] == "target.topic"
    assert error["message"].startswith("shop.public.orders is the topic of the PostgreSQL CDC connector shop-cdc")
    unwrapped = {
        **CDC,
        "transforms": "unwrap",
        "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
    }
    manager.handoff_guard = HandoffGuard(Directory({"shop-cdc": unwrapped}))
    body = client.post("/backfills/validate", json=spec).json()
    assert body["valid"] is True and body["errors"] == []
    (warning,) = body["warnings"]
    assert "ExtractNewRecordState" in warning
    assert client.get("/backfills").json() == []


def test_validate_takes_only_a_json_object(client: TestClient) -> None:
    assert client.post("/backfills/validate", json=[1, 2]).status_code == 400
    assert (
        client.post("/backfills/validate", content=b"{", headers={"Content-Type": "application/json"}).status_code
        == 400
    )
