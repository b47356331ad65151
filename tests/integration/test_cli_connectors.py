"""``sluice connectors`` driving real worker processes over HTTP: a connector's whole lifecycle
(create, pause, resume, restart, stop, rewind its offsets, delete), validation and auth."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from sluice.cli.main import main
from tests.integration.kafka_helpers import consume_all, create_topic, unique_topic_name
from tests.integration.worker_process import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory) -> WorkerProcess:
    return module_worker_process()


def sluice(worker: WorkerProcess, *args: str, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(main, ["connectors", "--url", worker.url, *args], env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def ok(worker: WorkerProcess, *args: str) -> str:
    result = sluice(worker, *args)
    assert result.exit_code == 0, f"sluice connectors {' '.join(args)} exited {result.exit_code}:\n{result.output}"
    return result.stdout


def table(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines()]


def test_connector_lifecycle_through_the_cli(worker: WorkerProcess, kafka, tmp_path: Path) -> None:
    topic = unique_topic_name("cli")
    # Created up front: a broker that just started may take a moment to accept the task's first produce.
    create_topic(kafka.bootstrap_servers, topic)
    source = tmp_path / "in.txt"
    source.write_text("alpha\nbeta\n")
    conn = tmp_path / "cli-src.json"
    conn.write_text(
        json.dumps(
            {"name": "cli-src", "config": {"connector.class": "FileStreamSource", "file": str(source), "topic": topic}}
        )
    )

    assert sluice(worker, "list").stdout == ""
    assert ok(worker, "create", "--file", str(conn), "--wait") == "Created source connector cli-src.\n"
    assert ok(worker, "list") == "cli-src\n"
    assert table(ok(worker, "list", "--expand", "status")) == [
        ["NAME", "TYPE", "STATE", "TASKS", "WORKER"],
        ["cli-src", "source", "RUNNING", "1", "RUNNING", f"127.0.0.1:{worker.port}"],
    ]
    assert table(ok(worker, "status", "cli-src")) == [
        ["Connector", "cli-src", "(source)"],
        [],
        ["INSTANCE", "STATE", "WORKER", "ERROR"],
        ["connector", "RUNNING", f"127.0.0.1:{worker.port}"],
        ["task", "0", "RUNNING", f"127.0.0.1:{worker.port}"],
    ]
    assert [r.value for r in consume_all(kafka.bootstrap_servers, topic, expected_count=2)] == [b"alpha", b"beta"]

    assert ok(worker, "pause", "cli-src", "--wait") == "Connector cli-src is PAUSED.\n"
    assert json.loads(ok(worker, "status", "cli-src", "--json"))["tasks"][0]["state"] == "PAUSED"
    assert ok(worker, "resume", "cli-src", "--wait") == "Connector cli-src is RUNNING.\n"

    assert ok(worker, "restart", "cli-src") == "Restarted connector cli-src.\n"
    assert ok(worker, "restart", "cli-src", "--task", "0") == "Restarted task 0 of cli-src.\n"
    worker.wait_running("cli-src")
    with source.open("a") as f:
        f.write("gamma\n")
    assert [r.value for r in consume_all(kafka.bootstrap_servers, topic, expected_count=3)][-1] == b"gamma"

    offsets = json.loads(ok(worker, "offsets", "cli-src", "--json"))["offsets"]
    assert [o["partition"] for o in offsets] == [{"filename": str(source)}]
    assert table(ok(worker, "offsets", "cli-src"))[0] == ["PARTITION", "OFFSET"]

    # Rewind to "beta" (byte 6): after a resume the task reads beta and gamma again.
    assert ok(worker, "stop", "cli-src", "--wait") == "Connector cli-src is STOPPED.\n"
    rewind = tmp_path / "rewind.json"
    rewind.write_text(json.dumps({"offsets": [{"partition": {"filename": str(source)}, "offset": {"position": 6}}]}))
    ok(worker, "offsets", "cli-src", "--set", str(rewind))
    assert json.loads(ok(worker, "offsets", "cli-src", "--json"))["offsets"][0]["offset"] == {"position": 6}
    assert ok(worker, "resume", "cli-src", "--wait") == "Connector cli-src is RUNNING.\n"
    records = consume_all(kafka.bootstrap_servers, topic, expected_count=5)
    assert [r.value for r in records] == [b"alpha", b"beta", b"gamma", b"beta", b"gamma"]

    restarted = ok(worker, "restart", "cli-src", "--include-tasks", "--only-failed")
    assert restarted.splitlines()[0] == "Restarting cli-src (source)"  # nothing failed, so nothing is RESTARTING
    assert "RESTARTING" not in restarted

    assert ok(worker, "delete", "cli-src") == "Deleted connector cli-src.\n"
    gone = sluice(worker, "status", "cli-src")
    assert gone.exit_code == 1
    assert gone.stderr == "Error: Connector cli-src not found (HTTP 404)\n"
    assert sluice(worker, "list").stdout == ""


def test_the_server_message_reaches_the_user(worker: WorkerProcess, tmp_path: Path) -> None:
    result = sluice(worker, "create", "bad", "-c", "connector.class=FileStreamSource", "-c", f"file={tmp_path / 'x'}")
    assert result.exit_code == 1
    assert "topic" in result.stderr and "(HTTP 400)" in result.stderr
    assert "bad" not in sluice(worker, "list").stdout.split()


def test_plugins_come_from_the_worker(worker: WorkerProcess) -> None:
    rows = table(ok(worker, "plugins"))
    assert ["source", "sluice.connectors.source.file.connector.FileStreamSourceConnector"] in [r[:2] for r in rows]


def test_validate_names_the_bad_keys(worker: WorkerProcess, tmp_path: Path) -> None:
    config = ["-c", "connector.class=FileStreamSource", "-c", f"file={tmp_path / 'in.txt'}"]
    invalid = sluice(worker, "validate", "checked", *config, "-c", "tasks.max=many")
    assert invalid.exit_code == 1
    lines = invalid.stdout.splitlines()
    assert lines[0].startswith("2 error(s) in the config for ")
    assert {line.split(":")[0].strip() for line in lines[1:]} == {"topic", "tasks.max"}
    assert ok(worker, "validate", "checked", *config, "-c", "topic=t").startswith("The config is valid for ")
    assert "checked" not in sluice(worker, "list").stdout.split()  # validating creates nothing


def test_a_worker_that_requires_a_token(worker_process: WorkerFactory) -> None:
    auth: dict[str, Any] = {"rest.auth.bearer.tokens": "cli-token"}
    secured = worker_process(**auth)
    refused = sluice(secured, "list")
    assert refused.exit_code == 1
    assert "(HTTP 401)" in refused.stderr and "--token" in refused.stderr
    assert sluice(secured, "--token", "cli-token", "list").exit_code == 0
    assert sluice(secured, "list", env={"SLUICE_TOKEN": "cli-token"}).exit_code == 0
