"""The REST API over TLS, configured through the worker's listener settings."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration


def _self_signed(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "worker.crt", directory / "worker.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_https_listener_serves_the_api_and_refuses_plain_http(kafka, tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    worker = WorkerProcess(
        tmp_path,
        kafka.bootstrap_servers,
        tls_ca=cert,
        **{"listeners.https.ssl.certfile": str(cert), "listeners.https.ssl.keyfile": str(key)},
    )
    worker.start()
    try:
        assert worker.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(cert))
        response = httpx.get(f"{worker.url}/connectors", verify=context)
        assert response.status_code == 200 and response.json() == []
        with pytest.raises(httpx.HTTPError):  # an untrusted certificate fails the handshake
            httpx.get(f"{worker.url}/connectors", verify=True)
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{worker.port}/connectors", timeout=3)
    finally:
        assert worker.stop() == 0, worker.log()
