"""Grants that scope topics and consumer groups (issue #36, item 5), through the REST API.

A principal granted ``admin`` on ``orders-*`` with ``topics=orders-*|orders.dlq`` may create
connectors named ``orders-…`` that read and write only those topics; the scope is stamped into the
stored config whatever the body says, and cluster keys need the unrestricted admin.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from sluice.connectors.api import ConfigError
from sluice.rest.authz import AccessPolicy, parse_grants
from sluice.worker.config.connector_scope import ConnectorScope

SINK = "tests.plugins.scripted.ScriptedSink"
SOURCE = "tests.plugins.scripted.ScriptedSource"
USERS = "ops:o-pw,orders:or-pw,wide:w-pw"
ROLES = "ops:admin,orders:admin:orders-*;topics=orders-*|orders.dlq,wide:admin:*;topics=*"


def _as(user: str) -> dict[str, str]:
    password = {"ops": "o-pw", "orders": "or-pw", "wide": "w-pw"}[user]
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture
def client(make_client: Callable[..., TestClient], tmp_path: object) -> TestClient:
    return make_client(
        **{
            "rest.auth.basic.users": USERS,
            "rest.auth.roles": ROLES,
            "topic.creation.enable": "false",
            "connector.client.config.override.policy": "All",
        }
    )


def _sink(**extra: str) -> dict[str, str]:
    return {"connector.class": SINK, "topics": "orders-a", "journal": "/nonexistent/journal", **extra}


def test_grants_parse_scopes() -> None:
    grants = parse_grants("a:admin:orders-*;topics=orders-*|x;groups=legacy-*, b:admin, c:viewer:orders-*")
    assert grants[0].topics == ("orders-*", "x") and grants[0].groups == ("legacy-*",)
    assert grants[1].unrestricted and grants[2].topics is None
    policy = AccessPolicy(grants)
    assert policy.connector_scope("a", "orders-1") == ConnectorScope(("orders-*", "x"), ("legacy-*",))
    assert policy.connector_scope("b", "anything") == ConnectorScope()
    # A narrow grant without topics= reaches no topic at all.
    assert AccessPolicy(parse_grants("d:admin:orders-*")).connector_scope("d", "orders-1") == ConnectorScope(())


@pytest.mark.parametrize(
    "roles", ["a:viewer:x;topics=t", "a:admin:x;topics=", "a:admin:x;bogus=1", "a:admin:x;topics=a;topics=b"]
)
def test_malformed_scopes_stop_the_worker(roles: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_grants(roles)
    assert info.value.key == "rest.auth.roles"


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"topics": "pay-events"}, "topics"),
        (
            {"errors.deadletterqueue.topic.name": "pay-dlq", "errors.tolerance": "all"},
            "errors.deadletterqueue.topic.name",
        ),
        ({"consumer.override.group.id": "connect-payments-sink"}, "consumer.override.group.id"),
        ({"consumer.override.bootstrap.servers": "127.0.0.1:9"}, "consumer.override.bootstrap.servers"),
        (
            {
                "transforms": "r",
                "transforms.r.type": "org.apache.kafka.connect.transforms.RegexRouter",
                "transforms.r.regex": "(.*)",
                "transforms.r.replacement": "pay-$1",
            },
            "transforms.r.replacement",
        ),
    ],
)
def test_a_scoped_admin_cannot_reach_outside_its_topics(
    client: TestClient, extra: dict[str, str | None], key: str
) -> None:
    config = {k: v for k, v in {**_sink(), **extra}.items() if v is not None}
    r = client.put("/connectors/orders-spy/config", json=config, headers=_as("orders"))
    assert r.status_code == 400, r.text
    assert key in r.json()["message"]
    assert client.get("/connectors/orders-spy", headers=_as("ops")).status_code == 404


def test_the_scope_is_stamped_whatever_the_body_says(client: TestClient) -> None:
    forged = _sink(**{"sluice.scope.topics": "*"}, topics="pay-events")
    assert client.put("/connectors/orders-spy/config", json=forged, headers=_as("orders")).status_code == 400
    r = client.put("/connectors/orders-ok/config", json=_sink(**{"sluice.scope.topics": "*"}), headers=_as("orders"))
    assert r.status_code == 201, r.text
    stored = client.get("/connectors/orders-ok/config", headers=_as("ops")).json()
    assert stored["sluice.scope.topics"] == "orders-*,orders.dlq"
    # A merge-patch cannot delete it either.
    r = client.patch(
        "/connectors/orders-ok/config",
        json={"sluice.scope.topics": None, "topics": "pay-events"},
        headers=_as("orders"),
    )
    assert r.status_code == 400, r.text
    # The cluster admin's write clears it: the connector is then unrestricted.
    r = client.put("/connectors/orders-ok/config", json=_sink(topics="pay-events"), headers=_as("ops"))
    assert r.status_code == 200, r.text
    assert "sluice.scope.topics" not in client.get("/connectors/orders-ok/config", headers=_as("ops")).json()
    assert client.delete("/connectors/orders-ok", headers=_as("ops")).status_code == 204


def test_an_admin_on_every_connector_with_a_topic_list_is_still_scoped_for_cluster_keys(client: TestClient) -> None:
    r = client.post(
        "/connectors",
        json={
            "name": "x",
            "config": _sink(**{"producer.override.bootstrap.servers": "127.0.0.1:9"}),
            "initial_state": "STOPPED",
        },
        headers=_as("wide"),
    )
    assert r.status_code == 400, r.text
    assert "admin role on every connector" in r.json()["message"]


def test_no_connector_may_take_another_connectors_group(client: TestClient) -> None:
    r = client.post(
        "/connectors",
        json={"name": "payments-sink", "config": _sink(topics="pay-events"), "initial_state": "STOPPED"},
        headers=_as("ops"),
    )
    assert r.status_code == 201, r.text
    r = client.post(
        "/connectors",
        json={
            "name": "payments",
            "initial_state": "STOPPED",
            "config": _sink(topics="pay-events", **{"consumer.override.group.id": "connect-payments-sink"}),
        },
        headers=_as("ops"),
    )
    assert r.status_code == 400, r.text
    assert "consumer group of connector payments-sink" in r.json()["message"]
    assert client.delete("/connectors/payments-sink", headers=_as("ops")).status_code == 204


def test_a_scoped_admin_keeps_source_offsets_only_in_its_own_topics(client: TestClient) -> None:
    source = {"connector.class": SOURCE, "topic": "orders-a", "journal": "/nonexistent/journal"}
    outside = {**source, "offsets.storage.topic": "pay-offsets"}
    r = client.put("/connectors/orders-src/config", json=outside, headers=_as("orders"))
    assert r.status_code == 400, r.text
    assert "offsets.storage.topic: offsets topic 'pay-offsets' is outside the topics" in r.json()["message"]
    inside = {**source, "offsets.storage.topic": "orders-offsets"}
    assert client.put("/connectors/orders-src/config", json=inside, headers=_as("orders")).status_code == 201
