"""``metrics.listeners``: its worker key, the REST listener's security rules applied to it, and
what it serves (``/metrics`` and ``/health``, nothing else)."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from fastapi.testclient import TestClient

from sluice.connectors.api import ConfigError
from sluice.rest.app import metrics_only
from sluice.rest.server import metrics_listener_server
from sluice.rest.settings import RestSettings
from sluice.worker.config.models import WorkerConfig
from tests.integration.worker_process import free_port as _free_port
from tests.tls_certs import make_tls_files


def _app(settings: RestSettings) -> FastAPI:
    app = FastAPI()
    app.state.rest_settings = settings

    @app.get("/metrics", response_class=PlainTextResponse)
    def metrics() -> str:
        return "up 1\n"

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "healthy"}

    @app.get("/connectors")
    def connectors() -> list[str]:
        return ["secret-pipeline"]

    return app


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("", None),
        ("http://127.0.0.1:9404", ("http", "127.0.0.1", 9404)),
        ("https://metrics.example:9443,http://127.0.0.1:9", ("https", "metrics.example", 9443)),
        ("0.0.0.0:9404", ("http", "0.0.0.0", 9404)),
    ],
)
def test_the_key_reads_a_listener_url_and_is_off_by_default(value: str, expected: object) -> None:
    raw = {"metrics.listeners": value} if value else {}
    assert WorkerConfig.from_mapping(raw).metrics_listener == expected


@pytest.mark.parametrize("value", ["ftp://127.0.0.1:9404", "http://127.0.0.1", "http://127.0.0.1:port"])
def test_a_malformed_listener_is_refused_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError, match="metrics.listeners") as caught:
        _ = WorkerConfig.from_mapping({"metrics.listeners": value}).metrics_listener
    assert caught.value.key == "metrics.listeners"


def test_an_exposed_listener_without_authentication_is_refused_as_the_rest_one_is() -> None:
    app = _app(RestSettings.from_worker_config({}))
    with pytest.raises(ConfigError, match=r"metrics listener \(metrics.listeners\) on 0.0.0.0") as caught:
        metrics_listener_server(app, ("http", "0.0.0.0", 9404))
    assert caught.value.key == "rest.auth.allow.unauthenticated"
    assert metrics_listener_server(app, ("http", "127.0.0.1", 9404)) is not None
    assert metrics_listener_server(app, None) is None
    for keys in ({"rest.auth.basic.users": "prom:pw"}, {"rest.auth.allow.unauthenticated": "true"}):
        assert (
            metrics_listener_server(_app(RestSettings.from_worker_config(keys)), ("http", "0.0.0.0", 9404)) is not None
        )


def test_https_needs_the_listeners_https_certificate() -> None:
    with pytest.raises(ConfigError, match="certfile") as caught:
        metrics_listener_server(_app(RestSettings.from_worker_config({})), ("https", "127.0.0.1", 9443))
    assert caught.value.key == "listeners.https.ssl.certfile"


def test_client_certificates_as_the_only_authentication_need_an_https_metrics_listener(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    settings = RestSettings.from_worker_config(
        {
            "listeners": "https://127.0.0.1:8443",
            "listeners.https.ssl.certfile": "/c.pem",
            "listeners.https.ssl.client.authentication": "required",
            "listeners.https.ssl.cafile": str(ca),
        }
    )
    with pytest.raises(ConfigError) as caught:
        settings.for_metrics_listener("http")
    assert caught.value.key == "metrics.listeners"
    assert settings.for_metrics_listener("https").scheme == "https"
    with_users = RestSettings.from_worker_config({"rest.auth.basic.users": "prom:pw"})
    assert with_users.for_metrics_listener("http").basic_users == {"prom": "pw"}


def test_only_metrics_and_health_are_served() -> None:
    client = TestClient(metrics_only(_app(RestSettings())))
    assert client.get("/metrics").text == "up 1\n"
    assert client.get("/health").json() == {"status": "healthy"}
    response = client.get("/connectors")
    assert response.status_code == 404
    assert "metrics.listeners" in response.json()["message"]
    assert "secret-pipeline" not in response.text
    assert client.get("/metrics/../connectors").status_code == 404


def test_an_https_metrics_listener_serves_with_the_listeners_https_keys(tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path)
    settings = RestSettings.from_worker_config(
        {"listeners.https.ssl.certfile": str(tls.server_cert), "listeners.https.ssl.keyfile": str(tls.server_key)}
    )
    server = metrics_listener_server(_app(settings), ("https", "127.0.0.1", _free_port()))
    assert server is not None
    server.start()
    try:
        context = ssl.create_default_context(cafile=str(tls.ca))
        response = httpx.get(f"https://127.0.0.1:{server.port}/metrics", verify=context, timeout=5)
        assert (response.status_code, response.text) == (200, "up 1\n")
    finally:
        server.stop()


# uvicorn ends its thread with SystemExit when it cannot bind; the worker reports the failure itself.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_busy_port_fails_the_start_naming_the_key_and_address() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = metrics_listener_server(_app(RestSettings()), ("http", "127.0.0.1", port))
        assert server is not None
        with pytest.raises(RuntimeError, match=rf"metrics.listeners\) could not listen on 127.0.0.1:{port}"):
            server.start()
        server.stop()
