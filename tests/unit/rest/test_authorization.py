"""Roles per connector pattern, enforced from the route table, and the audit trail.

The role test walks the app's own routes (``app.routes``), so a route added without an entry in
``sluice.rest.authz.ACCESS_RULES`` is refused for every role and fails here before it ships.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.types import Receive, Scope, Send

from sluice.connectors.api import ConfigError
from sluice.rest.audit import AuditTopic, AuditTrail
from sluice.rest.authn import common_name
from sluice.rest.authz import ACCESS_RULES, Permission, effective_routes
from sluice.worker.standalone import StandaloneHerder

CONTROLLABLE = "tests.plugins.controllable.ControllableSource"
BILLING, ORDERS = "billing", "orders-1"

USERS = "viewer:v-pw,operator:o-pw,admin:a-pw,orders:or-pw,nobody:n-pw"
ROLES = "viewer:viewer,operator:operator,admin:admin,orders:operator:orders-*,orders:viewer:orders-*"
#: A connector config secret: it must reach the herder, never the audit trail.
SECRET = "hunter2-do-not-log"


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _config(**extra: str) -> dict[str, str]:
    # An hour between records: a resumed task starts, emits nothing and stops at once.
    return {"connector.class": CONTROLLABLE, "topic": "t", "fail.flag": "/nonexistent/flag", "interval.ms": "3600000", **extra}


def _worker(**extra: str) -> dict[str, str]:
    return {"rest.auth.basic.users": USERS, "rest.auth.roles": ROLES, "topic.creation.enable": "false", **extra}


@pytest.fixture(autouse=True)
def no_kafka(monkeypatch: pytest.MonkeyPatch) -> None:
    # GET / asks the cluster for its id; with no broker that is a 5 s timeout per call.
    monkeypatch.setattr(StandaloneHerder, "kafka_cluster_id", lambda self: "unit-test-cluster")


@pytest.fixture
def secured(make_client: Callable[..., TestClient]) -> TestClient:
    client = make_client(**_worker())
    for name in (BILLING, ORDERS):
        _restore(client, name)
    return client


def _restore(client: TestClient, name: str) -> None:
    """Put connector ``name`` back as the role test expects it: existing and STOPPED."""
    admin = _basic("admin", "a-pw")
    if client.get(f"/connectors/{name}", headers=admin).status_code == 404:
        r = client.post("/connectors", json={"name": name, "config": _config(), "initial_state": "STOPPED"}, headers=admin)
        assert r.status_code == 201, r.text
    assert client.put(f"/connectors/{name}/stop", headers=admin).status_code == 204


# -- every route × every role ------------------------------------------------------------------------


@dataclass(frozen=True)
class Actor:
    """Who calls, on which connector, and which permissions should let it through."""

    name: str
    headers: dict[str, str]
    connector: str
    worker_wide: frozenset[Permission]
    on_connector: frozenset[Permission]
    anonymous: bool = False


_ANY = frozenset({Permission.OPEN, Permission.LIST})
ACTORS = [
    Actor("viewer on *", _basic("viewer", "v-pw"), BILLING, _ANY | {Permission.VIEW}, _ANY | {Permission.VIEW}),
    Actor("operator on *", _basic("operator", "o-pw"), BILLING, _ANY | {Permission.VIEW},
          _ANY | {Permission.VIEW, Permission.OPERATE}),
    Actor("admin", _basic("admin", "a-pw"), BILLING, _ANY | {Permission.VIEW, Permission.ADMIN},
          _ANY | {Permission.VIEW, Permission.OPERATE, Permission.ADMIN}),
    Actor("operator on orders-* acting on billing", _basic("orders", "or-pw"), BILLING, _ANY, _ANY),
    Actor("operator on orders-* acting on orders-1", _basic("orders", "or-pw"), ORDERS, _ANY,
          _ANY | {Permission.VIEW, Permission.OPERATE}),
    Actor("principal without a grant", _basic("nobody", "n-pw"), BILLING, frozenset({Permission.OPEN}),
          frozenset({Permission.OPEN})),
    Actor("no credentials", {}, BILLING, frozenset({Permission.OPEN}), frozenset({Permission.OPEN}), anonymous=True),
]

#: Bodies that let an allowed call get past validation to the herder.
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/connectors"): {"name": "created-by-test", "config": _config(), "initial_state": "STOPPED"},
    ("PUT", "/connectors/{name}/config"): _config(),
    ("PATCH", "/connectors/{name}/config"): {"interval.ms": "3600001"},
    ("PATCH", "/connectors/{name}/offsets"): {"offsets": [{"partition": {"controllable": "main"}, "offset": {"n": 1}}]},
    ("PUT", "/connector-plugins/{plugin}/config/validate"): _config(),
    ("PUT", "/admin/loggers/{name}"): {"level": "INFO"},
    ("POST", "/backfills"): {},
    ("POST", "/backfills/validate"): {},
}


def _url(template: str, connector: str) -> str:
    name = connector if template.startswith("/connectors/") else "sluice.authz.test"
    return (
        template.replace("{name}", name).replace("{task}", "0").replace("{plugin}", CONTROLLABLE).replace("{job_id}", "no-such-job")
    )


def _expected(actor: Actor, method: str, template: str) -> str:
    rule = ACCESS_RULES.get((method, template))
    if rule is None:
        return "403"  # no access rule: refused for everyone
    if rule.permission is Permission.INTERNAL:  # no X-Connect-Authorization here
        return "401" if actor.anonymous else "403"
    allowed = actor.on_connector if rule.connector else actor.worker_wide
    if rule.permission in allowed:
        return "allowed"
    return "401" if actor.anonymous else "403"


def _route_table(app: FastAPI) -> list[tuple[str, str]]:
    return sorted(
        (method, route.path) for route in effective_routes(app.routes) for method in (route.methods or ()) if method != "HEAD"
    )


@pytest.mark.parametrize("actor", ACTORS, ids=lambda a: a.name)
def test_every_route_refuses_exactly_where_the_role_says(secured: TestClient, actor: Actor) -> None:
    routes = _route_table(secured.app)  # type: ignore[arg-type]
    assert len(routes) >= 38, routes
    wrong = []
    for method, template in routes:
        body = BODIES.get((method, template))
        r = secured.request(method, _url(template, actor.connector), json=body, headers=actor.headers)
        got = str(r.status_code) if r.status_code in (401, 403) else "allowed"
        expected = _expected(actor, method, template)
        if got != expected:
            wrong.append(f"{method} {template}: expected {expected}, got {r.status_code} {r.text[:200]}")
        if got in ("401", "403"):
            assert r.json()["error_code"] == r.status_code
        if got == "401":
            assert r.headers["www-authenticate"] == 'Basic realm="sluice"'
        if method != "GET":
            _restore(secured, actor.connector)
    assert not wrong, f"{actor.name}:\n" + "\n".join(wrong)


def test_the_rule_table_names_only_routes_that_exist(secured: TestClient) -> None:
    routes = set(_route_table(secured.app))  # type: ignore[arg-type]
    assert set(ACCESS_RULES) == routes, set(ACCESS_RULES) ^ routes


def test_a_route_without_a_rule_is_refused_for_everyone(secured: TestClient, make_client: Callable[..., TestClient]) -> None:
    for client in (secured, make_client()):
        app: FastAPI = client.app  # type: ignore[assignment]

        @app.get("/unruled")
        def unruled() -> dict[str, str]:
            return {"reached": "yes"}

        r = client.get("/unruled", headers=_basic("admin", "a-pw"))
        assert r.status_code == 403 and "no access rule" in r.json()["message"].lower(), r.text


def test_unknown_paths_and_methods_keep_their_status(secured: TestClient) -> None:
    admin = _basic("admin", "a-pw")
    assert secured.get("/no/such/path", headers=admin).status_code == 404
    assert secured.post("/connector-plugins", headers=admin).status_code == 405
    assert secured.get("/no/such/path").status_code == 401
    assert secured.post("/connector-plugins").status_code == 401
    assert secured.get("/health").status_code == 200


def test_signed_internal_requests_pass_to_the_herder_and_users_never_do(secured: TestClient) -> None:
    signed = {"X-Connect-Authorization": "Zm9v", "Content-Type": "application/json"}
    # Past the middleware: the standalone herder itself answers that this route is for clusters.
    r = secured.post(f"/connectors/{BILLING}/tasks", content=b"[]", headers=signed)
    assert r.status_code == 403 and "distributed" in r.json()["message"]
    r = secured.post(f"/connectors/{BILLING}/tasks", content=b"[]", headers=_basic("admin", "a-pw"))
    assert r.status_code == 403 and "internal" in r.json()["message"]


# -- principals --------------------------------------------------------------------------------------


def test_bearer_tokens_name_their_principal(make_client: Callable[..., TestClient]) -> None:
    client = make_client(**_worker(**{"rest.auth.bearer.tokens": "ci:tok-ci, legacy-token", "rest.auth.roles": "ci:viewer"}))
    _restore_as = {"Authorization": "Bearer legacy-token"}  # a bare token is principal "bearer", granted nothing
    assert client.get("/connectors", headers={"Authorization": "Bearer tok-ci"}).status_code == 200
    assert client.put(f"/connectors/{BILLING}/pause", headers={"Authorization": "Bearer tok-ci"}).status_code == 403
    refused = client.get("/connectors", headers=_restore_as)
    assert refused.status_code == 403 and "bearer" in refused.json()["message"]
    # The principal is not part of the secret.
    assert client.get("/connectors", headers={"Authorization": "Bearer ci:tok-ci"}).status_code == 401
    granted = make_client(**_worker(**{"rest.auth.bearer.tokens": "legacy-token", "rest.auth.roles": "bearer:admin"}))
    assert granted.put(f"/connectors/{BILLING}/config", json=_config(), headers=_restore_as).status_code == 201


@pytest.mark.parametrize("tokens", ["ci:", ":s3cr3t-x", "a:s3cr3t-y,b:s3cr3t-y"])
def test_malformed_bearer_tokens_stop_the_worker_without_quoting_them(make_client: Callable[..., TestClient], tokens: str) -> None:
    with pytest.raises(ConfigError) as error:
        make_client(**{"rest.auth.bearer.tokens": tokens})
    assert error.value.key == "rest.auth.bearer.tokens"
    assert "s3cr3t" not in str(error.value)


class _WithClientCertificate:
    """Stands in for the TLS server: puts a verified client certificate's subject into the scope."""

    def __init__(self, app: Any, subject: str, error: str | None = None) -> None:
        self.app, self.subject, self.error = app, subject, error

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            tls = {"client_cert_name": self.subject, "client_cert_error": self.error, "tls_version": 0x0304}
            scope = {**scope, "extensions": {**scope.get("extensions", {}), "tls": tls}}
        await self.app(scope, receive, send)


def test_a_client_certificate_cn_is_the_principal(secured: TestClient) -> None:
    app = secured.app
    as_carol = TestClient(_WithClientCertificate(app, "CN=carol,OU=Ops,O=Example"), raise_server_exceptions=False)
    as_operator = TestClient(_WithClientCertificate(app, "CN=operator,O=Example"), raise_server_exceptions=False)
    unverified = TestClient(_WithClientCertificate(app, "CN=operator", error="certificate has expired"), raise_server_exceptions=False)
    assert as_operator.put(f"/connectors/{BILLING}/resume").status_code == 202
    assert as_operator.put(f"/connectors/{BILLING}/config", json=_config()).status_code == 403
    assert as_carol.get("/connectors").status_code == 403  # carol has no grant
    assert unverified.get("/connectors").status_code == 401
    # Credentials in the header decide when present, even next to a certificate.
    assert as_operator.get("/connectors", headers=_basic("operator", "wrong")).status_code == 401
    assert as_carol.get("/connectors", headers=_basic("viewer", "v-pw")).status_code == 200


@pytest.mark.parametrize(
    ("subject", "cn"),
    [
        ("CN=alice,O=Example", "alice"),
        ("cn=alice", "alice"),
        ("UID=7+CN=alice,O=Example", "alice"),
        ("O=Example", None),
        (r"CN=Smith\, John,O=Example", "Smith, John"),
        (r"CN=caf\C3\A9", "caf\u00e9"),
        (r"CN=\#hash\ ", "#hash "),
        ("CN=#04024869", None),
        ("2.5.4.3=bob", "bob"),
        ("", None),
    ],
)
def test_common_name_reads_rfc4514(subject: str, cn: str | None) -> None:
    assert common_name(subject) == cn


# -- GET /connectors lists what the caller may view --------------------------------------------------


def test_the_connector_list_is_filtered_to_what_the_caller_may_view(secured: TestClient) -> None:
    orders = _basic("orders", "or-pw")
    assert secured.get("/connectors", headers=orders).json() == [ORDERS]
    for expand in (["status"], ["info"], ["status", "info"]):
        listed = secured.get("/connectors", params=[("expand", e) for e in expand], headers=orders).json()
        assert list(listed) == [ORDERS] and set(listed[ORDERS]) == set(expand)
    assert sorted(secured.get("/connectors", headers=_basic("viewer", "v-pw")).json()) == [BILLING, ORDERS]
    assert secured.get("/connectors", headers=_basic("nobody", "n-pw")).status_code == 403


def test_without_roles_every_authenticated_principal_is_admin(make_client: Callable[..., TestClient]) -> None:
    client = make_client(**{"rest.auth.basic.users": "nobody:n-pw"})
    created = client.put(f"/connectors/{BILLING}/config", json=_config(), headers=_basic("nobody", "n-pw"))
    assert created.status_code == 201
    assert client.get("/connectors", headers=_basic("nobody", "n-pw")).json() == [BILLING]


def test_roles_without_authentication_leave_the_api_open(make_client: Callable[..., TestClient], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sluice.rest.authz"):
        client = make_client(**{"rest.auth.roles": "alice:viewer"})
    assert "no authentication" in caplog.text
    assert client.put(f"/connectors/{BILLING}/config", json=_config()).status_code == 201
    assert client.get("/connectors").json() == [BILLING]


@pytest.mark.parametrize(
    "roles",
    ["alice", "alice:root", "alice:viewer:", ":viewer", "alice::orders-*", "alice:viewer, bob:superuser:*"],
)
def test_malformed_roles_stop_the_worker(make_client: Callable[..., TestClient], roles: str) -> None:
    with pytest.raises(ConfigError, match="rest.auth.roles") as error:
        make_client(**_worker(**{"rest.auth.roles": roles}))
    assert error.value.key == "rest.auth.roles"


# -- the audit trail ---------------------------------------------------------------------------------


def _audit_records(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "sluice.audit"]


def test_writes_and_refusals_are_audited_without_secrets(secured: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    admin, viewer = _basic("admin", "a-pw"), _basic("viewer", "v-pw")
    with caplog.at_level(logging.INFO, logger="sluice.audit"):
        created = secured.post(
            "/connectors",
            json={"name": "audited", "config": _config(password=SECRET), "initial_state": "STOPPED"},
            headers=admin,
        )
        assert created.status_code == 201, created.text
        assert secured.put("/connectors/audited/config", json=_config(password=SECRET), headers=viewer).status_code == 403
        assert secured.patch("/connectors/audited/config", json={"password": SECRET}, headers=_basic("admin", SECRET)).status_code == 401
        assert secured.patch("/connectors/audited/config", json={"tasks.max": "many"}, headers=admin).status_code == 400
        assert secured.get("/connectors/audited/config", headers=admin).status_code == 200  # a read: not audited
        assert secured.get("/connectors/audited/config").status_code == 401  # a refused read: audited
        assert secured.delete("/connectors/audited?token=" + SECRET, headers=admin).status_code == 204

    records = _audit_records(caplog)
    summary = [(r["principal"], r["method"], r["path"], r["connector"], r["status"], r["outcome"]) for r in records]
    assert summary == [
        ("admin", "POST", "/connectors", "audited", 201, "ok"),
        ("viewer", "PUT", "/connectors/audited/config", "audited", 403, "refused"),
        ("anonymous", "PATCH", "/connectors/audited/config", "audited", 401, "refused"),
        ("admin", "PATCH", "/connectors/audited/config", "audited", 400, "failed"),
        ("anonymous", "GET", "/connectors/audited/config", "audited", 401, "refused"),
        ("admin", "DELETE", "/connectors/audited", "audited", 204, "ok"),
    ]
    for record in records:
        assert set(record) == {"time", "principal", "client", "method", "path", "connector", "status", "outcome"}
        assert record["time"].endswith("+00:00") and record["client"] == "testclient"
    assert SECRET not in caplog.text and "a-pw" not in caplog.text and "v-pw" not in caplog.text
    assert all(len(r.getMessage().splitlines()) == 1 for r in caplog.records if r.name == "sluice.audit")


def test_an_open_api_audits_writes_as_anonymous(make_client: Callable[..., TestClient], caplog: pytest.LogCaptureFixture) -> None:
    client = make_client()
    with caplog.at_level(logging.INFO, logger="sluice.audit"):
        assert client.put(f"/connectors/{BILLING}/config", json=_config()).status_code == 201
        assert client.put("/connectors/no%0Asuch/pause").status_code == 404
    records = _audit_records(caplog)
    assert [(r["principal"], r["status"], r["outcome"]) for r in records] == [("anonymous", 201, "ok"), ("anonymous", 404, "failed")]
    assert records[1]["connector"] == "no\nsuch"  # JSON-escaped: still one line
    assert all("\n" not in r.getMessage() for r in caplog.records if r.name == "sluice.audit")


def test_an_unreachable_audit_topic_neither_blocks_nor_fails_a_request(caplog: pytest.LogCaptureFixture) -> None:
    # Only producer.* security keys are borrowed: the invalid linger.ms would fail the producer otherwise.
    topic = AuditTopic.from_worker_config(
        "audit", {"bootstrap.servers": "127.0.0.1:1", "producer.security.protocol": "PLAINTEXT", "producer.linger.ms": "x"}
    )
    trail = AuditTrail(topic)
    with caplog.at_level(logging.WARNING, logger="sluice.rest.audit"):
        for _ in range(100):  # queued for librdkafka's thread; nothing here waits for the broker
            trail.record(principal="alice", client="127.0.0.1", method="PUT", path="/connectors/c/pause", connector="c", status=202)
        topic.close(timeout_s=0.1)
    assert "100 audit record(s) not delivered" in caplog.text
