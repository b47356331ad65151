"""A standalone worker run as a real process, for tests that kill it and restart it.

Tests that only need a running worker take one from the ``worker_process`` fixture (or
``module_worker_process``, shared by a module's tests): ``worker_process(**settings)`` starts a
:class:`WorkerProcess` with those settings and stops it when the fixture's scope ends, failing the
test if it does not exit cleanly.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from sluice.deploy.kafka_stack import KafkaBroker

#: The package of test-only plugins, as a plugin.path entry (scanned as ``tests.plugins``).
TEST_PLUGINS = str(Path(__file__).resolve().parents[1] / "plugins")
#: Where test workers keep their own files, away from the test's tmp_path (see WorkerProcess); new
#: for each test session, so a re-run never finds an earlier run's offsets.
WORKER_HOMES = Path(tempfile.mkdtemp(prefix="sluice-test-workers-"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class WorkerProcess:
    """``sluice standalone`` in a subprocess, with its REST address and log file.

    ``env`` adds environment variables to the worker's (``${env:…}`` config providers).
    """

    def __init__(
        self,
        workdir: Path,
        bootstrap: str,
        *,
        env: dict[str, str] | None = None,
        tls_ca: Path | None = None,
        mode: str = "standalone",
        **worker_settings: Any,
    ) -> None:
        self.workdir = workdir
        self.mode = mode
        self.env = dict(env or {})
        self.port = free_port()
        scheme = "https" if str(worker_settings.get("listeners.https.ssl.certfile") or "") else "http"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        # What clients verify the worker's certificate against (https only).
        self.verify: Path | bool = tls_ca if tls_ca is not None else True
        # The worker's own files (config, log, offsets, state) live outside ``workdir``, where tests
        # and their plugins write: with connector.allowed.paths=*, the task host sandbox can grant a
        # directory only whole, so no task may create a file in a folder that holds the worker's own.
        # One home per workdir, so a second WorkerProcess on the same workdir finds its offsets.
        digest = hashlib.sha256(str(workdir.resolve()).encode()).hexdigest()[:16]
        self.home = WORKER_HOMES / f"{workdir.name}-{digest}"
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_path = self.home / "worker.log"
        self.props_path = self.home / "worker.properties"
        self.offsets_path = self.home / "offsets.json"
        settings = {
            "bootstrap.servers": bootstrap,
            "listeners": self.url,
            "offset.storage.file.filename": str(self.offsets_path),
            "offset.flush.interval.ms": "1000",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            # A SIGKILLed member leaves the group only when its session expires; keep that short.
            "consumer.session.timeout.ms": "6000",
            "consumer.heartbeat.interval.ms": "1000",
            # Test-only connectors are named by Python path (tests.plugins.…): the worker scans that
            # package directory of the plugin path at start (and only at start).
            "plugin.path": TEST_PLUGINS,
            # Its own state, and files anywhere but the worker's own code and files: the tests name
            # files in their tmp directories. test_path_confinement tests the default grant.
            "state.dir": str(self.home / "state"),
            "connector.allowed.paths": "*",
            **worker_settings,
        }
        if mode == "distributed":
            settings.pop("offset.storage.file.filename", None)  # offsets live in the cluster's topic
        self.props_path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        self.proc: subprocess.Popen[bytes] | None = None
        #: The processes :meth:`freeze` stopped, for :meth:`thaw`.
        self._frozen: list[int] = []

    def start(self, *connector_files: Path) -> WorkerProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sluice.cli", self.mode, str(self.props_path), *map(str, connector_files)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=Path(__file__).resolve().parents[2],
            env={**os.environ, **self.env, "PYTHONUNBUFFERED": "1"},
        )
        self.wait_healthy()
        return self

    def wait_healthy(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1, verify=self._ssl_context()).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"worker not healthy after {timeout}s:\n{self.log()}")

    def _ssl_context(self) -> Any:
        if isinstance(self.verify, Path):
            import ssl

            return ssl.create_default_context(cafile=str(self.verify))
        return self.verify

    def log(self, tail: int = 5000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:] if self.log_path.exists() else ""

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def process_tree(self) -> list[int]:
        """The worker's pid and those of every process it started (task hosts and theirs), parents
        first, read from ``/proc``: the worker shares the test's process group, so no group signal."""
        assert self.proc is not None
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # exited meanwhile
                continue
            # "pid (comm) state ppid …": comm may hold spaces and parentheses, so split after its last ')'.
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
        tree = [self.proc.pid]
        for pid in tree:  # grows while walked: breadth first
            tree.extend(children.get(pid, []))
        return tree

    def freeze(self) -> list[int]:
        """SIGSTOP the worker and every process under it (its task hosts run the tasks), as a VM
        pause or a long GC pause would: nothing of it runs, answers or times out until :meth:`thaw`.
        Returns the frozen pids."""
        self._frozen = self.process_tree()
        for pid in self._frozen:  # the parent first: it must not see a child stop and react
            os.kill(pid, signal.SIGSTOP)
        return self._frozen

    def thaw(self) -> None:
        """SIGCONT every process :meth:`freeze` stopped (those still there)."""
        for pid in reversed(self._frozen):
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        self._frozen = []

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait: the worker flushes and commits before it exits."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # The worker writes every thread's stack on SIGUSR1: show what held the shutdown up.
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1)
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"worker did not stop within {timeout}s:\n{self.log(30_000)}") from None

    def wait_running(self, connector: str, tasks: int = 1, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        body: dict[str, Any] = {}
        while time.monotonic() < deadline:
            r = httpx.get(f"{self.url}/connectors/{connector}/status", timeout=5)
            if r.status_code == 200:
                body = r.json()
                states = [t["state"] for t in body["tasks"]]
                if body["connector"]["state"] == "RUNNING" and states == ["RUNNING"] * tasks:
                    return body
                if "FAILED" in states or body["connector"]["state"] == "FAILED":
                    raise AssertionError(f"connector {connector} failed: {orjson.dumps(body).decode()}")
            time.sleep(0.2)
        raise AssertionError(f"connector {connector} not running after {timeout}s: {body}\n{self.log()}")


#: ``(env=…, tls_ca=…, mode=…, **settings) -> WorkerProcess``: starts a worker, as :class:`WorkerProcess` takes them.
WorkerFactory = Callable[..., WorkerProcess]


def _started_workers(workdir: Callable[[], Path], bootstrap: str) -> Iterator[WorkerFactory]:
    """A factory that starts workers in ``workdir()``; once the caller is done, every one is
    stopped (all of them before any failure is reported) and must have exited with 0."""
    started: list[WorkerProcess] = []

    def start(**options: Any) -> WorkerProcess:
        worker = WorkerProcess(workdir(), bootstrap, **options)
        started.append(worker)
        return worker.start()

    yield start
    exits = [(worker, worker.stop()) for worker in started]
    for worker, code in exits:
        assert code == 0, worker.log()


@pytest.fixture
def worker_process(kafka: KafkaBroker, tmp_path: Path) -> Iterator[WorkerFactory]:
    """Workers on the session's broker in the test's ``tmp_path``, stopped after the test."""
    yield from _started_workers(lambda: tmp_path, kafka.bootstrap_servers)


@pytest.fixture(scope="module")
def module_worker_process(kafka: KafkaBroker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerFactory]:
    """Workers the tests of a module share, each in a directory of its own, stopped after the module."""
    yield from _started_workers(lambda: tmp_path_factory.mktemp("worker"), kafka.bootstrap_servers)
