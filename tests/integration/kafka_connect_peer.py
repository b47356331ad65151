"""A real Apache Kafka Connect worker (``ConnectDistributed``) run beside Sluice in integration tests.

The jars come from Maven Central through :func:`tests.services.kafka_connect.ensure_connect_jars` (cached
after the first fetch; ``make kafka-connect`` fetches them ahead of a test run). The worker logs
to ``<workdir>/connect-<n>.log``, one file per start, so a test can read what one run logged.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from sluice.deploy.kafka_stack import DEFAULT_KAFKA_VERSION, LOG4J2_CONFIG, find_java
from sluice.deploy.processes import die_with_parent_hook, stop_process_group
from tests.integration.worker_process import free_port
from tests.services.kafka_connect import ensure_connect_jars


class KafkaConnectWorker:
    """One Kafka Connect distributed worker on loopback, with the given worker properties."""

    def __init__(self, workdir: Path, bootstrap: str, *, version: str = DEFAULT_KAFKA_VERSION, **settings: str) -> None:
        self.workdir = workdir
        self.version = version
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.worker_id = f"127.0.0.1:{self.port}"  # what Connect puts in statuses
        self.props_path = workdir / "connect-distributed.properties"
        props = {
            "bootstrap.servers": bootstrap,
            "listeners": self.url,
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.port),
            # Every plugin is on the classpath (connect-file included); scanning it is enough.
            "plugin.discovery": "only_scan",
            **settings,
        }
        self.props_path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.log_path = workdir / "connect-0.log"

    def start(self, timeout: float = 120) -> KafkaConnectWorker:
        libs = ensure_connect_jars(self.version)
        self.runs += 1
        self.log_path = self.workdir / f"connect-{self.runs}.log"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    find_java(),
                    "-Xms128m",
                    "-Xmx512m",
                    "-XX:+UseSerialGC",
                    "-XX:TieredStopAtLevel=1",  # a test worker lives seconds: start fast, skip C2
                    "-Djava.awt.headless=true",
                    f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
                    "-cp",
                    f"{libs}/*",
                    "org.apache.kafka.connect.cli.ConnectDistributed",
                    str(self.props_path),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent_hook(),  # noqa: PLW1509 - Linux's parent-death signal, set before exec
            )
        self._wait_healthy(timeout)
        return self

    def _wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"Kafka Connect exited with {self.proc.returncode}:\n{self.log()[-5000:]}")
            try:
                # KIP-1017: 200 once the herder has joined the group and read the config topic.
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"Kafka Connect not healthy after {timeout}s:\n{self.log()[-5000:]}")

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM: Connect stops its tasks, which commit their offsets, then leaves the group."""
        proc, self.proc = self.proc, None
        if proc is not None and not stop_process_group(proc, timeout):
            raise AssertionError(f"Kafka Connect did not stop within {timeout}s:\n{self.log()[-5000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def error_lines(self) -> list[str]:
        """The lines this run logged at ERROR (log4j2 pattern ``[time] LEVEL message (logger)``)."""
        return [line for line in self.log().splitlines() if line.startswith("[") and "] ERROR " in line]

    # -- REST ------------------------------------------------------------------------------------------

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A REST call, retried while Connect answers 409 (a rebalance is under way)."""
        deadline = time.monotonic() + 60
        while True:
            response = httpx.request(method, self.url + path, timeout=30, **kwargs)
            if response.status_code != 409 or time.monotonic() > deadline:
                return response
            time.sleep(0.5)

    def status(self, name: str) -> dict[str, Any]:
        response = httpx.get(f"{self.url}/connectors/{name}/status", timeout=10)
        return response.json() if response.status_code == 200 else {"http": response.status_code}
