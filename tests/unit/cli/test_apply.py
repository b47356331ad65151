"""``sluice apply`` and ``export`` against an in-process fake of the Connect REST API: which requests
each run sends (an unchanged connector gets none that change it), and what a user reads on failure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
from click.testing import CliRunner, Result

from sluice.cli.main import main


class FakeCluster:
    """Connectors in a dict; validation refuses ``tasks.max`` values that are not numbers."""

    def __init__(self, connectors: dict[str, dict[str, str]] | None = None) -> None:
        self.connectors = {name: {**config, "name": name} for name, config in (connectors or {}).items()}
        self.changes: list[str] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = unquote(request.url.path)
        parts = path.strip("/").split("/")
        if request.method == "GET" and path == "/connectors":
            body = {n: {"info": {"name": n, "config": c}, "status": {"connector": {"state": "RUNNING"}}}
                    for n, c in self.connectors.items()}
            return httpx.Response(200, json=body)
        if request.method == "PUT" and parts[0] == "connector-plugins":
            config = json.loads(request.content)
            errors = [] if str(config.get("tasks.max", "1")).isdigit() else ["Invalid value many"]
            values = [{"definition": {"name": "tasks.max", "type": "INT"}, "value": {"name": "tasks.max", "errors": errors}}]
            return httpx.Response(200, json={"name": parts[1], "error_count": len(errors), "configs": values})
        if request.method == "PUT" and parts[-1] == "config":
            self.changes.append(f"PUT {parts[1]}")
            created = parts[1] not in self.connectors
            self.connectors[parts[1]] = json.loads(request.content)
            return httpx.Response(201 if created else 200, json={"name": parts[1]})
        if request.method == "DELETE":
            self.changes.append(f"DELETE {parts[1]}")
            del self.connectors[parts[1]]
            return httpx.Response(204)
        return httpx.Response(404, json={"error_code": 404, "message": f"no route {request.method} {path}"})


def invoke(cluster: FakeCluster, *args: str) -> Result:
    result = CliRunner().invoke(main, list(args), obj=httpx.MockTransport(cluster.handle))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result


def write(directory: Path, name: str, **config: Any) -> Path:
    path = directory / f"{name}.json"
    path.write_text(json.dumps({"name": name, "config": {"connector.class": "FileStreamSource", **config}}))
    return path


def test_only_what_differs_is_sent(tmp_path: Path) -> None:
    cluster = FakeCluster({"same": {"connector.class": "FileStreamSource", "topic": "a"},
                           "old": {"connector.class": "FileStreamSource", "topic": "b"},
                           "stray": {"connector.class": "FileStreamSource"}})
    write(tmp_path, "same", topic="a")
    write(tmp_path, "old", topic="c")
    write(tmp_path, "new", topic="d")
    assert invoke(cluster, "apply", str(tmp_path), "--dry-run").exit_code == 0
    assert cluster.changes == []
    result = invoke(cluster, "apply", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert cluster.changes == ["PUT new", "PUT old"]
    assert invoke(cluster, "apply", str(tmp_path), "--prune").exit_code == 0
    assert cluster.changes == ["PUT new", "PUT old", "DELETE stray"]
    again = invoke(cluster, "apply", str(tmp_path), "--prune")
    assert again.exit_code == 0 and "Plan: 0 to create, 0 to update, 0 to delete, 3 unchanged." in again.stdout
    assert len(cluster.changes) == 3


def test_a_validation_error_stops_every_change(tmp_path: Path) -> None:
    cluster = FakeCluster()
    write(tmp_path, "fine", topic="a")
    bad = write(tmp_path, "bad", **{"tasks.max": "many"})
    result = invoke(cluster, "apply", str(tmp_path))
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        f"Error: {bad}: config.tasks.max: Invalid value many",
        "1 error(s) found by validation; nothing was changed.",
    ]
    assert cluster.changes == []


def test_an_unreachable_worker_is_an_error_that_says_so(tmp_path: Path) -> None:
    write(tmp_path, "a", topic="a")
    result = CliRunner().invoke(main, ["apply", str(tmp_path), "--url", "http://127.0.0.1:9", "--timeout", "2"])
    assert result.exit_code == 1
    assert "cannot reach the Sluice worker at http://127.0.0.1:9" in result.stderr


def test_export_writes_files_apply_reads_back_unchanged(tmp_path: Path) -> None:
    cluster = FakeCluster({"a b": {"connector.class": "FileStreamSource", "topic": "t", "tasks.max": "2"}})
    result = invoke(cluster, "export", str(tmp_path / "out"), "--format", "yaml")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "a_b.yaml").read_text() == (
        "name: a b\nconfig:\n  connector.class: FileStreamSource\n  tasks.max: '2'\n  topic: t\n"
    )
    again = invoke(cluster, "apply", str(tmp_path / "out"))
    assert "1 unchanged" in again.stdout and cluster.changes == []
