"""Spark fixtures for the backfill tests: one SparkSession (``local[2]``) per test session, and a
real standalone cluster (a master and a worker on loopback) for the tests of backfills on a cluster.

They are registered in ``tests/integration/conftest.py``. Starting Spark's JVM costs 10-20 s, so every backfill test shares :func:`spark_provider`; each
test gets its own :class:`~worker.backfill.BackfillManager` (memory store) on top of it. Like the
other services it never skips: missing PySpark or jars fail the test, with the install command.

:func:`spark_cluster` runs the installed PySpark's own ``spark-class`` Master and Worker with the
distribution's default logging (INFO: never lowered here, since a cluster's logging must not
decide whether a job works). Its executors start :func:`executor_python`, a virtualenv that holds
nothing at all — not Sluice, not PySpark (the cluster's ``python/lib/pyspark.zip`` provides that) —
so every cluster test also proves the session ships what the executors import.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sluice.deploy.kafka_stack import KafkaBroker
from sluice.worker.backfill import BackfillManager, MemoryBackfillStore

SPARK_TEST_CONFS = {
    "spark.master": "local[2]",
    "spark.driver.memory": "1g",
    "spark.sql.shuffle.partitions": "2",
}


@pytest.fixture(scope="session")
def spark_provider() -> Iterator[Any]:
    """The session's shared, lazily started SparkSession provider."""
    try:
        from sluice.connectors.backfill import SparkSessionProvider
        from sluice.deploy.spark import SparkJarsError, provisioned_jars

        jars = provisioned_jars()
    except (ImportError, SparkJarsError) as exc:
        pytest.fail(f"Spark is not usable for the backfill tests ({exc}); run `make setup` and `python -m sluice.deploy.spark fetch`", pytrace=False)
    provider = SparkSessionProvider(SPARK_TEST_CONFS, jars=lambda: jars)
    try:
        yield provider
    finally:
        provider.stop()


@pytest.fixture
def backfills(spark_provider: Any, kafka: KafkaBroker) -> Iterator[BackfillManager]:
    """A backfill manager for one test, on the shared SparkSession and the session broker."""
    manager = BackfillManager(MemoryBackfillStore(), bootstrap_servers=kafka.bootstrap_servers, provider=spark_provider)
    manager.start()
    try:
        yield manager
    finally:
        # A run a failed test left behind is cancelled while the manager still reaches the session
        # (stop() below no longer can), so its Spark job does not hold the executors of the next test.
        for job in manager.list():
            if job["status"]["state"] in ("PENDING", "RUNNING"):
                manager.cancel(job["id"])
                manager.wait(job["id"], timeout=60)
        manager._provider = None  # the session outlives the test; only the manager stops
        manager.stop()


def executor_python() -> Path:
    """An empty virtualenv's Python (same ``major.minor`` as this one, none of its packages), made
    once and kept in Sluice's cache: what a fresh Spark worker host has."""
    from sluice.deploy.maven import cache_dir

    home = cache_dir() / f"spark-executor-venv-py{sys.version_info[0]}.{sys.version_info[1]}"
    python = home / "bin" / "python"
    if not python.exists():
        base = getattr(sys, "_base_executable", sys.executable)  # the interpreter this venv was made from
        subprocess.run([base, "-m", "venv", "--without-pip", "--clear", str(home)], check=True, timeout=120)
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    probe = subprocess.run([str(python), "-c", "import sluice"], capture_output=True, timeout=60, cwd="/", env=clean)
    assert probe.returncode != 0, f"{python} must not see Sluice"
    return python


@dataclass
class SparkCluster:
    """A running standalone master and worker."""

    master_url: str
    ui_url: str
    logs: Path
    executor_python: Path

    def log(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-4000:]}" for p in sorted(self.logs.glob("*.log")))


def _cluster_env(spark_home: Path, work: Path) -> dict[str, str]:
    """The daemons' environment: none of this test process's Python (no virtualenv, no PYTHONPATH)."""
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    env.update({"SPARK_HOME": str(spark_home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(work / "work")})
    return env


def _wait_for_worker(ui_url: str, procs: list[subprocess.Popen[bytes]], logs: Path, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                pytest.fail(f"a Spark daemon exited ({proc.args!r}); logs in {logs}", pytrace=False)
        try:
            if httpx.get(f"{ui_url}/json/", timeout=2).json().get("aliveworkers", 0) >= 1:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    pytest.fail(f"the Spark worker did not register with the master within {timeout:.0f}s; logs in {logs}", pytrace=False)


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    """A standalone master and one worker (2 cores, 2 GB) on loopback, from the installed PySpark."""
    from sluice.deploy.spark import pyspark_jars_dir
    from tests.integration.worker_process import free_port

    spark_home = pyspark_jars_dir().parent
    work = tmp_path_factory.mktemp("spark-cluster")
    env = _cluster_env(spark_home, work)
    port, ui_port, worker_ui = free_port(), free_port(), free_port()
    master_url, ui_url = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}"
    spark_class = str(spark_home / "bin" / "spark-class")
    commands = {
        "master": [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)],
        "worker": [spark_class, "org.apache.spark.deploy.worker.Worker", master_url, "--host", "127.0.0.1",
                   "--webui-port", str(worker_ui), "--cores", "2", "--memory", "2g", "--work-dir", str(work / "work")],
    }
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for name, command in commands.items():
            with (work / f"{name}.log").open("wb") as out:
                procs.append(subprocess.Popen(command, env=env, cwd=work, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
            if name == "master":
                time.sleep(1.0)
        _wait_for_worker(ui_url, procs, work)
        yield SparkCluster(master_url, ui_url, work, executor_python())
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
