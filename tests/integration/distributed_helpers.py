"""A cluster of ``sluice distributed`` worker processes for integration tests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tests.integration.worker_process import WorkerProcess

T = TypeVar("T")

SESSION_TIMEOUT_MS = 6_000  # the broker's group.min.session.timeout.ms
REBALANCE_DELAY_MS = 4_000
#: How long a worker of a Cluster may take to start (WorkerProcess.start's health deadline).
START_TIMEOUT_S = 30


def cluster_settings(group: str, **overrides: Any) -> dict[str, Any]:
    """Worker keys of one test cluster: its own group and internal topics, short timeouts."""
    return {
        "group.id": group,
        "config.storage.topic": f"{group}-configs",
        "offset.storage.topic": f"{group}-offsets",
        "status.storage.topic": f"{group}-status",
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "offset.storage.partitions": "5",
        "status.storage.partitions": "3",
        "session.timeout.ms": str(SESSION_TIMEOUT_MS),
        "heartbeat.interval.ms": "1000",
        "rebalance.timeout.ms": "20000",
        "scheduled.rebalance.max.delay.ms": str(REBALANCE_DELAY_MS),
        "offset.flush.interval.ms": "500",
        "key.converter": "org.apache.kafka.connect.storage.StringConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        **overrides,
    }


def wait_for(probe: Callable[[], T], done: Callable[[T], bool], *, timeout: float = 60, what: str = "") -> T:
    deadline = time.monotonic() + timeout
    last: T = probe()
    while not done(last):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(0.2)
        last = probe()
    return last


class Cluster:
    """``size`` distributed workers sharing one group on the session broker."""

    def __init__(
        self, root: Path, bootstrap: str, size: int, *, auth: tuple[str, str] | None = None, **overrides: Any
    ) -> None:
        #: The credentials every request below carries (the workers' ``rest.auth.*`` are the caller's to set).
        self.auth = auth
        self.group = f"sluice-it-{uuid.uuid4().hex[:8]}"
        self.settings = cluster_settings(self.group, **overrides)
        self.workers: list[WorkerProcess] = []
        for i in range(size):
            workdir = root / f"worker-{i}"
            workdir.mkdir(parents=True, exist_ok=True)
            self.workers.append(WorkerProcess(workdir, bootstrap, mode="distributed", **self.settings))

    def start(self) -> Cluster:
        """Start every worker at once (as an operator's deployment does) and wait until each is healthy."""
        # Much of a worker's start is waiting (for the broker, for the group to form), so they start
        # side by side. Their Python start-ups then share the CPU: on a loaded machine one may take
        # longer than the 30 s WorkerProcess.start gives it, so the cluster's workers get together
        # what they would have had one after the other.
        deadline = time.monotonic() + START_TIMEOUT_S * len(self.workers)

        def start(worker: WorkerProcess) -> None:
            try:
                worker.start()
            except AssertionError:  # not healthy yet (or exited: then it is raised)
                if worker.proc is None or worker.proc.poll() is not None or time.monotonic() >= deadline:
                    raise
                worker.wait_healthy(timeout=deadline - time.monotonic())

        self._each(start)
        # A leader exists once a write goes through; until then writes answer 409.
        return self

    def stop(self) -> None:
        """SIGTERM every running worker at once and wait for each to exit."""
        self._each(lambda worker: worker.stop() if worker.proc is not None and worker.proc.poll() is None else None)

    def _each(self, action: Callable[[WorkerProcess], Any]) -> None:
        """``action`` on every worker, side by side; the first error (in worker order) is raised once all are done."""
        with ThreadPoolExecutor(max_workers=len(self.workers) or 1) as pool:
            futures = [pool.submit(action, worker) for worker in self.workers]
        for future in futures:
            future.result()

    def alive(self) -> list[WorkerProcess]:
        return [w for w in self.workers if w.proc is not None and w.proc.poll() is None]

    def worker_by_id(self, worker_id: str) -> WorkerProcess:
        for worker in self.workers:
            if worker.url.endswith(worker_id):
                return worker
        raise KeyError(worker_id)

    # -- REST, retrying the 409 a cluster answers while it has no leader -----------------------------------

    def request(self, worker: WorkerProcess, method: str, path: str, **kwargs: Any) -> httpx.Response:
        deadline = time.monotonic() + 60
        while True:
            response = httpx.request(method, worker.url + path, timeout=30, **{"auth": self.auth, **kwargs})
            if response.status_code != 409 or time.monotonic() > deadline or "Retry-After" not in response.headers:
                return response
            time.sleep(float(response.headers["Retry-After"]) / 4)

    def put_config(self, worker: WorkerProcess, name: str, config: dict[str, Any]) -> httpx.Response:
        response = self.request(worker, "PUT", f"/connectors/{name}/config", json=config)
        assert response.status_code in (200, 201), response.text
        return response

    def status(self, worker: WorkerProcess, name: str) -> dict[str, Any]:
        response = httpx.get(f"{worker.url}/connectors/{name}/status", timeout=10, auth=self.auth)
        return response.json() if response.status_code == 200 else {"http": response.status_code}

    def wait_running(self, name: str, tasks: int, *, on: WorkerProcess | None = None, timeout: float = 60) -> dict[str, Any]:
        worker = on or self.alive()[0]

        def running(body: dict[str, Any]) -> bool:
            states = [t["state"] for t in body.get("tasks", [])]
            return body.get("connector", {}).get("state") == "RUNNING" and states == ["RUNNING"] * tasks

        return wait_for(lambda: self.status(worker, name), running, timeout=timeout, what=f"{name} running with {tasks} tasks")
