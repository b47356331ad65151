"""A worker imports plugin modules from ``plugin.path`` at start and on SIGHUP, never for a request.

An attacker who can write a file into ``plugin.path`` and name it in a connector config must not get
its top-level code run: the module below writes a marker file when imported.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.worker_process import WorkerProcess

pytestmark = pytest.mark.integration

PLUGIN = """
import threading
from sluice.connectors.api import SourceConnector, SourceTask

class {cls}Task(SourceTask):
    def start(self, config, context):
        self.stopped = threading.Event()
    def poll(self):
        self.stopped.wait(0.2)
        return None
    def stop(self):
        self.stopped.set()

class {cls}(SourceConnector):
    task_class = {cls}Task
    version = "1.0"
    def start(self, config): pass
    def task_configs(self, max_tasks): return [{{}}]
"""


def _create(worker: WorkerProcess, name: str, **config: str) -> httpx.Response:
    return httpx.post(f"{worker.url}/connectors", json={"name": name, "config": config}, timeout=10)


def test_plugins_come_from_the_scan_at_start_and_on_sighup_only(kafka: Any, tmp_path: Path) -> None:
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "preplaced.py").write_text(PLUGIN.format(cls="PrePlaced"))
    settings: dict[str, Any] = {"plugin.path": str(plugins)}
    worker = WorkerProcess(tmp_path, kafka.bootstrap_servers, **settings).start()
    try:
        # Planted after start: naming it anywhere a class is named imports nothing.
        marker = tmp_path / "marker"
        (plugins / "evilmod.py").write_text(
            f"from pathlib import Path\nPath({str(marker)!r}).write_text('ran')\n" + PLUGIN.format(cls="X")
        )
        base = {"connector.class": "preplaced.PrePlaced"}
        attempts = [
            {"connector.class": "evilmod.X"},
            {"connector.class": "evilmod:X"},
            {**base, "transforms": "t", "transforms.t.type": "evilmod.X"},
            {**base, "transforms": "t", "transforms.t.type": "evilmod:X"},
            {
                **base,
                "transforms": "t",
                "transforms.t.type": "Filter",
                "transforms.t.predicate": "p",
                "predicates": "p",
                "predicates.p.type": "evilmod.X",
            },
            {**base, "value.converter": "evilmod.X"},
            {**base, "key.converter": "evilmod:X"},
            {**base, "header.converter": "evilmod.X"},
        ]
        for n, config in enumerate(attempts):
            r = _create(worker, f"evil-{n}", **config)
            assert r.status_code == 400, (config, r.text)
            assert "evilmod" in r.json()["message"] and "must be one of" in r.json()["message"], r.text
        r = httpx.put(
            f"{worker.url}/connector-plugins/evilmod.X/config/validate",
            json={"connector.class": "evilmod.X"},
            timeout=10,
        )
        assert r.status_code == 404, r.text
        assert httpx.get(f"{worker.url}/connector-plugins/evilmod.X/config", timeout=10).status_code == 404
        assert not marker.exists(), worker.log()

        # Placed before start: usable by Python path and by class name, its task in a task host.
        for name, cls in (("by-path", "preplaced.PrePlaced"), ("by-name", "PrePlaced")):
            assert _create(worker, name, **{"connector.class": cls}).status_code == 201
            worker.wait_running(name)

        # Added later, then the operator's refresh (SIGHUP): usable from then on.
        (plugins / "evilmod.py").unlink()  # the operator cleans up first; what stays in the directory is theirs
        (plugins / "latecomer.py").write_text(PLUGIN.format(cls="Latecomer"))
        assert _create(worker, "late", **{"connector.class": "latecomer.Latecomer"}).status_code == 400
        assert worker.proc is not None
        worker.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while (r := _create(worker, "late", **{"connector.class": "latecomer.Latecomer"})).status_code == 400:
            assert time.monotonic() < deadline, f"refresh did not add latecomer: {r.text}\n{worker.log()}"
            time.sleep(0.2)
        assert r.status_code == 201, r.text
        worker.wait_running("late")
        assert "Plugin refresh: added source Latecomer (latecomer.Latecomer)" in worker.log(50_000)
        assert not marker.exists()
    finally:
        worker.stop()
