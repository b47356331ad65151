"""The connector routes over a herder with no Kafka: config, patch, masking, offsets, errors."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from sluice.worker.standalone import StandaloneHerder
from tests.unit.rest.conftest import AppFactory

CONTROLLABLE = "tests.plugins.controllable.ControllableSource"


def _config(**extra: str) -> dict[str, str]:
    return {"connector.class": CONTROLLABLE, "topic": "t", "fail.flag": "/nonexistent/flag", **extra}


def _create_stopped(client: TestClient, name: str = "c", **extra: str) -> None:
    r = client.post("/connectors", json={"name": name, "config": _config(**extra), "initial_state": "STOPPED"})
    assert r.status_code == 201, r.text


def test_stopped_connector_has_no_tasks(client: TestClient) -> None:
    _create_stopped(client)
    assert client.get("/connectors/c/status").json() == {
        "name": "c",
        "connector": {"state": "STOPPED", "worker_id": "127.0.0.1:8083"},
        "tasks": [],
        "type": "source",
    }
    assert client.get("/connectors/c/tasks").json() == []


def test_patch_merges_and_null_deletes(client: TestClient) -> None:
    _create_stopped(client, **{"interval.ms": "10"})
    r = client.patch("/connectors/c/config", json={"interval.ms": 50, "interval.ms.unused": None, "topic": "u"})
    assert r.status_code == 200, r.text
    assert r.json()["config"]["interval.ms"] == "50" and r.json()["config"]["topic"] == "u"
    r = client.patch("/connectors/c/config", json={"interval.ms": None})
    assert "interval.ms" not in client.get("/connectors/c/config").json()
    bad = client.patch("/connectors/c/config", json={"interval.ms": "soon"})
    assert bad.status_code == 400 and "interval.ms" in bad.json()["message"]
    missing = client.patch("/connectors/nope/config", json={"topic": "x"})
    assert missing.json() == {"error_code": 404, "message": "Connector nope not found"}


def test_passwords_are_masked_and_placeholders_kept(make_client: AppFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_TEST_SECRET", "env-secret-value")
    client = make_client(**{"config.providers": "env"})  # providers exist only when declared
    _create_stopped(client, "literal", password="hunter2-literal")
    _create_stopped(client, "placeholder", password="${env:SLUICE_TEST_SECRET}")
    bodies = [
        client.get("/connectors/literal/config").text,
        client.get("/connectors/literal").text,
        client.get("/connectors", params={"expand": "info"}).text,
        client.get("/connectors/placeholder/config").text,
        client.put(
            "/connector-plugins/ControllableSource/config/validate", json=_config(name="v", password="hunter2-literal")
        ).text,
    ]
    for body in bodies:
        assert "hunter2-literal" not in body and "env-secret-value" not in body
    assert client.get("/connectors/literal/config").json()["password"] == "[hidden]"
    assert client.get("/connectors/placeholder/config").json()["password"] == "${env:SLUICE_TEST_SECRET}"


def test_config_read_back_with_hidden_password_keeps_the_secret(client: TestClient) -> None:
    _create_stopped(client, password="keep-me")
    config = client.get("/connectors/c/config").json()
    assert client.put("/connectors/c/config", json=config).status_code == 200
    # The stored value is still the secret, not the mask: a fresh validate of it is clean.
    assert client.get("/connectors/c/config").json()["password"] == "[hidden]"
    herder: StandaloneHerder = client.app.state.herder  # type: ignore[attr-defined]
    assert herder.configs.snapshot().connectors["c"]["password"] == "keep-me"


def test_source_offsets_alter_and_reset_when_stopped(client: TestClient) -> None:
    _create_stopped(client)
    assert client.get("/connectors/c/offsets").json() == {"offsets": []}
    body = {"offsets": [{"partition": {"controllable": "main"}, "offset": {"n": 41}}]}
    r = client.patch("/connectors/c/offsets", json=body)
    assert r.status_code == 200 and "altered successfully" in r.json()["message"]
    assert client.get("/connectors/c/offsets").json() == body
    r = client.delete("/connectors/c/offsets")
    assert r.status_code == 200 and "reset successfully" in r.json()["message"]
    assert client.get("/connectors/c/offsets").json() == {"offsets": []}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"offsets": []}, "Partitions / offsets need to be provided"),
        ({}, "Partitions / offsets need to be provided"),
        ({"offsets": [{"offset": {"n": 1}}]}, "partition"),
        ({"offsets": [{"partition": {"p": 1}, "offset": 7}]}, "offset"),
    ],
)
def test_bad_offset_bodies_are_400(client: TestClient, body: dict, fragment: str) -> None:
    _create_stopped(client)
    r = client.patch("/connectors/c/offsets", json=body)
    assert r.status_code == 400 and fragment in r.json()["message"], r.text


def test_offsets_change_needs_stopped_state(client: TestClient) -> None:
    r = client.post("/connectors", json={"name": "p", "config": _config(), "initial_state": "PAUSED"})
    assert r.status_code == 201
    body = {"offsets": [{"partition": {"controllable": "main"}, "offset": {"n": 1}}]}
    for response in (client.patch("/connectors/p/offsets", json=body), client.delete("/connectors/p/offsets")):
        assert response.status_code == 400
        assert response.json()["message"] == (
            "Connectors must be in the STOPPED state before their offsets can be modified. This can be done for "
            "the specified connector by issuing a 'PUT' request to the '/connectors/p/stop' endpoint"
        )


def test_connector_alter_offsets_hook_can_refuse(client: TestClient, tmp_path) -> None:
    config = {"connector.class": "FileStreamSource", "file": str(tmp_path / "in.txt"), "topic": "t"}
    client.post("/connectors", json={"name": "f", "config": config, "initial_state": "STOPPED"})
    r = client.patch(
        "/connectors/f/offsets", json={"offsets": [{"partition": {"filename": "x"}, "offset": {"position": -1}}]}
    )
    assert r.status_code == 400 and "position" in r.json()["message"]
    ok = client.patch(
        "/connectors/f/offsets", json={"offsets": [{"partition": {"filename": "x"}, "offset": {"position": 3}}]}
    )
    assert ok.json() == {"message": "The offsets for this connector have been altered successfully"}


def test_topics_of_a_new_connector_are_empty_and_resettable(client: TestClient) -> None:
    _create_stopped(client)
    assert client.get("/connectors/c/topics").json() == {"c": {"topics": []}}
    assert client.put("/connectors/c/topics/reset").status_code == 202
    assert client.get("/connectors/x/topics").status_code == 404


def test_topic_tracking_can_be_disabled(make_client) -> None:
    client = make_client(**{"topic.tracking.enable": "false"})
    _create_stopped(client)
    r = client.get("/connectors/c/topics")
    assert r.status_code == 403 and r.json() == {"error_code": 403, "message": "Topic tracking is disabled."}
    client = make_client(**{"topic.tracking.allow.reset": "false"})
    _create_stopped(client)
    assert client.put("/connectors/c/topics/reset").status_code == 403


def test_restart_of_a_stopped_connector_is_accepted_and_changes_nothing(client: TestClient) -> None:
    _create_stopped(client)
    assert client.post("/connectors/c/restart").status_code == 204
    r = client.post("/connectors/c/restart", params={"includeTasks": "true", "onlyFailed": "true"})
    assert r.status_code == 202 and r.json()["connector"]["state"] == "STOPPED"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/connectors/nope"),
        ("GET", "/connectors/nope/config"),
        ("GET", "/connectors/nope/status"),
        ("GET", "/connectors/nope/tasks"),
        ("GET", "/connectors/nope/tasks/0/status"),
        ("POST", "/connectors/nope/tasks/0/restart"),
        ("POST", "/connectors/nope/restart"),
        ("POST", "/connectors/nope/restart?includeTasks=true"),
        ("PUT", "/connectors/nope/pause"),
        ("PUT", "/connectors/nope/resume"),
        ("PUT", "/connectors/nope/stop"),
        ("DELETE", "/connectors/nope"),
        ("GET", "/connectors/nope/offsets"),
        ("DELETE", "/connectors/nope/offsets"),
        ("GET", "/connectors/nope/topics"),
        ("PUT", "/connectors/nope/topics/reset"),
    ],
)
def test_unknown_connector_is_404_everywhere(client: TestClient, method: str, path: str) -> None:
    r = client.request(method, path)
    assert r.status_code == 404 and r.json() == {"error_code": 404, "message": "Connector nope not found"}


def test_request_robustness(client: TestClient) -> None:
    malformed = client.post("/connectors", content=b'{"name": ', headers={"content-type": "application/json"})
    assert malformed.status_code == 400 and malformed.json()["error_code"] == 400
    wrong_type = client.post(
        "/connectors", content=b"name=x", headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert wrong_type.status_code == 415 and wrong_type.json()["error_code"] == 415
    huge = client.put(
        "/connectors/c/config",
        content=b'{"a": "' + b"x" * 1_100_000 + b'"}',
        headers={"content-type": "application/json"},
    )
    assert huge.status_code == 413 and huge.json()["error_code"] == 413
    not_a_map = client.put("/connectors/c/config", json=["a"])
    assert not_a_map.status_code == 400
    bad_state = client.post("/connectors", json={"name": "x", "config": _config(), "initial_state": "SLEEPING"})
    assert bad_state.status_code == 400 and "initial_state" in bad_state.json()["message"]
    name_mismatch = client.put("/connectors/a/config", json={**_config(), "name": "b"})
    assert name_mismatch.status_code == 400
    unknown_path = client.get("/no/such/path")
    assert unknown_path.json() == {"error_code": 404, "message": "Not Found"}
    assert client.delete("/connector-plugins").status_code == 405


def test_body_limit_is_configurable(make_client) -> None:
    client = make_client(**{"rest.request.max.bytes": "100"})
    r = client.post("/connectors", json={"name": "x", "config": _config(padding="y" * 200)})
    assert r.status_code == 413 and "100 bytes" in r.json()["message"]


def test_an_avro_converter_without_a_registry_url_is_refused_when_the_connector_is_created(client: TestClient) -> None:
    config = _config(**{"value.converter": "io.confluent.connect.avro.AvroConverter"})
    r = client.post("/connectors", json={"name": "avro", "config": config, "initial_state": "STOPPED"})
    assert r.status_code == 400
    assert "Invalid converter configuration" in r.json()["message"]
    assert "schema.registry.url" in r.json()["message"]
    config["value.converter.schema.registry.url"] = "http://127.0.0.1:1"  # checked at create, contacted by tasks
    assert (
        client.post("/connectors", json={"name": "avro", "config": config, "initial_state": "STOPPED"}).status_code
        == 201
    )


def test_task_configs_carry_the_task_class_as_a_cluster_stores_them(client: TestClient) -> None:
    """GET …/tasks answers in Connect's shape in standalone mode too; the task itself never sees task.class."""
    r = client.post("/connectors", json={"name": "c", "config": _config()})
    assert r.status_code == 201, r.text
    (task,) = client.get("/connectors/c/tasks").json()
    assert task["id"] == {"connector": "c", "task": 0}
    assert task["config"]["task.class"] == "tests.plugins.controllable.ControllableSourceTask"
    assert task["config"]["topic"] == "t"


def test_one_connectors_password_is_not_hidden_in_another_connectors_config(client: TestClient) -> None:
    """Issue #37: a password ``postgres`` on one connector turned another's plain ``postgres`` into [hidden]."""
    _create_stopped(client, "cdc", password="postgres")
    _create_stopped(client, "other", topic="postgres")
    assert client.get("/connectors/cdc/config").json()["password"] == "[hidden]"
    assert client.get("/connectors/other/config").json()["topic"] == "postgres"
    assert client.get("/connectors/other").json()["config"]["topic"] == "postgres"
    validated = client.put(
        "/connector-plugins/ControllableSource/config/validate", json=_config(name="other", **{"interval.ms": "postgres"})
    ).json()
    messages = [m for c in validated["configs"] for m in c["value"]["errors"]]
    assert messages == ["invalid value 'postgres': Input should be a valid integer, unable to parse string as an integer"]
