"""Issue #36 (item 3) against a real worker and broker: a database URL reaches no local file.

Small fake servers on loopback record every byte they receive:

- a MySQL server that answers every query with a LOCAL INFILE request for a secret file: a URL with
  ``local_infile=1`` (or ``read_default_file=``) is refused by validate and create before any
  connection, and an allowed URL connects but never sends the file;
- a PostgreSQL server that asks for a cleartext password: a URL with ``passfile=<file>`` outside the
  allowed paths is refused before any connection, and with the worker's ``PGPASSFILE`` holding a
  wildcard password, neither the JDBC connectors nor the CDC source send it;
- ``jdbc:sqlite:`` outside ``connector.allowed.paths`` is refused, and no file is created.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.worker_process import WorkerFactory, WorkerProcess

pytestmark = pytest.mark.integration

SECRET = "s3cret-marker-7f3a"  # in the files the worker must not send anywhere
WORKER_PASSWORD = "worker-pgpass-9c1e"  # the worker's own ~/.pgpass-style password


class FakeServer:
    """A loopback TCP server that runs ``converse`` per connection and records what it received."""

    def __init__(self, converse: Any) -> None:
        self._converse = converse
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.sock.getsockname()[1])
        self.connections = 0
        self.received = bytearray()
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            self._converse(conn, self._recv(conn))
        except (OSError, struct.error, ValueError):
            pass
        finally:
            conn.close()

    def _recv(self, conn: socket.socket) -> Any:
        def recv_exact(n: int) -> bytes:
            data = b""
            while len(data) < n:
                chunk = conn.recv(n - len(data))
                if not chunk:
                    raise OSError("closed")
                data += chunk
                with self._lock:
                    self.received += chunk
            return data

        return recv_exact

    def reset(self) -> None:
        with self._lock:
            self.connections = 0
            self.received = bytearray()

    def close(self) -> None:
        self.sock.close()


def mysql_asking_for(path: str) -> Any:
    """A MySQL server: handshake, accept any login, answer every query with LOCAL INFILE ``path``."""

    def packet(seq: int, payload: bytes) -> bytes:
        return struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload

    def converse(conn: socket.socket, recv: Any) -> None:
        caps = 0x1 | 0x8 | 0x80 | 0x200 | 0x2000 | 0x8000 | 0x80000  # incl. CLIENT_LOCAL_FILES
        greeting = (
            b"\x0a5.7.99-fake\x00" + struct.pack("<I", 7) + b"abcdefgh\x00" + struct.pack("<H", caps & 0xFFFF)
            + b"\x21" + struct.pack("<H", 2) + struct.pack("<H", caps >> 16) + b"\x15" + b"\x00" * 10
            + b"ijklmnopqrst\x00" + b"mysql_native_password\x00"
        )  # fmt: skip
        conn.sendall(packet(0, greeting))
        header = recv(4)
        recv(struct.unpack("<I", header[:3] + b"\x00")[0])  # the login
        conn.sendall(packet(header[3] + 1, b"\x00\x00\x00\x02\x00\x00\x00"))  # OK
        ok = b"\x00\x00\x00\x02\x00\x00\x00"
        while True:
            header = recv(4)
            query = recv(struct.unpack("<I", header[:3] + b"\x00")[0])
            if query[1:5].upper() == b"SET ":  # session set-up (SET NAMES, SET AUTOCOMMIT): OK
                conn.sendall(packet(1, ok))
                continue
            conn.sendall(packet(1, b"\xfb" + path.encode()))  # any other query: "send me this file"
            while True:  # a client that obeys sends the file, then an empty packet
                header = recv(4)
                if not recv(struct.unpack("<I", header[:3] + b"\x00")[0]):
                    break
            conn.sendall(packet(header[3] + 1, ok))

    return converse


def postgres_asking_for_password(conn: socket.socket, recv: Any) -> None:
    """A PostgreSQL server: no TLS or GSS, then a cleartext password request; records the answer."""
    while True:
        length = struct.unpack("!I", recv(4))[0]
        body = recv(length - 4)
        code = struct.unpack("!I", body[:4])[0]
        if code in (80877103, 80877104):  # SSLRequest, GSSENCRequest
            conn.sendall(b"N")
            continue
        break
    conn.sendall(b"R" + struct.pack("!II", 8, 3))  # AuthenticationCleartextPassword
    kind = recv(1)
    if kind == b"p":
        recv(struct.unpack("!I", recv(4))[0] - 4)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one directory connectors may use."""
    return tmp_path_factory.mktemp("url-data")


@pytest.fixture(scope="module")
def outside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory outside the grant, holding files with the secret in them."""
    where = tmp_path_factory.mktemp("url-outside")
    (where / "secret.txt").write_text(f"{SECRET}\n")
    (where / "my.cnf").write_text(f"[client]\npassword={SECRET}\nhost={SECRET}\n")
    (where / "pgpass").write_text(f"*:*:*:*:{SECRET}\n")
    (where / "pgpass").chmod(0o600)
    (where / "worker-pgpass").write_text(f"*:*:*:*:{WORKER_PASSWORD}\n")
    (where / "worker-pgpass").chmod(0o600)
    return where


@pytest.fixture(scope="module")
def worker(module_worker_process: WorkerFactory, data_dir: Path, outside: Path) -> WorkerProcess:
    """Local paths confined to ``data_dir``; libpq's ``PGPASSFILE`` names a wildcard password of the worker's."""
    settings: dict[str, Any] = {"connector.allowed.paths": str(data_dir)}
    return module_worker_process(
        env={"PGPASSFILE": str(outside / "worker-pgpass"), "PGSSLCERT": str(outside / "secret.txt")},
        **settings,
    )


@pytest.fixture(scope="module")
def fake_mysql(outside: Path) -> Iterator[FakeServer]:
    server = FakeServer(mysql_asking_for(str(outside / "secret.txt")))
    yield server
    server.close()


@pytest.fixture(scope="module")
def fake_postgres() -> Iterator[FakeServer]:
    server = FakeServer(postgres_asking_for_password)
    yield server
    server.close()


def source(url: str) -> dict[str, Any]:
    return {"connector.class": "JdbcSourceConnector", "connection.url": url, "mode": "bulk", "topic.prefix": "u-"}


def validate(worker: WorkerProcess, config: dict[str, Any]) -> dict[str, list[str]]:
    """``PUT …/config/validate``: the errors per key."""
    cls = config["connector.class"]
    r = httpx.put(f"{worker.url}/connector-plugins/{cls}/config/validate", json=config, timeout=30)
    assert r.status_code == 200, r.text
    assert SECRET not in r.text and WORKER_PASSWORD not in r.text
    return {c["value"]["name"]: c["value"]["errors"] for c in r.json()["configs"] if c["value"]["errors"]}


def refused(worker: WorkerProcess, name: str, config: dict[str, Any], key: str, why: str) -> None:
    """Validate reports ``why`` on ``key`` alone; create answers 400 naming ``key``; nothing was created."""
    errors = validate(worker, config)
    assert list(errors) == [key], errors
    assert why in errors[key][0], errors
    created = httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=30)
    assert created.status_code == 400, created.text
    assert key in created.json()["message"] and why in created.json()["message"], created.text
    assert SECRET not in created.text
    assert httpx.get(f"{worker.url}/connectors/{name}", timeout=10).status_code == 404


def test_mysql_local_infile_and_option_files_are_refused_before_any_connection(
    worker: WorkerProcess, fake_mysql: FakeServer, outside: Path
) -> None:
    base = f"mysql+pymysql://u:p@127.0.0.1:{fake_mysql.port}/db"
    fake_mysql.reset()
    refused(worker, "infile", source(f"{base}?local_infile=1"), "connection.url", "'local_infile'")
    refused(worker, "infile-jdbc", source(f"jdbc:mysql://127.0.0.1:{fake_mysql.port}/db?allowLoadLocalInfile=true"),
            "connection.url", "'allowLoadLocalInfile'")  # fmt: skip
    refused(worker, "cnf", source(f"{base}?read_default_file={outside / 'my.cnf'}"), "connection.url",
            "'read_default_file'")  # fmt: skip
    refused(worker, "flags", source(f"{base}?client_flag=128"), "connection.url", "'client_flag'")
    assert (fake_mysql.connections, bytes(fake_mysql.received)) == (0, b"")
    # A file parameter outside the grant is refused too; under it, it would be allowed.
    refused(worker, "ca", source(f"{base}?ssl_ca={outside / 'secret.txt'}"), "connection.url", "outside")
    assert fake_mysql.connections == 0


def test_an_allowed_mysql_url_never_sends_a_file_the_server_asks_for(
    worker: WorkerProcess, fake_mysql: FakeServer
) -> None:
    fake_mysql.reset()
    errors = validate(worker, source(f"mysql+pymysql://u:p@127.0.0.1:{fake_mysql.port}/db?connect_timeout=3"))
    assert "connection.url" in errors  # the fake is no database it can use
    received = bytes(fake_mysql.received)
    # It logged in and sent a query, which the server answered with a LOCAL INFILE request.
    assert re.search(rb"\x03(SELECT|SHOW)", received), received
    assert SECRET.encode() not in received


def test_libpq_passfile_outside_the_grant_is_refused_before_any_connection(
    worker: WorkerProcess, fake_postgres: FakeServer, outside: Path
) -> None:
    fake_postgres.reset()
    url = f"postgresql://u@127.0.0.1:{fake_postgres.port}/db"
    refused(worker, "passfile", source(f"{url}?passfile={outside / 'pgpass'}"), "connection.url", "outside")
    refused(worker, "sslkey", source(f"{url}?sslcert={outside / 'secret.txt'}&sslkey={outside / 'secret.txt'}"),
            "connection.url", "outside")  # fmt: skip
    refused(worker, "service", source(f"{url}?service=prod"), "connection.url", "'service'")
    refused(worker, "socket", source(f"postgresql://u@/db?host={outside}"), "connection.url", "host")
    assert (fake_postgres.connections, bytes(fake_postgres.received)) == (0, b"")


def test_the_workers_own_password_file_never_follows_a_url(worker: WorkerProcess, fake_postgres: FakeServer) -> None:
    """The worker's ``PGPASSFILE`` matches any server: neither a JDBC nor a CDC connector sends it."""
    fake_postgres.reset()
    errors = validate(worker, source(f"jdbc:postgresql://127.0.0.1:{fake_postgres.port}/db?user=u"))
    assert errors, "the fake server accepts no login"
    cdc = {
        "connector.class": "PostgresCdcSource",
        "database.hostname": "127.0.0.1",
        "database.port": str(fake_postgres.port),
        "database.user": "u",
        "database.dbname": "db",
        "topic.prefix": "cdc",
    }
    assert validate(worker, cdc), "the fake server accepts no login"
    assert fake_postgres.connections >= 2
    received = bytes(fake_postgres.received)
    assert WORKER_PASSWORD.encode() not in received and SECRET.encode() not in received
    refused(worker, "cdc-host", {**cdc, "database.hostname": "/tmp"}, "database.hostname", "host")


def test_sqlite_outside_the_grant_is_refused_and_no_file_is_created(
    worker: WorkerProcess, data_dir: Path, outside: Path
) -> None:
    target = outside / "created.db"
    refused(worker, "sqlite", source(f"jdbc:sqlite:{target}"), "connection.url", "outside")
    refused(worker, "sqlite-sa", source(f"sqlite:///{target}"), "connection.url", "outside")
    refused(worker, "sqlite-uri", source(f"jdbc:sqlite:file:{target}?mode=rwc"), "connection.url", "URI")
    refused(worker, "sqlite-dots", source(f"jdbc:sqlite:{data_dir}/../{outside.name}/created.db"), "connection.url",
            "outside")  # fmt: skip
    assert not target.exists()
    # Inside the grant (and in memory) the same URL is accepted.
    assert validate(worker, source(f"jdbc:sqlite:{data_dir / 'ok.db'}")) == {}
    assert validate(worker, source("jdbc:sqlite::memory:")) == {}
