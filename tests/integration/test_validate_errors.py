"""Validate and status traces say what kind of connectivity failure happened, never what the far
side said (issue #36, item 6).

Small servers on loopback stand in for what a hostile caller would aim ``connection.url`` at: an
HTTP service whose 401 and 500 bodies hold a secret, a port that answers garbage, a port that
accepts and says nothing, and a closed port. For the Elasticsearch sink and the JDBC connectors
(PostgreSQL and MySQL URLs) the validate answer never holds the secret, and each failure is one of
the fixed categories, whatever the far side is. A JDBC source task aimed at the garbage port fails
with the category in its status trace, not the bytes it read.
"""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.kafka_helpers import unique_topic_name
from tests.integration.worker_process import WorkerProcess, free_port

MARKER = "SECRET-MARKER-c0ffee"
TIMEOUT_S = 30


class _SecretHttp(http.server.BaseHTTPRequestHandler):
    """``/`` of the 401 server and every path of the 500 server answer a body with the marker."""

    status = 401

    def do_GET(self) -> None:
        body = f'{{"error": "{MARKER}", "reason": "{MARKER} internal details"}}'.encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class _Status500(_SecretHttp):
    status = 500


class _Tcp:
    """Accepts connections; ``garbage`` sends the marker and hangs up, otherwise stays silent."""

    def __init__(self, garbage: bool) -> None:
        self.garbage = garbage
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            if self.garbage:
                threading.Thread(target=self._babble, args=(conn,), daemon=True).start()
            else:
                self.held.append(conn)

    @staticmethod
    def _babble(conn: socket.socket) -> None:
        try:
            conn.sendall(f"{MARKER} garbage \x00\x01\x02 {MARKER}\r\n".encode())
            time.sleep(0.3)
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture(scope="module")
def far_sides() -> Iterator[dict[str, int]]:
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), h) for h in (_SecretHttp, _Status500)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    garbage, silent = _Tcp(garbage=True), _Tcp(garbage=False)
    try:
        yield {
            "http401": servers[0].server_address[1],
            "http500": servers[1].server_address[1],
            "garbage": garbage.port,
            "silent": silent.port,
            "closed": free_port(),
        }
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
        garbage.close()
        silent.close()


@pytest.fixture(scope="module")
def worker(kafka, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerProcess]:
    settings: dict[str, Any] = {"task.executor": "thread"}
    process = WorkerProcess(tmp_path_factory.mktemp("validate-errors"), kafka.bootstrap_servers, **settings).start()
    try:
        yield process
    finally:
        process.stop()


def _errors(worker: WorkerProcess, config: dict[str, str]) -> dict[str, list[str]]:
    plugin = config["connector.class"]
    r = httpx.put(f"{worker.url}/connector-plugins/{plugin}/config/validate", json=config, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    assert MARKER not in r.text
    return {c["value"]["name"]: c["value"]["errors"] for c in r.json()["configs"] if c["value"]["errors"]}


def test_elasticsearch_validate_gives_categories_not_bodies(worker: WorkerProcess, far_sides: dict[str, int]) -> None:
    base = {
        "connector.class": "ElasticsearchSinkConnector",
        "topics": "t",
        "connection.timeout.ms": "1000",
        "read.timeout.ms": "1000",
    }
    expected = {
        "http401": "authentication failed (HTTP 401)",
        "http500": "HTTP 500",
        "garbage": "not an Elasticsearch server",
        "silent": "timed out",
        "closed": "connection refused",
    }
    for name, category in expected.items():
        port = far_sides[name]
        errors = _errors(worker, {**base, "connection.url": f"http://127.0.0.1:{port}"})
        assert errors == {"connection.url": [f"connection.url: cannot connect to 127.0.0.1:{port}: {category}"]}, name


@pytest.mark.parametrize(("scheme", "service"), [("postgresql", "a PostgreSQL server"), ("mysql", "a MySQL server")])
def test_jdbc_validate_gives_categories_not_driver_text(
    worker: WorkerProcess, far_sides: dict[str, int], scheme: str, service: str
) -> None:
    expected = {
        "garbage": f"not {service}",
        "silent": "timed out",
        "closed": "connection refused",
    }
    # Both connectors share the check: the sink meets every far side, the source two of them.
    for connector, names in (("JdbcSinkConnector", list(expected)), ("JdbcSourceConnector", ["garbage", "closed"])):
        for name in names:
            category = expected[name]
            port = far_sides[name]
            config = {
                "connector.class": connector,
                "connection.url": f"jdbc:{scheme}://127.0.0.1:{port}/db",
                "connection.user": "u",
                "connection.password": "pw-never-shown",
                "topics": "t",
                "topic.prefix": "p-",
                "mode": "bulk",
                "query": "SELECT 1",
            }
            if connector == "JdbcSinkConnector":
                del config["topic.prefix"], config["mode"], config["query"]
            errors = _errors(worker, config)
            assert errors == {"connection.url": [f"connection.url: cannot connect to 127.0.0.1:{port}: {category}"]}, (
                connector,
                name,
                errors,
            )


def test_a_jdbc_source_task_shows_the_category_in_its_trace(worker: WorkerProcess, far_sides: dict[str, int]) -> None:
    name = unique_topic_name("jdbc-babble")
    port = far_sides["garbage"]
    config = {
        "connector.class": "JdbcSourceConnector",
        "connection.url": f"jdbc:postgresql://127.0.0.1:{port}/db",
        "connection.user": "u",
        "connection.password": "pw-never-shown",
        "connection.attempts": "1",
        "mode": "bulk",
        "query": "SELECT 1",
        "topic.prefix": name,
        "tasks.max": "1",
    }
    created = httpx.put(f"{worker.url}/connectors/{name}/config", json=config, timeout=TIMEOUT_S)
    assert created.status_code == 201, created.text
    try:
        deadline = time.monotonic() + TIMEOUT_S
        trace = ""
        while time.monotonic() < deadline:
            status = httpx.get(f"{worker.url}/connectors/{name}/status", timeout=TIMEOUT_S)
            tasks = status.json().get("tasks") or []
            if tasks and tasks[0]["state"] in ("FAILED", "RESTARTING") and tasks[0].get("trace"):
                trace = tasks[0]["trace"]
                break
            time.sleep(0.2)
        assert f"connection.url: cannot connect to 127.0.0.1:{port}: not a PostgreSQL server" in trace, status.text
        assert MARKER not in status.text and "garbage" not in status.text, trace
    finally:
        httpx.delete(f"{worker.url}/connectors/{name}", timeout=TIMEOUT_S)
