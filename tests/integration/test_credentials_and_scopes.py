"""Kafka credentials stay with their cluster; a scoped admin reaches only its topics (issue #36, 4 and 5).

Against a real worker (override policy ``All``, so the refusals come from the new rules, not from
the allowlist default) and broker:

* the worker has ``producer.sasl.*`` credentials; a SASL-speaking broker stub on loopback records
  every byte a client sends it. A scoped admin pointing a producer at the stub is refused (400) and
  the stub hears nothing; a cluster admin may, and the stub then receives the connector's own
  credentials but never the worker's;
* the ``orders-spy`` reproduction: a principal with ``admin`` on ``orders-*`` (topics
  ``orders-*``) cannot consume ``pay-events`` nor join ``connect-payments-sink``, and
  ``payments-sink`` keeps receiving every record;
* a RegexRouter routing outside the scope is refused at create; one whose output depends on the
  record (its topic) fails the task at run time with a clear error, and nothing reaches the topic.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.kafka_helpers import OutgoingRecord, consume_all, create_topic, produce, unique_topic_name
from tests.integration.worker_process import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration

WORKER_USER = "worker-user-7f3a"
WORKER_PASSWORD = "worker-secret-9c1e"
USERS = "ops:o-pw,orders:or-pw"
ROLES = "ops:admin,orders:admin:orders-*;topics=orders-*"
SCRIPTED_SOURCE = "tests.plugins.scripted.ScriptedSource"
SCRIPTED_SINK = "tests.plugins.scripted.ScriptedSink"


def _auth(user: str) -> dict[str, str]:
    password = {"ops": "o-pw", "orders": "or-pw"}[user]
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


# -- a broker stub that speaks just enough Kafka to be sent SASL credentials -------------------------


def _response(correlation: int, body: bytes) -> bytes:
    payload = struct.pack(">i", correlation) + body
    return struct.pack(">i", len(payload)) + payload


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


class SaslBrokerStub:
    """A TCP server on loopback that answers ApiVersions, SaslHandshake (PLAIN) and
    SaslAuthenticate (always failed), and keeps every byte it was sent."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = bytearray()
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def bytes(self) -> bytes:
        with self.lock:
            return bytes(self.received)

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise ConnectionError
            with self.lock:
                self.received.extend(chunk)
            data += chunk
        return data

    def _serve(self, conn: socket.socket) -> None:
        raw_sasl = False  # after a v0 SaslHandshake, PLAIN bytes come unframed by Kafka headers
        try:
            while True:
                (size,) = struct.unpack(">i", self._read(conn, 4))
                request = self._read(conn, size)
                if raw_sasl:
                    conn.sendall(b"")  # the client waits for success; a close fails it
                    return
                api_key, version, correlation = struct.unpack(">hhi", request[:8])
                if api_key == 18:  # ApiVersions
                    apis = [(18, 0, 2), (17, 0, 1), (36, 0, 1), (3, 0, 1), (0, 0, 3)]
                    listed = struct.pack(">i", len(apis)) + b"".join(struct.pack(">hhh", *a) for a in apis)
                    if version >= 3:  # not supported here: Kafka answers v0 with error 35 and the list
                        conn.sendall(_response(correlation, struct.pack(">h", 35) + listed))
                    else:
                        body = struct.pack(">h", 0) + listed + (struct.pack(">i", 0) if version >= 1 else b"")
                        conn.sendall(_response(correlation, body))
                elif api_key == 17:  # SaslHandshake
                    raw_sasl = version == 0
                    conn.sendall(_response(correlation, struct.pack(">h", 0) + struct.pack(">i", 1) + _string("PLAIN")))
                elif api_key == 36:  # SaslAuthenticate: refuse
                    body = struct.pack(">h", 58) + _string("refused by stub") + struct.pack(">i", 0)
                    if version >= 1:
                        body += struct.pack(">q", 0)
                    conn.sendall(_response(correlation, body))
                else:
                    return
        except (ConnectionError, OSError, struct.error):
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def stub() -> Iterator[SaslBrokerStub]:
    server = SaslBrokerStub()
    yield server
    server.close()


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the test connectors write their journals: the worker's connector.allowed.paths, which
    a task host may write to."""
    return tmp_path_factory.mktemp("scopes-data")


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory, data_dir: Path) -> WorkerProcess:
    return module_worker_process(
        **{
            "connector.allowed.paths": str(data_dir),
            "rest.auth.basic.users": USERS,
            "rest.auth.roles": ROLES,
            "connector.client.config.override.policy": "All",
            # The worker's own credentials: meaningless to the PLAINTEXT test broker, secret to anyone else.
            "producer.sasl.mechanism": "PLAIN",
            "producer.sasl.username": WORKER_USER,
            "producer.sasl.password": WORKER_PASSWORD,
        },
    )


def _put(worker: WorkerProcess, user: str, name: str, config: dict[str, str]) -> httpx.Response:
    return httpx.put(f"{worker.url}/connectors/{name}/config", json=config, headers=_auth(user), timeout=30)


def _status(worker: WorkerProcess, name: str) -> dict[str, Any]:
    r = httpx.get(f"{worker.url}/connectors/{name}/status", headers=_auth("ops"), timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def _wait_task(worker: WorkerProcess, name: str, state: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = _status(worker, name)
        if body["tasks"] and body["tasks"][0]["state"] == state:
            return body
        time.sleep(0.2)
    raise AssertionError(f"{name} task not {state}: {body}\n{worker.log()}")


def _delete(worker: WorkerProcess, name: str) -> None:
    assert httpx.delete(f"{worker.url}/connectors/{name}", headers=_auth("ops"), timeout=30).status_code == 204


# -- (a) credentials stay with their cluster ---------------------------------------------------------


def test_a_scoped_admin_cannot_point_a_client_at_another_cluster(
    worker: WorkerProcess, stub: SaslBrokerStub, data_dir: Path
) -> None:
    config = {
        "connector.class": SCRIPTED_SOURCE,
        "topic": "orders-leak",
        "journal": str(data_dir / f"{uuid.uuid4().hex}.journal"),
        "producer.override.bootstrap.servers": stub.address,
        "producer.override.sasl.mechanism": "PLAIN",
    }
    r = _put(worker, "orders", "orders-leak", config)
    assert r.status_code == 400, r.text
    assert "producer.override.bootstrap.servers" in r.json()["message"]
    assert "admin role on every connector" in r.json()["message"]
    time.sleep(1)
    assert stub.bytes() == b""


def test_a_client_pointed_elsewhere_never_sends_the_workers_credentials(
    worker: WorkerProcess, stub: SaslBrokerStub, data_dir: Path
) -> None:
    base = {
        "connector.class": SCRIPTED_SOURCE,
        "topic": unique_topic_name("leak"),
        "journal": str(data_dir / f"{uuid.uuid4().hex}.journal"),
        "producer.override.bootstrap.servers": stub.address,
        "producer.override.security.protocol": "SASL_PLAINTEXT",
        "producer.override.sasl.mechanism": "PLAIN",
    }
    # The reproduction: no credentials of its own, so before the fix the worker's went to the stub.
    r = _put(worker, "ops", "other-cluster", base)
    assert r.status_code == 201, r.text
    try:
        time.sleep(3)
        assert WORKER_USER.encode() not in stub.bytes()
        assert WORKER_PASSWORD.encode() not in stub.bytes()
        # With credentials of its own the client does authenticate to the stub (so the stub listens
        # and records), and still the worker's never appear.
        own = {
            **base,
            "producer.override.sasl.username": "connector-own-user",
            "producer.override.sasl.password": "connector-own-pw",
        }
        assert _put(worker, "ops", "other-cluster", own).status_code == 200
        deadline = time.monotonic() + 15
        while b"connector-own-user" not in stub.bytes() and time.monotonic() < deadline:
            time.sleep(0.2)
        received = stub.bytes()
        assert b"connector-own-user" in received, (received, worker.log())
        assert WORKER_USER.encode() not in received
        assert WORKER_PASSWORD.encode() not in received
    finally:
        _delete(worker, "other-cluster")


# -- (b) the orders-spy reproduction ------------------------------------------------------------------


def test_a_scoped_admin_cannot_read_another_teams_topic_or_join_its_group(
    kafka, worker: WorkerProcess, data_dir: Path
) -> None:
    pay = unique_topic_name("pay-events")
    create_topic(kafka.bootstrap_servers, pay)
    journal = data_dir / f"payments-{uuid.uuid4().hex}.journal"
    r = _put(worker, "ops", "payments-sink", {"connector.class": SCRIPTED_SINK, "topics": pay, "journal": str(journal)})
    assert r.status_code == 201, r.text
    try:
        _wait_task(worker, "payments-sink", "RUNNING")
        spy_journal = data_dir / f"spy-{uuid.uuid4().hex}.journal"
        for extra in ({"topics": pay}, {"topics": "orders-x", "consumer.override.group.id": "connect-payments-sink"}):
            r = _put(
                worker, "orders", "orders-spy", {"connector.class": SCRIPTED_SINK, "journal": str(spy_journal), **extra}
            )
            assert r.status_code == 400, r.text
            assert (
                next(iter(extra if "consumer.override.group.id" not in extra else ["consumer.override.group.id"]))
                in r.json()["message"]
            )
        assert httpx.get(f"{worker.url}/connectors/orders-spy", headers=_auth("ops"), timeout=10).status_code == 404

        produce(kafka.bootstrap_servers, pay, [OutgoingRecord(key=f"k{i}", value=f"v{i}") for i in range(500)])
        deadline = time.monotonic() + 30
        got: set[int] = set()
        while len(got) < 500 and time.monotonic() < deadline:
            if journal.exists():
                got = {
                    o
                    for line in journal.read_text().splitlines()
                    if (e := json.loads(line))["event"] == "put"
                    for o in e["offsets"]
                }
            time.sleep(0.2)
        assert got == set(range(500)), worker.log()
        assert not spy_journal.exists()
    finally:
        _delete(worker, "payments-sink")


# -- (c) routing transforms -----------------------------------------------------------------------------


def test_a_router_outside_the_scope_is_refused_at_create(worker: WorkerProcess, data_dir: Path) -> None:
    config = {
        "connector.class": SCRIPTED_SOURCE,
        "topic": "orders-in",
        "journal": str(data_dir / f"{uuid.uuid4().hex}.journal"),
        "transforms": "route",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": ".*",
        "transforms.route.replacement": "pay-events",
    }
    r = _put(worker, "orders", "orders-router", config)
    assert r.status_code == 400, r.text
    assert "transforms.route.replacement" in r.json()["message"]


def test_a_record_routed_outside_the_scope_at_run_time_fails_the_task(
    kafka, worker: WorkerProcess, data_dir: Path
) -> None:
    target = unique_topic_name("pay")
    # The route depends on the record: its topic orders-<target> becomes <target>. Not provable at create.
    config = {
        "connector.class": SCRIPTED_SOURCE,
        "topic": f"orders-{target}",
        "count": "3",
        "journal": str(data_dir / f"{uuid.uuid4().hex}.journal"),
        "transforms": "route",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": "orders-(.*)",
        "transforms.route.replacement": "$1",
    }
    r = _put(worker, "orders", "orders-runtime", config)
    assert r.status_code == 201, r.text
    try:
        status = _wait_task(worker, "orders-runtime", "FAILED")
        trace = status["tasks"][0]["trace"]
        assert f"routed to topic '{target}', outside the topics this connector may write (orders-*)" in trace, trace
        # Refused before topic creation too: the topic does not even exist.
        with pytest.raises(TimeoutError, match="Unknown topic"):
            consume_all(kafka.bootstrap_servers, target, expected_count=1, timeout=2)
    finally:
        _delete(worker, "orders-runtime")
