"""``/connector-plugins/{plugin}/config`` and ``.../config/validate`` in Connect's shapes."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

KEY_INFO_FIELDS = [
    "name", "type", "required", "default_value", "importance", "documentation",
    "group", "order_in_group", "width", "display_name", "dependents",
]


def test_plugin_config_lists_common_and_own_keys(client: TestClient) -> None:
    defs = client.get("/connector-plugins/FileStreamSource/config").json()
    assert all(list(d) == KEY_INFO_FIELDS for d in defs)
    by_name = {d["name"]: d for d in defs}
    assert {"name", "connector.class", "tasks.max", "file", "topic", "batch.size"} <= set(by_name)
    assert "topics" not in by_name  # sink-only key
    assert by_name["topic"]["required"] is True and by_name["topic"]["type"] == "STRING"
    assert by_name["batch.size"] == {**by_name["batch.size"], "type": "INT", "required": False, "default_value": "2000"}
    assert by_name["tasks.max"]["group"] == "Common" and by_name["connector.class"]["type"] == "CLASS"
    assert by_name["tasks.max.enforce"]["type"] == "BOOLEAN" and by_name["tasks.max.enforce"]["default_value"] == "true"
    assert by_name["file"]["documentation"].startswith("The file to read lines from")


def test_sink_definitions_include_topics_and_password_type(client: TestClient) -> None:
    sink = {d["name"]: d for d in client.get("/connector-plugins/FileStreamSink/config").json()}
    assert sink["topics"]["type"] == "LIST"
    controllable = client.get("/connector-plugins/tests.plugins.controllable.ControllableSource/config").json()
    assert {d["name"]: d["type"] for d in controllable}["password"] == "PASSWORD"


@pytest.mark.parametrize(
    "name",
    ["FileStreamSource", "FileStreamSourceConnector", "org.apache.kafka.connect.file.FileStreamSourceConnector",
     "sluice.connectors.source.file.connector.FileStreamSourceConnector"],
)
def test_plugins_are_found_by_every_name(client: TestClient, name: str) -> None:
    assert client.get(f"/connector-plugins/{name}/config").status_code == 200
    r = client.put(f"/connector-plugins/{name}/config/validate", json={"name": "x", "topic": "t"})
    assert r.status_code == 200 and r.json()["error_count"] == 0, r.text
    unnamed = client.put(f"/connector-plugins/{name}/config/validate", json={"topic": "t"})
    assert unnamed.json()["error_count"] == 0, unnamed.text


def test_converters_have_definitions_too(client: TestClient) -> None:
    assert client.get("/connector-plugins/JsonConverter/config").status_code == 200


def test_unknown_plugin_is_404(client: TestClient) -> None:
    r = client.get("/connector-plugins/NoSuchPlugin/config")
    assert r.json() == {"error_code": 404, "message": "Unknown plugin NoSuchPlugin."}
    assert client.put("/connector-plugins/NoSuchPlugin/config/validate", json={}).status_code == 404


def test_validate_reports_each_error_under_its_key(client: TestClient) -> None:
    r = client.put(
        "/connector-plugins/FileStreamSource/config/validate",
        json={"connector.class": "FileStreamSource", "name": "v", "tasks.max": "many", "batch.size": 0, "tpoic": "x"},
    )
    assert r.status_code == 200
    infos = r.json()
    assert list(infos) == ["name", "error_count", "groups", "configs", "warnings"]
    assert infos["name"] == "FileStreamSource"
    assert infos["groups"] == ["Common"]
    values = {c["value"]["name"]: c["value"] for c in infos["configs"]}
    assert all(set(c) == {"definition", "value"} for c in infos["configs"])
    assert set(values["name"]) == {"name", "value", "recommended_values", "errors", "visible"}
    assert values["name"]["errors"] == [] and values["name"]["value"] == "v"
    assert "many" in values["tasks.max"]["errors"][0]
    assert values["topic"]["errors"] == ['Missing required configuration "topic" which has no default value.']
    assert values["batch.size"]["errors"] and values["batch.size"]["value"] == "0"
    # An undefined key is accepted and ignored, as in Connect: a warning with a suggestion, not an error.
    assert values["tpoic"]["errors"] == []
    assert values["tpoic"]["warnings"] == ['"tpoic" is not a configuration of FileStreamSourceConnector; it is kept but ignored (did you mean "topic"?)']
    assert infos["warnings"] == [{"name": "tpoic", "message": values["tpoic"]["warnings"][0]}]
    assert values["config.action.reload"]["recommended_values"] == ["none", "restart"]
    assert infos["error_count"] == 3
    unnamed = client.put("/connector-plugins/FileStreamSource/config/validate", json={"topic": "t"}).json()
    assert unnamed["name"] == "FileStreamSource" and unnamed["error_count"] == 0


def test_validate_runs_the_worker_checks_too(client: TestClient) -> None:
    r = client.put("/connector-plugins/FileStreamSink/config/validate", json={"name": "s", "file": "/tmp/x"})
    values = {c["value"]["name"]: c["value"] for c in r.json()["configs"]}
    assert r.json()["error_count"] == 1 and values["topics"]["errors"]
    conv = client.put("/connector-plugins/FileStreamSource/config/validate",
                      json={"name": "s", "topic": "t", "value.converter": "NoSuchConverter"})
    values = {c["value"]["name"]: c["value"] for c in conv.json()["configs"]}
    assert "NoSuchConverter" in values["value.converter"]["errors"][0]


def test_validate_refuses_a_mismatched_connector_class(client: TestClient) -> None:
    r = client.put("/connector-plugins/FileStreamSource/config/validate", json={"connector.class": "FileStreamSink"})
    assert r.json() == {
        "error_code": 400,
        "message": "Included connector type FileStreamSink does not match request type FileStreamSource",
    }


def test_validate_masks_passwords(client: TestClient) -> None:
    r = client.put(
        "/connector-plugins/tests.plugins.controllable.ControllableSource/config/validate",
        json={"name": "v", "topic": "t", "fail.flag": "/f", "password": "s3cret-pw"},
    )
    assert "s3cret-pw" not in r.text
    values = {c["value"]["name"]: c["value"] for c in r.json()["configs"]}
    assert values["password"]["value"] == "[hidden]"
