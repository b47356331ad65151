"""Issue #21 over REST, no Kafka: undeclared config providers and local paths outside the allowed ones
are refused on their key by ``config/validate`` and ``POST /connectors``, and nothing they would
have read appears in a response."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from sluice.worker.config.masking import SECRETS
from tests.host_files import passwd_root
from tests.unit.rest.conftest import AppFactory

VALIDATE = "/connector-plugins/FileStreamSource/config/validate"


@pytest.fixture(autouse=True)
def _forget_secrets() -> Iterator[None]:
    yield
    SECRETS.clear()


def errors_by_key(body: dict[str, Any]) -> dict[str, list[str]]:
    return {c["value"]["name"]: c["value"]["errors"] for c in body["configs"] if c["value"]["errors"]}


def source(topic: str = "lines", file: str = "/tmp/sluice-unit-in.txt") -> dict[str, str]:
    return {"connector.class": "FileStreamSource", "file": file, "topic": topic}


PLACEHOLDERS = ["${file:/etc/passwd:root}", "${dir:/etc:passwd}", "${env:HOME}"]


@pytest.mark.parametrize("placeholder", PLACEHOLDERS)
def test_an_undeclared_provider_is_refused_on_its_key(client: TestClient, placeholder: str) -> None:
    validated = client.put(VALIDATE, json=source(topic=placeholder))
    assert validated.status_code == 200
    errors = errors_by_key(validated.json())
    assert list(errors) == ["topic"]
    assert "not declared in the worker's config.providers" in errors["topic"][0]

    created = client.post("/connectors", json={"name": "leak", "config": source(topic=placeholder)})
    assert created.status_code == 400
    assert "'topic'" in created.json()["message"] and "not declared" in created.json()["message"]
    assert client.get("/connectors/leak").status_code == 404
    for body in (validated.text, created.text):
        assert passwd_root() not in body and "/bin/" not in body


@pytest.mark.parametrize("placeholder", PLACEHOLDERS[:2])
def test_a_declared_provider_refuses_paths_outside_allowed_paths(
    make_client: AppFactory, tmp_path: Path, placeholder: str
) -> None:
    client = make_client(
        **{
            "config.providers": "file,dir",
            "config.providers.file.param.allowed.paths": str(tmp_path),
            "config.providers.dir.param.allowed.paths": str(tmp_path),
        }
    )
    validated = client.put(VALIDATE, json=source(topic=placeholder))
    errors = errors_by_key(validated.json())
    assert list(errors) == ["topic"] and "outside the provider's allowed.paths" in errors["topic"][0]
    created = client.post("/connectors", json={"name": "leak", "config": source(topic=placeholder)})
    assert created.status_code == 400 and "'topic'" in created.json()["message"]
    assert passwd_root() not in validated.text + created.text


def test_validate_resolves_a_declared_placeholder_as_create_does(make_client: AppFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A placeholder that resolves to a legal topic is valid; one that resolves to an illegal one is
    reported on its key without its value."""
    monkeypatch.setenv("SLUICE_UNIT_TOPIC", "resolved-topic-name")
    monkeypatch.setenv("SLUICE_UNIT_BAD_TOPIC", "not a topic/secret-ish")
    client = make_client(**{"config.providers": "env"})
    ok = client.put(VALIDATE, json=source(topic="${env:SLUICE_UNIT_TOPIC}")).json()
    assert ok["error_count"] == 0
    topic = next(c["value"] for c in ok["configs"] if c["value"]["name"] == "topic")
    assert topic["value"] == "${env:SLUICE_UNIT_TOPIC}"  # shown as given, never resolved
    bad = client.put(VALIDATE, json=source(topic="${env:SLUICE_UNIT_BAD_TOPIC}"))
    assert list(errors_by_key(bad.json())) == ["topic"]
    assert "secret-ish" not in bad.text and "resolved-topic-name" not in bad.text


def test_file_outside_connector_allowed_paths_is_refused_on_file(make_client: AppFactory, tmp_path: Path) -> None:
    client = make_client(**{"connector.allowed.paths": str(tmp_path)})
    validated = client.put(VALIDATE, json=source(file="/etc/passwd")).json()
    assert list(errors_by_key(validated)) == ["file"]
    created = client.post("/connectors", json={"name": "shadow", "config": source(file="/etc/passwd")})
    assert created.status_code == 400
    assert "file: '/etc/passwd' is outside" in created.json()["message"]
    inside = client.post(
        "/connectors",
        json={"name": "inside", "config": source(file=str(tmp_path / "in.txt")), "initial_state": "STOPPED"},
    )
    assert inside.status_code == 201, inside.text
    sink = {"connector.class": "FileStreamSink", "topics": "lines", "file": str(tmp_path / ".." / "out.txt")}
    refused = client.put("/connector-plugins/FileStreamSink/config/validate", json=sink).json()
    assert list(errors_by_key(refused)) == ["file"]
