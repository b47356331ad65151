"""Loggers, authentication, TLS settings, OpenAPI and secret scrubbing."""

from __future__ import annotations

import base64
import logging

import pytest
from fastapi.testclient import TestClient

from sluice.connectors.api import ConfigError
from sluice.rest.settings import RestSettings
from sluice.worker.config.masking import scrub_secrets


def test_loggers_can_be_listed_read_and_set(client: TestClient) -> None:
    logging.getLogger("sluice.test.parent.child")
    assert "root" in client.get("/admin/loggers").json()
    r = client.put("/admin/loggers/sluice.test.parent", json={"level": "debug"})
    assert r.status_code == 200 and r.json() == ["sluice.test.parent", "sluice.test.parent.child"]
    one = client.get("/admin/loggers/sluice.test.parent.child").json()
    assert one["level"] == "DEBUG" and isinstance(one["last_modified"], int)
    assert client.get("/admin/loggers").json()["sluice.test.parent"]["level"] == "DEBUG"
    assert client.put("/admin/loggers/sluice.test.parent", json={"level": "WARN"}, params={"scope": "cluster"}).status_code == 204
    assert logging.getLogger("sluice.test.parent.child").level == logging.WARNING
    bad = client.put("/admin/loggers/sluice.test.parent", json={"level": "LOUD"})
    assert bad.json() == {"error_code": 400, "message": "Invalid log level 'LOUD'."}
    assert client.get("/admin/loggers/no.such.logger.anywhere").status_code == 404


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_auth_protects_everything_but_health(make_client, tmp_path) -> None:
    users_file = tmp_path / "users"
    users_file.write_text("# users\ncarol=filepw\n")
    client = make_client(**{
        "rest.auth.basic.users": "alice:secret,bob:pw",
        "rest.auth.basic.users.file": str(users_file),
        "rest.auth.bearer.tokens": "tok-1, tok-2",
    })
    assert client.get("/health").status_code == 200
    for path in ("/connectors", "/connector-plugins", "/admin/loggers", "/openapi.json"):
        refused = client.get(path)
        assert refused.status_code == 401 and refused.json()["error_code"] == 401
        assert "Basic" in refused.headers["www-authenticate"] and "Bearer" in refused.headers["www-authenticate"]
    assert client.get("/connectors", headers=_basic("alice", "secret")).status_code == 200
    assert client.get("/connectors", headers=_basic("carol", "filepw")).status_code == 200
    assert client.get("/connectors", headers=_basic("alice", "wrong")).status_code == 401
    assert client.get("/connectors", headers=_basic("mallory", "secret")).status_code == 401
    assert client.get("/connectors", headers={"Authorization": "Bearer tok-2"}).status_code == 200
    assert client.get("/connectors", headers={"Authorization": "Bearer tok-3"}).status_code == 401
    assert client.get("/connectors", headers={"Authorization": "Basic !!notbase64"}).status_code == 401
    # Unauthenticated writes are refused before their body is looked at.
    assert client.post("/connectors", content=b"x" * 2_000_000).status_code == 401


def test_tls_settings_come_from_listener_keys() -> None:
    settings = RestSettings.from_worker_config({
        "listeners": "https://127.0.0.1:8443",
        "listeners.https.ssl.certfile": "/c.pem",
        "listeners.https.ssl.keyfile": "/k.pem",
    })
    assert (settings.scheme, settings.ssl_certfile, settings.ssl_keyfile) == ("https", "/c.pem", "/k.pem")
    with pytest.raises(ConfigError, match="certfile"):
        RestSettings.from_worker_config({"listeners": "https://127.0.0.1:8443"})
    with pytest.raises(ConfigError, match="user:password"):
        RestSettings.from_worker_config({"rest.auth.basic.users": "nopassword"})
    assert not RestSettings.from_worker_config({}).auth_enabled


def test_openapi_documents_the_surface_and_error_body(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    for path in ("/connectors/{name}/offsets", "/connectors/{name}/topics", "/connector-plugins/{plugin}/config/validate",
                 "/admin/loggers/{name}", "/connectors/{name}/restart"):
        assert path in spec["paths"], path
    assert set(spec["components"]["schemas"]["ErrorBody"]["properties"]) == {"error_code", "message"}
    assert client.get("/docs").status_code == 200


def test_traces_lose_literal_and_env_provided_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_SCRUB_TEST", "from-the-env")
    trace = "login failed for hunter22 and from-the-env at db"
    config = {"password": "hunter22", "other.secret": "${env:SLUICE_SCRUB_TEST}", "file": "db"}
    assert scrub_secrets(trace, config, {"password"}) == "login failed for [hidden] and [hidden] at db"
