"""Mutual TLS on a real ``sluice standalone`` process: client certificates required or requested.

The CA, the worker's certificate and the client's (``CN=alice,O=Example``) are made by openssl
for each test module. Which principal the worker saw is read from its audit trail.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from tests.integration.worker_process import WorkerProcess
from tests.tls_certs import TlsFiles, make_tls_files

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("mtls"))


class CertificateWorker(WorkerProcess):
    """A worker process whose own health probes present the test client's certificate."""

    client: TlsFiles | None = None

    def _ssl_context(self) -> Any:
        context = super()._ssl_context()
        if self.client is not None:
            context.load_cert_chain(str(self.client.client_cert), str(self.client.client_key))
        return context


def _start(
    kafka: KafkaBroker, workdir: Path, tls: TlsFiles, mode: str, *, probe_with_cert: bool, basic_users: str = ""
) -> CertificateWorker:
    settings: dict[str, Any] = {
        "listeners.https.ssl.certfile": str(tls.server_cert),
        "listeners.https.ssl.keyfile": str(tls.server_key),
        "listeners.https.ssl.client.authentication": mode,
        "listeners.https.ssl.cafile": str(tls.ca),
        "rest.auth.basic.users": basic_users,
    }
    worker = CertificateWorker(workdir, kafka.bootstrap_servers, tls_ca=tls.ca, **settings)
    worker.client = tls if probe_with_cert else None
    return worker


def _context(tls: TlsFiles, with_cert: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(tls.ca))
    if with_cert:
        context.load_cert_chain(str(tls.client_cert), str(tls.client_key))
    return context


def _audited_principals(worker: WorkerProcess, path: str, timeout: float = 10) -> list[str]:
    """The principals of the audit records for ``path`` in the worker's log, once there is one.

    The record may reach the log just after the client has its response, hence the wait.
    """
    deadline = time.monotonic() + timeout
    principals: list[str] = []
    while not principals and time.monotonic() < deadline:
        time.sleep(0.05)
        for line in worker.log(200_000).splitlines():
            if line.endswith("(sluice.audit)") and "{" in line:
                record = json.loads(line[line.index("{") : line.rindex("}") + 1])
                if record.get("path") == path:
                    principals.append(record["principal"])
    return principals


@pytest.fixture
def required(kafka: KafkaBroker, tmp_path: Path, tls: TlsFiles) -> Iterator[WorkerProcess]:
    worker = _start(kafka, tmp_path, tls, "required", probe_with_cert=True).start()
    yield worker
    assert worker.stop() == 0, worker.log()


def test_required_accepts_a_client_certificate_as_its_principal(required: WorkerProcess, tls: TlsFiles) -> None:
    with httpx.Client(base_url=required.url, verify=_context(tls, with_cert=True), timeout=5) as client:
        assert client.get("/connectors").status_code == 200
        assert client.put("/connectors/absent-mtls/pause").status_code == 404
    assert _audited_principals(required, "/connectors/absent-mtls/pause") == ["alice"]


def test_required_refuses_a_client_without_a_certificate_in_the_handshake(required: WorkerProcess, tls: TlsFiles) -> None:
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{required.url}/connectors", verify=_context(tls, with_cert=False), timeout=5)
    with pytest.raises(httpx.HTTPError):  # no certificate even for the open /health
        httpx.get(f"{required.url}/health", verify=_context(tls, with_cert=False), timeout=5)


def test_requested_lets_a_client_without_a_certificate_fall_back_to_basic_auth(
    kafka: KafkaBroker, tmp_path: Path, tls: TlsFiles
) -> None:
    worker = _start(kafka, tmp_path, tls, "requested", probe_with_cert=False, basic_users="bob:pw").start()
    try:
        without_cert = _context(tls, with_cert=False)
        assert httpx.get(f"{worker.url}/connectors", verify=without_cert, timeout=5).status_code == 401
        assert httpx.get(f"{worker.url}/connectors", verify=without_cert, auth=("bob", "pw"), timeout=5).status_code == 200
        with httpx.Client(base_url=worker.url, verify=_context(tls, with_cert=True), timeout=5) as client:
            assert client.get("/connectors").status_code == 200
            assert client.put("/connectors/absent-requested/pause").status_code == 404
        assert httpx.put(
            f"{worker.url}/connectors/absent-basic/pause", verify=without_cert, auth=("bob", "pw"), timeout=5
        ).status_code == 404
        assert _audited_principals(worker, "/connectors/absent-requested/pause") == ["alice"]
        assert _audited_principals(worker, "/connectors/absent-basic/pause") == ["bob"]
    finally:
        assert worker.stop() == 0, worker.log()
