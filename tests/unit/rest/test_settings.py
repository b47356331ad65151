"""The REST listener's worker keys: transport limits, client certificates, the secure default."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sluice.connectors.api import ConfigError
from sluice.rest.settings import RestSettings


def _https(**keys: str) -> dict[str, str]:
    return {"listeners": "https://127.0.0.1:8443", "listeners.https.ssl.certfile": "/c.pem", **keys}


def test_transport_limits_have_defaults_and_read_their_keys() -> None:
    defaults = RestSettings.from_worker_config({})
    assert (
        defaults.request_header_timeout_ms,
        defaults.request_body_timeout_ms,
        defaults.max_connections_per_client,
    ) == (
        10_000,
        30_000,
        32,
    )
    assert (defaults.client_auth, defaults.allow_unauthenticated) == ("none", False)
    tuned = RestSettings.from_worker_config(
        {
            "rest.request.header.timeout.ms": "2000",
            "rest.request.body.timeout.ms": "4000",
            "rest.connections.per.client.max": "4",
            "rest.auth.allow.unauthenticated": "TRUE",
        }
    )
    assert (tuned.request_header_timeout_ms, tuned.request_body_timeout_ms, tuned.max_connections_per_client) == (
        2000,
        4000,
        4,
    )
    assert tuned.allow_unauthenticated


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("rest.request.header.timeout.ms", "soon", "must be an integer"),
        ("rest.request.body.timeout.ms", "0", "at least 1"),
        ("rest.connections.per.client.max", "-1", "at least 1"),
        ("rest.auth.allow.unauthenticated", "yes", "true or false"),
    ],
)
def test_bad_transport_values_name_their_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        RestSettings.from_worker_config({key: value})
    assert caught.value.key == key and key in str(caught.value)


def test_client_authentication_needs_https_and_a_ca_bundle(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    for mode in ("requested", "required", "REQUIRED"):
        settings = RestSettings.from_worker_config(
            _https(**{"listeners.https.ssl.client.authentication": mode, "listeners.https.ssl.cafile": str(ca)})
        )
        assert (settings.client_auth, settings.ssl_cafile, settings.auth_enabled) == (mode.lower(), str(ca), True)
    with pytest.raises(ConfigError, match="listeners.https.ssl.cafile") as caught:
        RestSettings.from_worker_config(_https(**{"listeners.https.ssl.client.authentication": "required"}))
    assert caught.value.key == "listeners.https.ssl.cafile"
    with pytest.raises(ConfigError, match="not a readable file"):
        RestSettings.from_worker_config(
            _https(
                **{
                    "listeners.https.ssl.client.authentication": "required",
                    "listeners.https.ssl.cafile": str(tmp_path / "absent.pem"),
                }
            )
        )
    with pytest.raises(ConfigError, match="none, requested, required"):
        RestSettings.from_worker_config(_https(**{"listeners.https.ssl.client.authentication": "want"}))
    # On plain http the key would count as authentication while none happens.
    with pytest.raises(ConfigError, match="needs an https:// listener"):
        RestSettings.from_worker_config(
            {
                "listeners.https.ssl.client.authentication": "required",
                "listeners.https.ssl.cafile": str(ca),
            }
        )
    none = RestSettings.from_worker_config(_https(**{"listeners.https.ssl.client.authentication": "none"}))
    assert not none.auth_enabled


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.1.2.3", "worker-1.example.com"])
def test_an_open_listener_other_machines_reach_is_refused(host: str) -> None:
    with pytest.raises(ConfigError) as caught:
        RestSettings.from_worker_config({}).check_exposure(host)
    for key in (
        "rest.auth.basic.users",
        "rest.auth.bearer.tokens",
        "listeners.https.ssl.client.authentication",
        "rest.auth.allow.unauthenticated=true",
    ):
        assert key in str(caught.value)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "localhost", "::1", "[::1]"])
def test_a_loopback_listener_needs_no_authentication(host: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        RestSettings.from_worker_config({}).check_exposure(host)
    assert not caplog.records


def test_authentication_or_the_opt_out_lets_an_exposed_listener_start(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        RestSettings.from_worker_config({"rest.auth.basic.users": "alice:pw"}).check_exposure("0.0.0.0")
        RestSettings.from_worker_config({"rest.auth.bearer.tokens": "t0k"}).check_exposure("0.0.0.0")
    assert not caplog.records
    with caplog.at_level(logging.WARNING):
        RestSettings.from_worker_config({"rest.auth.allow.unauthenticated": "true"}).check_exposure("0.0.0.0")
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "rest.auth.allow.unauthenticated=true" in caplog.records[0].getMessage()


def test_the_listener_wide_cap_and_descriptor_reserve_are_sized_later_unless_set() -> None:
    defaults = RestSettings.from_worker_config({})
    assert (defaults.max_connections, defaults.fd_reserve) == (None, None)
    tuned = RestSettings.from_worker_config({"rest.connections.max": "200", "rest.connections.fd.reserve": "0"})
    assert (tuned.max_connections, tuned.fd_reserve) == (200, 0)
    with pytest.raises(ConfigError, match="rest.connections.max must be at least 1"):
        RestSettings.from_worker_config({"rest.connections.max": "0"})
