"""Spark fixtures for the backfill tests: one SparkSession (``local[2]``) per test session.

They are registered in ``tests/integration/conftest.py``. Starting Spark's JVM costs 10-20 s, so every backfill test shares :func:`spark_provider`; each
test gets its own :class:`~worker.backfill.BackfillManager` (memory store) on top of it. Like the
other services it never skips: missing PySpark or jars fail the test, with the install command.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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
