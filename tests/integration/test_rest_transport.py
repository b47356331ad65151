"""The REST listener of a real ``sluice standalone`` process: slow clients, connection caps, the secure default.

Clients that must count as different addresses connect from different loopback addresses
(127.0.0.2, 127.0.0.3 …), which Linux routes to the worker's 127.0.0.1 listener.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.worker_process import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
#: Added to a configured timeout before a test gives up: slack for a loaded machine, not a measurement.
MARGIN_S = 5.0
HEADER_TIMEOUT_S = 2.0
BODY_TIMEOUT_S = 2.0
PER_CLIENT_MAX = 4


def _worker(workdir: Path, bootstrap: str, settings: dict[str, Any], mode: str = "standalone") -> WorkerProcess:
    return WorkerProcess(workdir, bootstrap, mode=mode, **settings)


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory) -> WorkerProcess:
    return module_worker_process(**{
        "rest.request.header.timeout.ms": str(int(HEADER_TIMEOUT_S * 1000)),
        "rest.request.body.timeout.ms": str(int(BODY_TIMEOUT_S * 1000)),
        "rest.connections.per.client.max": str(PER_CLIENT_MAX),
    })


def _client(worker: WorkerProcess, source: str) -> httpx.Client:
    return httpx.Client(base_url=worker.url, timeout=5, transport=httpx.HTTPTransport(local_address=source))


def _connect(worker: WorkerProcess, source: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", worker.port), timeout=5, source_address=(source, 0))


def _server_closed(sock: socket.socket, wait_s: float) -> bool:
    """Whether the server has closed ``sock``, waiting at most ``wait_s`` for it."""
    sock.settimeout(wait_s)
    try:
        return sock.recv(4096) == b""
    except TimeoutError:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_a_client_that_never_finishes_its_headers_is_cut_off_while_others_are_served(worker: WorkerProcess) -> None:
    slow = _connect(worker, "127.0.0.1")
    slow.sendall(b"GET /connectors HTTP/1.1\r\nHost: worker\r\n")
    started = time.monotonic()
    closed = False
    statuses = []
    with _client(worker, "127.0.0.2") as other, slow:
        while not closed and time.monotonic() - started < HEADER_TIMEOUT_S + MARGIN_S:
            try:
                slow.sendall(b"X-Still-Typing: 1\r\n")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            statuses.append(other.get("/connectors").status_code)
            closed = _server_closed(slow, 0.5)
    assert closed, "the worker kept a connection whose headers never ended"
    assert statuses and set(statuses) == {200}


def test_a_trickling_body_gets_408_with_connects_error_body(worker: WorkerProcess) -> None:
    with _connect(worker, "127.0.0.4") as sock:
        sock.sendall(
            b"POST /connectors HTTP/1.1\r\nHost: worker\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        started = time.monotonic()
        received = b""
        sock.settimeout(0.2)
        while not received and time.monotonic() - started < BODY_TIMEOUT_S + MARGIN_S:
            try:
                sock.sendall(b" ")
                received = sock.recv(65536)
            except TimeoutError:
                continue
        sock.settimeout(5)
        while b"\r\n\r\n" in received and not received.rstrip().endswith(b"}"):
            more = sock.recv(65536)
            if not more:
                break
            received += more
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408 "), received
    assert b"connection: close" in head.lower()
    error = orjson.loads(body)
    assert error == {"error_code": 408, "message": f"Request body not received within {BODY_TIMEOUT_S * 1000:.0f} ms"}


def test_connections_beyond_the_per_client_cap_are_closed_at_once(worker: WorkerProcess) -> None:
    held = [_connect(worker, "127.0.0.3") for _ in range(PER_CLIENT_MAX)]
    extra = _connect(worker, "127.0.0.3")
    try:
        # Well under the header timeout: the extra connection is refused, not timed out.
        assert _server_closed(extra, HEADER_TIMEOUT_S / 2)
        held[0].sendall(b"GET /connectors HTTP/1.1\r\nHost: worker\r\n\r\n")
        held[0].settimeout(5)
        assert held[0].recv(65536).startswith(b"HTTP/1.1 200 ")
        with _client(worker, "127.0.0.2") as other:
            assert other.get("/connectors").status_code == 200
    finally:
        for sock in (*held, extra):
            sock.close()


def _exposed(worker: WorkerProcess) -> WorkerProcess:
    """``worker`` listening on every interface (0.0.0.0) instead of 127.0.0.1, on the same port."""
    text = worker.props_path.read_text()
    assert f"listeners={worker.url}\n" in text
    worker.props_path.write_text(text.replace(f"listeners={worker.url}\n", f"listeners=http://0.0.0.0:{worker.port}\n"))
    return worker


@pytest.mark.parametrize("mode", ["standalone", "distributed"])
def test_an_exposed_listener_without_authentication_refuses_to_start(tmp_path: Path, mode: str) -> None:
    # Refused while reading the configuration, before any Kafka connection: no broker needed.
    cluster = {"group.id": "g", "config.storage.topic": "c", "offset.storage.topic": "o", "status.storage.topic": "s"}
    worker = _exposed(_worker(tmp_path, "127.0.0.1:1", cluster, mode))
    result = subprocess.run(
        [sys.executable, "-m", "sluice.cli", mode, str(worker.props_path)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2, result.stderr
    for key in ("rest.auth.basic.users", "rest.auth.bearer.tokens", "listeners.https.ssl.client.authentication",
                "rest.auth.allow.unauthenticated=true"):
        assert key in result.stderr


def test_the_opt_out_starts_an_exposed_worker_with_a_warning(kafka: KafkaBroker, tmp_path: Path) -> None:
    worker = _exposed(_worker(tmp_path, kafka.bootstrap_servers, {"rest.auth.allow.unauthenticated": "true"}))
    worker.start()
    try:
        assert httpx.get(f"{worker.url}/connectors", timeout=5).status_code == 200
        warnings = [line for line in worker.log().splitlines() if "] WARNING " in line]
        assert any("rest.auth.allow.unauthenticated=true" in line for line in warnings), worker.log()
    finally:
        assert worker.stop() == 0, worker.log()


def test_an_exposed_worker_with_basic_users_starts_and_asks_for_them(kafka: KafkaBroker, tmp_path: Path) -> None:
    worker = _exposed(_worker(tmp_path, kafka.bootstrap_servers, {"rest.auth.basic.users": "alice:s3cret"}))
    worker.start()
    try:
        assert httpx.get(f"{worker.url}/connectors", timeout=5).status_code == 401
        assert httpx.get(f"{worker.url}/connectors", auth=("alice", "s3cret"), timeout=5).status_code == 200
        assert "rest.auth.allow.unauthenticated" not in worker.log()
    finally:
        assert worker.stop() == 0, worker.log()
