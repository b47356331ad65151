"""A real Prometheus server (Debian's ``prometheus`` package) that scrapes a worker every second.

``prometheus`` is a factory: ``prometheus(target_url)`` starts a private server on a free loopback
port with a generated config scraping ``<target_url>/metrics``, waits until it answers, and
returns a :class:`PrometheusServer` whose :meth:`~PrometheusServer.query` runs PromQL over the
HTTP API. Every server started is stopped after the test. Without the binary the test skips
locally; with ``CI=true`` it fails (``deploy/bootstrap.sh`` installs the package).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from sluice.worker.runtime import parent_death_signal
from tests.integration.worker_process import free_port
from tests.unavailable import unavailable

SCRAPE_INTERVAL = "1s"


class PrometheusServer:
    """One running Prometheus; :meth:`query` and :meth:`wait_for` read its HTTP API."""

    def __init__(self, workdir: Path, target_url: str) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = workdir / "prometheus.log"
        target = urlsplit(target_url)
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {SCRAPE_INTERVAL}\n"
            f"  evaluation_interval: {SCRAPE_INTERVAL}\n"
            "scrape_configs:\n"
            "  - job_name: sluice\n"
            f"    scheme: {target.scheme}\n"
            "    metrics_path: /metrics\n"
            "    static_configs:\n"
            f"      - targets: ['{target.netloc}']\n"
        )
        self._args = [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=1h",
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> None:
        arm = parent_death_signal()
        parent = os.getpid()
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self._args,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.workdir,
            # If pytest is killed, the kernel stops Prometheus too.
            preexec_fn=(lambda: arm(signal.SIGTERM, parent)) if arm is not None else None,  # noqa: PLW1509 - Linux's parent-death signal, set before exec
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready after {timeout}s:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log(self, tail: int = 5000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:] if self.log_path.exists() else ""

    def query(self, promql: str) -> list[dict[str, Any]]:
        """The instant vector ``promql`` evaluates to now (``[{"metric": {...}, "value": [t, "v"]}]``)."""
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=10)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        return body["data"]["result"]  # type: ignore[no-any-return]

    def value(self, promql: str) -> float | None:
        """The single value ``promql`` evaluates to, or ``None`` while it has none."""
        result = self.query(promql)
        if not result:
            return None
        assert len(result) == 1, result
        return float(result[0]["value"][1])

    def wait_for(self, promql: str, check: Callable[[float], bool], timeout: float = 60) -> float:
        """Poll until ``promql``'s single value passes ``check``; that value."""
        deadline = time.monotonic() + timeout
        last: float | None = None
        while time.monotonic() < deadline:
            last = self.value(promql)
            if last is not None and check(last):
                return last
            time.sleep(0.5)
        targets = httpx.get(f"{self.url}/api/v1/targets", timeout=10).text
        raise AssertionError(f"{promql} = {last} after {timeout}s; targets: {targets[:2000]}\n{self.log()}")


@pytest.fixture
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], PrometheusServer]]:
    """A factory: ``prometheus(worker_url)`` starts a server scraping that worker every second."""
    if shutil.which("prometheus") is None:
        unavailable("prometheus is not installed (Debian's prometheus package; deploy/bootstrap.sh installs it)")
    servers: list[PrometheusServer] = []

    def start(target_url: str) -> PrometheusServer:
        server = PrometheusServer(tmp_path_factory.mktemp("prometheus"), target_url)
        servers.append(server)
        try:
            server.start()
        except RuntimeError as exc:
            pytest.fail(f"could not start Prometheus:\n{exc}", pytrace=False)
        return server

    try:
        yield start
    finally:
        for server in servers:
            server.stop()
