"""The REST listener's transport guards, against a real uvicorn server on a loopback port.

A small app stands in for the worker's so that what the transport hands the app (the ASGI TLS
extension) can be read back; the limits themselves are the ones a worker runs with.
"""

from __future__ import annotations

import resource
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI, Request

from sluice.rest.middleware import RequestLimitsMiddleware
from sluice.rest.server import RestServer, rfc4514_name
from sluice.rest.settings import RestSettings
from tests.tls_certs import TlsFiles, make_tls_files

#: Added to every configured timeout before a test gives up waiting: slack for a loaded machine.
MARGIN_S = 3.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _app(settings: RestSettings) -> FastAPI:
    app = FastAPI()
    app.state.rest_settings = settings

    @app.get("/whoami")
    async def whoami(request: Request) -> dict[str, Any]:
        return {"tls": request.scope.get("extensions", {}).get("tls")}

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, Any]:
        return {"size": len(await request.body())}

    app.add_middleware(
        RequestLimitsMiddleware,
        max_bytes=settings.max_request_bytes,
        body_timeout_s=settings.request_body_timeout_ms / 1000,
    )
    return app


ServerFactory = Callable[..., RestServer]


@pytest.fixture
def serve() -> Iterator[ServerFactory]:
    servers: list[RestServer] = []

    def start(**settings: Any) -> RestServer:
        server = RestServer(_app(RestSettings(**settings)), "127.0.0.1", _free_port())
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _connect(server: RestServer, source: str = "127.0.0.1") -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=5, source_address=(source, 0))
    return sock


def _closed_within(sock: socket.socket, seconds: float, *, keep_sending: bytes = b"", every_s: float = 0.1) -> bool:
    """Whether the server closes ``sock`` within ``seconds``, sending ``keep_sending`` every ``every_s`` meanwhile."""
    deadline = time.monotonic() + seconds
    sock.settimeout(every_s)
    while time.monotonic() < deadline:
        try:
            if keep_sending:
                sock.sendall(keep_sending)
            if sock.recv(4096) == b"":
                return True
        except TimeoutError:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


def _read_response(sock: socket.socket, timeout: float = 5, data: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response with a Content-Length body (``data``: what was already read of it)."""
    sock.settimeout(timeout)
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(4096)
        assert chunk, "connection closed in the middle of a response body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


GET = b"GET /whoami HTTP/1.1\r\nHost: test\r\n\r\n"


def test_a_client_that_never_finishes_its_headers_is_disconnected(serve: ServerFactory) -> None:
    server = serve(request_header_timeout_ms=500)
    slow = _connect(server)
    slow.sendall(b"GET /whoami HTTP/1.1\r\n")
    silent = _connect(server)
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=5) as client:
        assert _closed_within(slow, 0.5 + MARGIN_S, keep_sending=b"X-Slow: 1\r\n", every_s=0.1)
        assert _closed_within(silent, 0.5 + MARGIN_S)  # a connection that never sends a byte as well
        assert client.get("/whoami").status_code == 200
    slow.close()
    silent.close()


def test_keep_alive_connections_are_served_and_their_next_request_runs_against_the_deadline(
    serve: ServerFactory,
) -> None:
    server = serve(request_header_timeout_ms=500)
    with _connect(server) as sock:
        for _ in range(3):
            # Each request's headers arrive in pieces, but within the deadline.
            sock.sendall(GET[:10])
            time.sleep(0.1)
            sock.sendall(GET[10:])
            status, _, _ = _read_response(sock)
            assert status == 200
        # uvicorn's keep-alive timeout is 5 s: closing well before proves the header deadline did it.
        sock.sendall(b"GET /whoami HTTP/1.1\r\n")
        assert _closed_within(sock, 0.5 + 2.0)


def test_a_trickling_body_gets_408_and_the_connection_is_closed(serve: ServerFactory) -> None:
    server = serve(request_body_timeout_ms=500)
    with _connect(server) as sock:
        sock.sendall(
            b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
        )
        deadline = time.monotonic() + 0.5 + MARGIN_S
        sock.settimeout(0.1)
        received = b""
        while time.monotonic() < deadline and not received:
            sock.sendall(b" ")
            try:
                received = sock.recv(4096)
            except TimeoutError:
                continue
        assert received, "no response to a trickling body"
        status, headers, body = _read_response(sock, data=received)
        assert status == 408 and headers["connection"] == "close"
        assert orjson.loads(body)["error_code"] == 408
        assert _closed_within(sock, MARGIN_S)
    with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=5) as client:
        assert client.post("/echo", json={"a": 1}).json() == {"size": 7}


def test_connections_beyond_the_per_client_cap_are_closed_and_others_served(serve: ServerFactory) -> None:
    server = serve(max_connections_per_client=2)
    first, second = _connect(server, "127.0.0.3"), _connect(server, "127.0.0.3")
    extra = _connect(server, "127.0.0.3")
    try:
        assert _closed_within(extra, MARGIN_S)
        for sock in (first, second):
            sock.sendall(GET)
            assert _read_response(sock)[0] == 200
        other = httpx.Client(
            base_url=f"http://127.0.0.1:{server.port}",
            timeout=5,
            transport=httpx.HTTPTransport(local_address="127.0.0.2"),
        )
        with other:
            assert other.get("/whoami").status_code == 200
        # Once one of the client's connections closes, a new one is served again.
        first.close()
        deadline = time.monotonic() + MARGIN_S
        status = None
        while status is None and time.monotonic() < deadline:
            with _connect(server, "127.0.0.3") as again:
                again.sendall(GET)
                try:
                    status = _read_response(again, timeout=1)[0]
                except (AssertionError, ConnectionResetError, TimeoutError):
                    time.sleep(0.05)
        assert status == 200
    finally:
        for sock in (first, second, extra):
            sock.close()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def foreign_tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """Certificates of another CA, which the server does not trust."""
    return make_tls_files(tmp_path_factory.mktemp("foreign"), client_subject="/O=Elsewhere/CN=mallory")


def _https(serve: ServerFactory, tls: TlsFiles, client_auth: str) -> RestServer:
    return serve(
        scheme="https",
        ssl_certfile=str(tls.server_cert),
        ssl_keyfile=str(tls.server_key),
        client_auth=client_auth,
        ssl_cafile=str(tls.ca) if client_auth != "none" else None,
    )


def _whoami(server: RestServer, tls: TlsFiles, client: TlsFiles | None) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=str(tls.ca))
    if client is not None:
        context.load_cert_chain(str(client.client_cert), str(client.client_key))
    response = httpx.get(f"https://127.0.0.1:{server.port}/whoami", verify=context, timeout=5)
    assert response.status_code == 200
    result: dict[str, Any] = response.json()["tls"]
    return result


def test_required_client_certificates_reach_the_app_and_clients_without_one_are_refused(
    serve: ServerFactory, tls: TlsFiles, foreign_tls: TlsFiles
) -> None:
    server = _https(serve, tls, "required")
    seen = _whoami(server, tls, tls)
    assert seen["client_cert_name"] == "CN=alice,O=Example"
    assert seen["client_cert_chain"][0].startswith("-----BEGIN CERTIFICATE-----")
    assert seen["tls_version"] in (0x0303, 0x0304)
    with pytest.raises(httpx.HTTPError):
        _whoami(server, tls, None)
    with pytest.raises(httpx.HTTPError):  # a certificate from a CA the server does not trust
        _whoami(server, tls, foreign_tls)


def test_requested_client_certificates_are_optional(serve: ServerFactory, tls: TlsFiles, foreign_tls: TlsFiles) -> None:
    server = _https(serve, tls, "requested")
    assert _whoami(server, tls, tls)["client_cert_name"] == "CN=alice,O=Example"
    assert _whoami(server, tls, None)["client_cert_name"] is None
    with pytest.raises(httpx.HTTPError):  # presented but untrusted is refused, not ignored
        _whoami(server, tls, foreign_tls)


def test_without_client_authentication_no_certificate_is_asked_for(serve: ServerFactory, tls: TlsFiles) -> None:
    server = _https(serve, tls, "none")
    seen = _whoami(server, tls, tls)
    assert seen["client_cert_name"] is None and seen["client_cert_chain"] == []


def test_rfc4514_names_put_the_leaf_first_and_escape_special_characters() -> None:
    subject = (
        (("domainComponent", "com"),),
        (("organizationName", "Example, Inc."),),
        (("organizationalUnitName", "ops"), ("emailAddress", "a@example.com")),
        (("commonName", "#alice+bob "),),
    )
    assert rfc4514_name(subject) == r"CN=\#alice\+bob\ ,OU=ops+emailAddress=a@example.com,O=Example\, Inc.,DC=com"
    assert rfc4514_name(((("commonName", 'say "hi"; <now>\\'),),)) == r"CN=say \"hi\"\; \<now\>\\"


def test_at_the_connection_cap_a_prompt_client_displaces_the_oldest_idle_connection(serve: ServerFactory) -> None:
    server = serve(max_connections=3)
    idle = [_connect(server, f"127.0.0.{n}") for n in (11, 12, 13)]
    try:
        time.sleep(0.2)  # accepted, and waiting for headers that never come
        with _connect(server, "127.0.0.14") as prompt:
            prompt.sendall(GET)
            assert _read_response(prompt)[0] == 200
        assert _closed_within(idle[0], MARGIN_S)
        assert not _closed_within(idle[2], 0.3)
    finally:
        for sock in idle:
            sock.close()


def test_at_the_connection_cap_with_nothing_to_displace_a_new_connection_gets_503_unread(serve: ServerFactory) -> None:
    server = serve(max_connections=2)
    # Requests whose headers are in and whose bodies are still arriving: busy, not idle.
    busy = [_connect(server, f"127.0.0.{n}") for n in (21, 22)]
    try:
        for sock in busy:
            sock.sendall(
                b"POST /echo HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            )
        time.sleep(0.2)
        with _connect(server, "127.0.0.23") as refused:
            status, headers, body = _read_response(refused)
            assert (status, headers["connection"]) == (503, "close")
            assert orjson.loads(body)["error_code"] == 503
            assert _closed_within(refused, MARGIN_S)
    finally:
        for sock in busy:
            sock.close()


def test_a_connection_that_would_eat_into_the_descriptor_reserve_gets_503(serve: ServerFactory) -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    server = serve(fd_reserve=soft)  # every descriptor reserved: nothing is left for connections
    with _connect(server) as refused:
        assert _read_response(refused)[0] == 503
