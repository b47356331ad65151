"""The HTTP layer against a small local HTTPS server: TLS with a private CA, basic auth, failover
between ``connection.url`` values, and how statuses map to retriable or fatal errors."""

from __future__ import annotations

import base64
import http.server
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from sluice.connectors.sink.elasticsearch.client import FatalHttpError, SearchClient, TransientHttpError
from sluice.connectors.sink.elasticsearch.config import ElasticsearchSinkConfig

AUTH = "Basic " + base64.b64encode(b"elastic:s3cret").decode()


class _Handler(http.server.BaseHTTPRequestHandler):
    status = 200

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Authorization") != AUTH:
            self._answer(401, {"error": {"type": "security_exception", "reason": "unauthenticated"}})
            return
        items = [{"index": {"_id": orjson.loads(line)["index"]["_id"], "status": 201}} for line in body.splitlines()[::2]]
        self._answer(type(self).status, {"errors": False, "items": items})

    def _answer(self, status: int, body: Any) -> None:
        data = orjson.dumps(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    if not shutil.which("openssl"):
        pytest.fail("openssl is needed to make a test certificate (apt-get install openssl)")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "key.pem"), "-out",
         str(d / "cert.pem"), "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(d / "cert.pem", d / "key.pem")
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://localhost:{server.server_address[1]}", d / "cert.pem"
    server.shutdown()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _client(urls: str, ca: Path, **extra: str) -> SearchClient:
    return SearchClient(
        ElasticsearchSinkConfig.parse(
            {
                "connection.url": urls,
                "elastic.security.protocol": "SSL",
                "elastic.https.ssl.truststore.location": str(ca),
                "connection.username": "elastic",
                "connection.password": "s3cret",
                **extra,
            }
        )
    )


def test_bulk_over_tls_with_basic_auth_and_failover(tls_server: tuple[str, Path]) -> None:
    url, ca = tls_server
    client = _client(f"https://localhost:{_closed_port()},{url}", ca, **{"connection.compression": "false"})
    try:
        body = b'{"index":{"_index":"t","_id":"1"}}\n{"a":1}\n'
        outcomes = []
        for _ in range(2):  # round robin: one of the two calls hits the closed port
            try:
                outcomes.append(client.bulk(body)["items"][0]["index"]["_id"])
            except TransientHttpError:
                outcomes.append("retry")
        assert sorted(outcomes) == ["1", "retry"]
    finally:
        client.close()


def test_a_wrong_password_is_fatal_and_an_untrusted_certificate_is_not_accepted(tls_server: tuple[str, Path], tmp_path: Path) -> None:
    url, ca = tls_server
    client = _client(url, ca, **{"connection.password": "wrong"})
    try:
        with pytest.raises(FatalHttpError, match="401"):
            client.bulk(b'{"index":{"_index":"t","_id":"1"}}\n{}\n')
    finally:
        client.close()
    client = SearchClient(ElasticsearchSinkConfig.parse({"connection.url": url}))  # system CAs only
    try:
        with pytest.raises(FatalHttpError, match="truststore"):
            client.bulk(b"{}\n")
    finally:
        client.close()


def test_overload_is_retriable(tls_server: tuple[str, Path]) -> None:
    url, ca = tls_server
    client = _client(url, ca)
    _Handler.status = 429
    try:
        with pytest.raises(TransientHttpError, match="429"):
            client.bulk(b'{"index":{"_index":"t","_id":"1"}}\n{}\n')
    finally:
        _Handler.status = 200
        client.close()
