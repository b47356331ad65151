"""``sluice connectors`` against an in-process fake of the Connect REST API (httpx.MockTransport)."""

from __future__ import annotations

import base64
import json
import socket
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest
from click.testing import CliRunner, Result

from sluice.cli.connectors import trace_summary
from sluice.cli.main import main

PYTHON_TRACE = """Traceback (most recent call last):
  File "/app/worker/runners/source.py", line 10, in run
    batch = task.poll()
ValueError: the file /data/in.txt vanished
"""
JAVA_TRACE = "org.apache.kafka.connect.errors.ConnectException: boom\n\tat Foo.bar(Foo.java:1)"
_TARGETS = {"pause": "PAUSED", "resume": "RUNNING", "stop": "STOPPED"}


def _json(status: int, body: Any = None, **kwargs: Any) -> httpx.Response:
    return httpx.Response(status, json=body, **kwargs) if body is not None else httpx.Response(status, **kwargs)


def _error(status: int, message: str) -> httpx.Response:
    return _json(status, {"error_code": status, "message": message})


class FakeWorker:
    """Just enough of a Connect worker: connectors in a dict, states that settle one poll late.

    A state change is seen on the second status read after it, so ``--wait`` really has to poll.
    """

    def __init__(self, *, supports_patch: bool = True, token: str | None = None) -> None:
        self.connectors: dict[str, dict[str, Any]] = {}
        self.requests: list[httpx.Request] = []
        self.supports_patch = supports_patch
        self.token = token

    def add(self, name: str, config: dict[str, Any] | None = None, *, tasks: int = 1, state: str = "RUNNING") -> None:
        config = {"connector.class": "FileStreamSource", "topic": "lines", **(config or {}), "name": name}
        self.connectors[name] = {
            "config": config,
            "state": state,
            "pending": None,
            "tasks": [{"id": i, "state": state, "worker_id": "fake:8083"} for i in range(tasks)],
            "offsets": [{"partition": {"filename": "/data/in.txt"}, "offset": {"position": 42}}],
        }

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def last(self) -> httpx.Request:
        return self.requests[-1]

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if self.token and request.headers.get("authorization") != f"Bearer {self.token}":
            return _error(401, "Unauthorized")
        path = [unquote(p) for p in request.url.raw_path.decode().split("?")[0].split("/")[1:]]
        body = json.loads(request.content) if request.content else None
        if path[0] == "connector-plugins":
            return self._plugins(request, path, body)
        if path == ["connectors"]:
            return self._collection(request, body)
        connector = self.connectors.get(path[1])
        if connector is None:
            return _error(404, f"Connector {path[1]} not found")
        return self._connector(request.method, path[1], path[2:], connector, body, request.url.params)

    def _collection(self, request: httpx.Request, body: Any) -> httpx.Response:
        if request.method == "POST":
            if body["name"] in self.connectors:
                return _error(409, f"Connector {body['name']} already exists")
            self.add(body["name"], body["config"], state=body.get("initial_state", "RUNNING"))
            return _json(201, self._info(body["name"]))
        expand = request.url.params.get_list("expand")
        if not expand:
            return _json(200, list(self.connectors))
        return _json(
            200, {n: {e: self._status(n) if e == "status" else self._info(n) for e in expand} for n in self.connectors}
        )

    def _connector(  # noqa: C901 - one branch per REST route
        self, method: str, name: str, rest: list[str], c: dict[str, Any], body: Any, params: Any
    ) -> httpx.Response:
        match method, rest:
            case "GET", []:
                return _json(200, self._info(name))
            case "DELETE", []:
                del self.connectors[name]
                return _json(204)
            case "GET", ["config"]:
                return _json(200, c["config"])
            case "PUT", ["config"]:
                c["config"] = body
                return _json(200, self._info(name))
            case "PATCH", ["config"]:
                if not self.supports_patch:
                    return _error(405, "Method Not Allowed")
                c["config"] = {k: v for k, v in {**c["config"], **body}.items() if v is not None}
                return _json(200, self._info(name))
            case "GET", ["status"]:
                status = self._status(name)
                if c["pending"]:
                    c["state"], c["pending"] = c["pending"], None
                    tasks = [] if c["state"] == "STOPPED" else c["tasks"] or [{"id": 0, "worker_id": "fake:8083"}]
                    c["tasks"] = [{**t, "state": c["state"]} for t in tasks]
                return _json(200, status)
            case "PUT", [verb] if verb in _TARGETS:
                c["pending"] = _TARGETS[verb]
                return _json(204 if verb == "stop" else 202)
            case "POST", ["restart"]:
                if params.get("includeTasks") != "true":
                    return _json(204)
                for task in c["tasks"]:
                    if params.get("onlyFailed") != "true" or task["state"] == "FAILED":
                        task["state"] = "RESTARTING"
                        task.pop("trace", None)
                return _json(202, self._status(name))
            case "POST", ["tasks", task, "restart"]:
                return _json(204) if int(task) < len(c["tasks"]) else _error(404, f"Unknown task: {name}-{task}")
            case "GET", ["offsets"]:
                return _json(200, {"offsets": c["offsets"]})
            case (("PATCH" | "DELETE"), ["offsets"]) if c["state"] != "STOPPED":
                return _error(400, "Connectors must be in the STOPPED state before their offsets can be modified")
            case "PATCH", ["offsets"]:
                c["offsets"] = body["offsets"]
                return _json(200, {"message": "The offsets for this connector have been altered successfully"})
            case "DELETE", ["offsets"]:
                c["offsets"] = []
                return _json(200, {"message": "The offsets for this connector have been reset successfully"})
        return _error(404, "HTTP 404 Not Found")

    def _plugins(self, request: httpx.Request, path: list[str], body: Any) -> httpx.Response:
        if len(path) == 1:
            plugins = [
                {"class": "sluice.connectors.source.file.FileStreamSourceConnector", "type": "source", "version": "0.1.0"}
            ]
            if request.url.params.get("connectorsOnly") == "false":
                plugins.append({"class": "sluice.converters.json.JsonConverter", "type": "converter", "version": "0.1.0"})
            return _json(200, plugins)
        errors = {
            "topic": [] if body.get("topic") else ['Missing required configuration "topic" which has no default value.']
        }
        errors["file"] = ["Invalid value 7 for configuration file: must be a path"] if body.get("file") == "7" else []
        configs = [
            {"definition": {"name": k}, "value": {"name": k, "value": body.get(k), "errors": e}}
            for k, e in errors.items()
        ]
        count = sum(len(e) for e in errors.values())
        return _json(200, {"name": path[1], "error_count": count, "groups": ["Common"], "configs": configs})

    def _info(self, name: str) -> dict[str, Any]:
        c = self.connectors[name]
        tasks = [{"connector": name, "task": t["id"]} for t in c["tasks"]]
        return {"name": name, "config": c["config"], "tasks": tasks, "type": "source"}

    def _status(self, name: str) -> dict[str, Any]:
        c = self.connectors[name]
        connector = {"state": c["state"], "worker_id": "fake:8083"}
        return {"name": name, "connector": connector, "tasks": [dict(t) for t in c["tasks"]], "type": "source"}


@pytest.fixture
def fake() -> FakeWorker:
    return FakeWorker()


def run(
    fake: FakeWorker | httpx.BaseTransport, *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> Result:
    transport = fake.transport() if isinstance(fake, FakeWorker) else fake
    return CliRunner().invoke(main, ["connectors", *args], obj=transport, env=env, input=stdin)


# --- list ----------------------------------------------------------------------------------------


def test_list_prints_one_name_per_line(fake: FakeWorker) -> None:
    fake.add("orders")
    fake.add("customers")
    result = run(fake, "list")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["orders", "customers"]
    assert fake.last().url == "http://127.0.0.1:8083/connectors"


def test_list_without_connectors_says_so_on_stderr_only(fake: FakeWorker) -> None:
    result = run(fake, "list")
    assert result.exit_code == 0
    assert result.stdout == "" and "No connectors." in result.stderr


def test_list_expand_status_shows_state_and_task_summary(fake: FakeWorker) -> None:
    fake.add("orders", tasks=2)
    fake.connectors["orders"]["tasks"][1]["state"] = "FAILED"
    result = run(fake, "list", "--expand", "status")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "NAME    TYPE    STATE    TASKS                WORKER",
        "orders  source  RUNNING  1 FAILED, 1 RUNNING  fake:8083",
    ]


def test_list_expand_both_adds_the_class_and_json_is_the_server_body(fake: FakeWorker) -> None:
    fake.add("orders")
    table = run(fake, "list", "--expand", "info", "--expand", "STATUS")
    assert table.stdout.splitlines()[0].split() == ["NAME", "TYPE", "CLASS", "STATE", "TASKS", "WORKER"]
    assert "FileStreamSource" in table.stdout
    assert fake.last().url.params.get_list("expand") == ["info", "status"]
    as_json = json.loads(run(fake, "list", "--expand", "info", "--json").stdout)
    assert as_json["orders"]["info"]["config"]["topic"] == "lines"


# --- create / get / config -----------------------------------------------------------------------


def test_create_from_pairs_posts_the_rest_body(fake: FakeWorker) -> None:
    result = run(
        fake, "create", "src", "-c", "connector.class=FileStreamSource", "-c", "topic=a=b", "--initial-state", "paused"
    )
    assert result.exit_code == 0, result.output
    assert json.loads(fake.last().content) == {
        "name": "src",
        "config": {"connector.class": "FileStreamSource", "topic": "a=b"},
        "initial_state": "PAUSED",
    }
    assert "Created source connector src." in result.stdout
    assert "sluice connectors status src" in result.stdout


def test_create_reads_a_rest_body_file_and_pairs_override_it(fake: FakeWorker, tmp_path: Path) -> None:
    file = tmp_path / "src.json"
    file.write_text(json.dumps({"name": "from-file", "config": {"connector.class": "FileStreamSource", "topic": "a"}}))
    assert run(fake, "create", "--file", str(file), "-c", "topic=b").exit_code == 0
    assert json.loads(fake.last().content) == {
        "name": "from-file",
        "config": {"connector.class": "FileStreamSource", "topic": "b"},
    }


def test_create_with_a_name_reuses_a_flat_properties_file_as_a_template(fake: FakeWorker, tmp_path: Path) -> None:
    file = tmp_path / "src.properties"
    file.write_text("# a template\nname=template\nconnector.class=FileStreamSource\ntopic: lines\n")
    result = run(fake, "create", "copy", "--file", str(file), "--json")
    assert result.exit_code == 0, result.output
    sent = json.loads(fake.last().content)
    assert sent["name"] == "copy" and sent["config"] == {
        "name": "copy",
        "connector.class": "FileStreamSource",
        "topic": "lines",
    }
    assert json.loads(result.stdout)["name"] == "copy"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["create", "x"], "give the config with --file and/or -c key=value"),
        (["create", "x", "-c", "topic"], "expected key=value, got 'topic'"),
        (["create", "-c", "topic=t"], "name the connector"),
        (["create", "x", "--file", "/no/such.json"], "does not exist"),
        (["create", "x", "-c", "a=b", "--initial-state", "BORED"], "'BORED' is not one of"),
    ],
)
def test_create_usage_errors_exit_2_without_calling_the_worker(fake: FakeWorker, args: list[str], message: str) -> None:
    result = run(fake, *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert fake.requests == []


def test_create_rejects_a_file_that_is_not_json(fake: FakeWorker, tmp_path: Path) -> None:
    file = tmp_path / "broken.json"
    file.write_text("{name: ")
    result = run(fake, "create", "x", "--file", str(file))
    assert result.exit_code == 2 and "broken.json is not valid JSON" in result.stderr


def test_create_an_existing_connector_prints_the_server_message(fake: FakeWorker) -> None:
    fake.add("src")
    result = run(fake, "create", "src", "-c", "topic=t")
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: Connector src already exists (HTTP 409)"


def test_create_wait_returns_once_running(fake: FakeWorker) -> None:
    result = run(fake, "create", "src", "-c", "topic=t", "--initial-state", "STOPPED", "--wait")
    assert result.exit_code == 0, result.output
    assert fake.connectors["src"]["state"] == "STOPPED"


def test_get_prints_type_tasks_and_sorted_config(fake: FakeWorker) -> None:
    fake.add("src", {"file": "/data/in.txt"}, tasks=2)
    result = run(fake, "get", "src")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "Name:   src",
        "Type:   source",
        "Tasks:  0, 1",
        "Config:",
        "  connector.class=FileStreamSource",
        "  file=/data/in.txt",
        "  name=src",
        "  topic=lines",
    ]


def test_config_without_options_prints_key_value_lines(fake: FakeWorker) -> None:
    fake.add("src", {"password": "${env:DB_PASSWORD}"})
    result = run(fake, "config", "src")
    assert result.stdout.splitlines() == [
        "connector.class=FileStreamSource",
        "name=src",
        "password=${env:DB_PASSWORD}",
        "topic=lines",
    ]
    assert json.loads(run(fake, "config", "src", "--json").stdout)["topic"] == "lines"


def test_config_set_and_unset_patch_only_those_keys(fake: FakeWorker) -> None:
    fake.add("src", {"batch.size": "10"})
    result = run(fake, "config", "src", "--set", "tasks.max=2", "--unset", "batch.size")
    assert result.exit_code == 0, result.output
    assert fake.last().method == "PATCH"
    assert json.loads(fake.last().content) == {"tasks.max": "2", "batch.size": None}
    assert result.stdout.strip() == "Updated the config of src: set tasks.max; removed batch.size."
    assert fake.connectors["src"]["config"] == {
        "connector.class": "FileStreamSource",
        "topic": "lines",
        "name": "src",
        "tasks.max": "2",
    }


def test_config_set_falls_back_to_put_on_workers_without_patch() -> None:
    fake = FakeWorker(supports_patch=False)
    fake.add("src", {"batch.size": "10"})
    result = run(fake, "config", "src", "--set", "topic=other", "--unset", "batch.size")
    assert result.exit_code == 0, result.output
    assert [r.method for r in fake.requests] == ["PATCH", "GET", "PUT"]
    assert json.loads(fake.last().content) == {"connector.class": "FileStreamSource", "topic": "other", "name": "src"}


def test_config_file_replaces_the_whole_config(fake: FakeWorker, tmp_path: Path) -> None:
    fake.add("src", {"batch.size": "10"})
    file = tmp_path / "new.json"
    file.write_text(json.dumps({"connector.class": "FileStreamSource", "topic": "t2"}))
    result = run(fake, "config", "src", "--file", str(file))
    assert result.exit_code == 0, result.output
    assert fake.last().method == "PUT"
    assert fake.connectors["src"]["config"] == {"connector.class": "FileStreamSource", "topic": "t2"}
    assert result.stdout.strip() == "Replaced the config of src."


# --- status / state changes ----------------------------------------------------------------------


def test_status_shows_each_instance_and_the_exception_line_of_a_trace(fake: FakeWorker) -> None:
    fake.add("src", tasks=2)
    fake.connectors["src"]["tasks"][1].update(state="FAILED", trace=PYTHON_TRACE)
    result = run(fake, "status", "src")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "Connector src (source)"
    assert lines[2].split() == ["INSTANCE", "STATE", "WORKER", "ERROR"]
    assert lines[3].split() == ["connector", "RUNNING", "fake:8083"]
    assert lines[4].split() == ["task", "0", "RUNNING", "fake:8083"]
    assert lines[5].split(None, 4) == ["task", "1", "FAILED", "fake:8083", "ValueError: the file /data/in.txt vanished"]
    assert "Traceback" not in result.stdout

    with_traces = run(fake, "status", "src", "--traces").stdout
    assert "--- task 1 trace ---" in with_traces and 'File "/app/worker/runners/source.py"' in with_traces
    assert json.loads(run(fake, "status", "src", "--json").stdout)["tasks"][1]["trace"] == PYTHON_TRACE


def test_status_of_an_unknown_connector_exits_1_with_the_server_message(fake: FakeWorker) -> None:
    result = run(fake, "status", "nope")
    assert result.exit_code == 1
    assert result.stderr.strip() == "Error: Connector nope not found (HTTP 404)"


def test_trace_summary_takes_the_line_that_names_the_exception() -> None:
    assert trace_summary(PYTHON_TRACE) == "ValueError: the file /data/in.txt vanished"
    assert trace_summary(JAVA_TRACE) == "org.apache.kafka.connect.errors.ConnectException: boom"
    assert trace_summary(None) == "" and trace_summary("\n") == ""


@pytest.mark.parametrize(("verb", "state"), [("pause", "PAUSED"), ("resume", "RUNNING"), ("stop", "STOPPED")])
def test_state_commands_put_and_wait_for_the_state(fake: FakeWorker, verb: str, state: str) -> None:
    fake.add("src", state="PAUSED" if verb == "resume" else "RUNNING")
    result = run(fake, verb, "src", "--wait")
    assert result.exit_code == 0, result.output
    assert (fake.requests[0].method, fake.requests[0].url.path) == ("PUT", f"/connectors/src/{verb}")
    assert [r.url.path for r in fake.requests[1:]] == ["/connectors/src/status"] * 2  # polled until it settled
    assert result.stdout.strip() == f"Connector src is {state}."


def test_state_command_without_wait_returns_at_once(fake: FakeWorker) -> None:
    fake.add("src")
    result = run(fake, "pause", "src")
    assert result.exit_code == 0
    assert len(fake.requests) == 1 and "sluice connectors status src" in result.stdout


def test_wait_stops_at_a_failed_task_and_shows_why(fake: FakeWorker) -> None:
    fake.add("src", state="PAUSED")
    fake.connectors["src"]["tasks"][0].update(state="FAILED", trace=PYTHON_TRACE)
    result = run(fake, "resume", "src", "--wait")
    assert result.exit_code == 1
    assert "connector src failed while waiting for RUNNING: ValueError: the file /data/in.txt vanished" in result.stderr


def test_wait_gives_up_after_wait_timeout(fake: FakeWorker) -> None:
    fake.add("src")
    frozen = FakeWorker()  # answers the status polls; the pause went to `fake`, so it never settles
    frozen.add("src")

    def handler(request: httpx.Request) -> httpx.Response:
        return frozen.handle(request) if request.method == "GET" else fake.handle(request)

    result = run(httpx.MockTransport(handler), "pause", "src", "--wait", "--wait-timeout", "0.3")
    assert result.exit_code == 1
    assert "did not reach PAUSED within 0.3s (connector RUNNING, tasks: 1 RUNNING)" in result.stderr


# --- restart / delete ----------------------------------------------------------------------------


def test_restart_without_flags_is_the_legacy_connector_restart(fake: FakeWorker) -> None:
    fake.add("src")
    result = run(fake, "restart", "src")
    assert result.exit_code == 0
    assert str(fake.last().url) == "http://127.0.0.1:8083/connectors/src/restart"
    assert result.stdout.strip() == "Restarted connector src."


def test_restart_only_failed_tasks_shows_what_is_restarting(fake: FakeWorker) -> None:
    fake.add("src", tasks=2)
    fake.connectors["src"]["tasks"][1].update(state="FAILED", trace=JAVA_TRACE)
    result = run(fake, "restart", "src", "--include-tasks", "--only-failed")
    assert result.exit_code == 0, result.output
    assert dict(fake.last().url.params) == {"includeTasks": "true", "onlyFailed": "true"}
    lines = result.stdout.splitlines()
    assert lines[0] == "Restarting src (source)"
    assert lines[-2].split() == ["task", "0", "RUNNING", "fake:8083"]
    assert lines[-1].split() == ["task", "1", "RESTARTING", "fake:8083"]


def test_restart_one_task(fake: FakeWorker) -> None:
    fake.add("src", tasks=2)
    assert run(fake, "restart", "src", "--task", "1").stdout.strip() == "Restarted task 1 of src."
    assert fake.last().url.path == "/connectors/src/tasks/1/restart"
    missing = run(fake, "restart", "src", "--task", "5")
    assert missing.exit_code == 1 and "Unknown task: src-5" in missing.stderr


def test_restart_task_cannot_be_combined_with_connector_flags(fake: FakeWorker) -> None:
    result = run(fake, "restart", "src", "--task", "0", "--only-failed")
    assert result.exit_code == 2 and "cannot be combined" in result.stderr
    assert run(fake, "restart", "src", "--task", "-1").exit_code == 2


def test_delete(fake: FakeWorker) -> None:
    fake.add("src")
    result = run(fake, "delete", "src")
    assert result.exit_code == 0 and result.stdout.strip() == "Deleted connector src."
    assert fake.connectors == {}
    again = run(fake, "delete", "src")
    assert again.exit_code == 1 and "Connector src not found" in again.stderr


def test_names_are_sent_as_one_path_segment(fake: FakeWorker) -> None:
    fake.add("orders/eu west?")
    result = run(fake, "status", "orders/eu west?")
    assert result.exit_code == 0, result.output
    assert fake.last().url.raw_path == b"/connectors/orders%2Feu%20west%3F/status"


# --- offsets -------------------------------------------------------------------------------------


def test_offsets_shows_partition_and_offset(fake: FakeWorker) -> None:
    fake.add("src")
    result = run(fake, "offsets", "src")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "PARTITION                    OFFSET",
        '{"filename":"/data/in.txt"}  {"position":42}',
    ]
    assert json.loads(run(fake, "offsets", "src", "--json").stdout)["offsets"][0]["offset"] == {"position": 42}


def test_offsets_reset_and_set_need_a_stopped_connector(fake: FakeWorker, tmp_path: Path) -> None:
    fake.add("src")
    refused = run(fake, "offsets", "src", "--reset")
    assert refused.exit_code == 1
    assert "must be in the STOPPED state" in refused.stderr

    fake.connectors["src"]["state"] = "STOPPED"
    reset = run(fake, "offsets", "src", "--reset")
    assert reset.exit_code == 0 and fake.last().method == "DELETE"
    assert reset.stdout.strip() == "The offsets for this connector have been reset successfully"

    new = [{"partition": {"filename": "/data/in.txt"}, "offset": {"position": 7}}]
    file = tmp_path / "offsets.json"
    file.write_text(json.dumps(new))  # a bare list is accepted as well as {"offsets": [...]}
    altered = run(fake, "offsets", "src", "--set", str(file))
    assert altered.exit_code == 0, altered.output
    assert fake.last().method == "PATCH" and json.loads(fake.last().content) == {"offsets": new}
    assert "altered successfully" in altered.stdout
    assert fake.connectors["src"]["offsets"] == new


def test_offsets_set_reads_stdin(fake: FakeWorker) -> None:
    fake.add("src", state="STOPPED")
    body = {"offsets": [{"partition": {"filename": "f"}, "offset": None}]}
    result = run(fake, "offsets", "src", "--set", "-", stdin=json.dumps(body))
    assert result.exit_code == 0, result.output
    assert json.loads(fake.last().content) == body


@pytest.mark.parametrize(
    ("content", "message"), [("{oops", "is not valid JSON"), ('{"partitions": []}', 'must hold {"offsets"')]
)
def test_offsets_set_rejects_a_malformed_file(fake: FakeWorker, tmp_path: Path, content: str, message: str) -> None:
    file = tmp_path / "offsets.json"
    file.write_text(content)
    result = run(fake, "offsets", "src", "--set", str(file))
    assert result.exit_code == 2 and message in result.stderr
    assert fake.requests == []


def test_offsets_reset_and_set_are_exclusive(fake: FakeWorker, tmp_path: Path) -> None:
    file = tmp_path / "o.json"
    file.write_text("[]")
    result = run(fake, "offsets", "src", "--reset", "--set", str(file))
    assert result.exit_code == 2 and "not both" in result.stderr


# --- validate / plugins --------------------------------------------------------------------------


def test_validate_prints_each_keys_errors_and_exits_1(fake: FakeWorker, tmp_path: Path) -> None:
    file = tmp_path / "c.json"
    file.write_text(json.dumps({"name": "x", "config": {"connector.class": "FileStreamSource", "file": "7"}}))
    result = run(fake, "validate", "--file", str(file))
    assert result.exit_code == 1
    assert (fake.last().method, fake.last().url.path) == ("PUT", "/connector-plugins/FileStreamSource/config/validate")
    assert json.loads(fake.last().content) == {"connector.class": "FileStreamSource", "file": "7", "name": "x"}
    assert result.stdout.splitlines() == [
        "2 error(s) in the config for FileStreamSource:",
        '  topic: Missing required configuration "topic" which has no default value.',
        "  file: Invalid value 7 for configuration file: must be a path",
    ]


def test_validate_a_good_config(fake: FakeWorker) -> None:
    result = run(fake, "validate", "my-src", "-c", "connector.class=FileStreamSource", "-c", "topic=t")
    assert result.exit_code == 0, result.output
    assert json.loads(fake.last().content)["name"] == "my-src"
    assert result.stdout.strip() == "The config is valid for FileStreamSource."
    assert (
        json.loads(run(fake, "validate", "-c", "connector.class=FileStreamSource", "--json").stdout)["error_count"] == 1
    )


def test_validate_needs_a_connector_class(fake: FakeWorker) -> None:
    result = run(fake, "validate", "-c", "topic=t")
    assert result.exit_code == 2 and "no connector.class" in result.stderr


def test_plugins_lists_what_the_worker_has(fake: FakeWorker) -> None:
    result = run(fake, "plugins")
    assert result.stdout.splitlines()[1].split() == [
        "source",
        "sluice.connectors.source.file.FileStreamSourceConnector",
        "0.1.0",
    ]
    everything = run(fake, "plugins", "--all")
    assert fake.last().url.params["connectorsOnly"] == "false"
    assert "sluice.converters.json.JsonConverter" in everything.stdout


# --- connection, auth, errors --------------------------------------------------------------------


def test_url_comes_from_the_option_or_sluice_url(fake: FakeWorker) -> None:
    run(fake, "--url", "worker-2:9000/", "list")
    assert str(fake.last().url) == "http://worker-2:9000/connectors"
    run(fake, "list", env={"SLUICE_URL": "https://connect.example.com"})
    assert str(fake.last().url) == "https://connect.example.com/connectors"


def test_bearer_token() -> None:
    fake = FakeWorker(token="s3cret")
    fake.add("src")
    assert run(fake, "--token", "s3cret", "list").stdout.strip() == "src"
    assert run(fake, "list", env={"SLUICE_TOKEN": "s3cret"}).exit_code == 0
    denied = run(fake, "--token", "wrong", "list")
    assert denied.exit_code == 1
    assert "Unauthorized (HTTP 401)" in denied.stderr and "--token" in denied.stderr


def test_basic_auth_asks_for_a_missing_password(fake: FakeWorker) -> None:
    assert run(fake, "--user", "ops", "--password", "pw", "list").exit_code == 0
    assert fake.last().headers["authorization"] == "Basic " + base64.b64encode(b"ops:pw").decode()
    prompted = run(fake, "--user", "ops", "list", stdin="typed\n")
    assert prompted.exit_code == 0, prompted.output
    assert fake.last().headers["authorization"] == "Basic " + base64.b64encode(b"ops:typed").decode()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--user", "a", "--password", "b", "--token", "t"], "not both"),
        (["--password", "b"], "--password needs --user"),
    ],
)
def test_conflicting_credentials_are_usage_errors(fake: FakeWorker, args: list[str], message: str) -> None:
    result = run(fake, *args, "list")
    assert result.exit_code == 2 and message in result.stderr


def test_a_worker_that_is_not_running() -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = CliRunner().invoke(main, ["connectors", "--url", f"http://127.0.0.1:{port}", "list"])
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        f"Error: cannot reach the Sluice worker at http://127.0.0.1:{port} "
        "(is it running? start one with `sluice standalone worker.properties`)"
    )


def test_a_worker_that_does_not_answer_in_time() -> None:
    def hang(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    result = run(httpx.MockTransport(hang), "--timeout", "2.5", "list")
    assert result.exit_code == 1
    assert "did not answer within 2.5s (see --timeout)" in result.stderr


def test_an_error_without_connect_body_shows_the_text() -> None:
    result = run(httpx.MockTransport(lambda r: httpx.Response(502, text="Bad Gateway from proxy")), "list")
    assert result.exit_code == 1 and result.stderr.strip() == "Error: Bad Gateway from proxy (HTTP 502)"


def test_help_lists_every_command_with_examples() -> None:
    assert "connectors" in CliRunner().invoke(main, ["--help"]).output
    group = CliRunner().invoke(main, ["connectors", "--help"]).output
    commands = ["list", "create", "get", "config", "status", "pause", "resume", "stop", "restart", "delete", "offsets"]
    for command in [*commands, "validate", "plugins"]:
        assert f"  {command} " in group
    for command in ["list", "create", "config", "status", "pause", "restart", "offsets", "validate"]:
        assert "sluice connectors " + command in CliRunner().invoke(main, ["connectors", command, "--help"]).output
