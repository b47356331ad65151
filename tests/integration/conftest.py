"""Fixtures for integration tests: a real Kafka broker on free loopback ports.

The ``kafka`` fixture starts one broker per test session (about 4 s after the first jar
fetch) with :class:`sluice.deploy.kafka_stack.KafkaBroker`, the same code ``sluice dev up`` runs.
If it cannot start, every test using it errors with the reason and the broker log's tail;
it never skips, in CI or locally, so a missing Java or Maven cannot pass unnoticed.

Environment: ``SLUICE_KAFKA_VERSION`` picks another Kafka 4.x; ``SLUICE_CACHE_DIR`` moves
the jar cache (default ``~/.cache/sluice``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from sluice.deploy.kafka_stack import DEFAULT_KAFKA_VERSION, KafkaBroker
from tests.integration.mariadb_fixtures import mariadb_db_fixture, mariadb_server_fixture  # noqa: F401
from tests.integration.opensearch_fixtures import opensearch, private_opensearch  # noqa: F401
from tests.integration.postgres_fixtures import (  # noqa: F401
    pg_server_fixture,
    postgres18_server_fixture,
    postgres_db_fixture,
    postgres_server_fixture,
)
from tests.integration.prometheus_fixtures import prometheus  # noqa: F401
from tests.integration.s3_fixtures import s3, s3_bucket  # noqa: F401
from tests.integration.schema_registry_fixtures import schema_registry  # noqa: F401
from tests.integration.shared_services import session_service
from tests.integration.spark_fixtures import backfills, spark_cluster, spark_provider  # noqa: F401
from tests.integration.worker_process import module_worker_process, worker_process  # noqa: F401

_INTEGRATION_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Everything under tests/integration needs real services; marking it here lets
    # `pytest -m "not integration"` select the unit tests without per-test decorators.
    for item in items:
        if _INTEGRATION_DIR in item.path.resolve().parents:
            item.add_marker(pytest.mark.integration)


def new_kafka(data_dir: Path) -> KafkaBroker:
    """The session broker, not started (:mod:`tests.integration.shared_services` starts it)."""
    return KafkaBroker(
        version=os.environ.get("SLUICE_KAFKA_VERSION", DEFAULT_KAFKA_VERSION),
        # Under pytest's basetemp, so broker.log is still there to read after a failed run.
        data_dir=data_dir,
        # If its owner (pytest, or the xdist run's service host) is killed, the kernel stops the JVM.
        kill_with_parent=True,
        # Tests write records with fixed timestamps years old (to see them kept end to end): with
        # the default 7-day retention, a retention check (every 5 min) could delete them mid-test.
        extra_config={"log.retention.ms": -1},
    )


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    """A single-node Kafka broker (KRaft) for the whole session (shared by xdist's workers); use
    ``.bootstrap_servers``.

    Topics are shared across tests: give yours a unique name
    (``kafka_helpers.unique_topic_name``). Auto-created topics get 1 partition.
    """
    yield from session_service(
        tmp_path_factory, "kafka", new_kafka, "could not start the Kafka broker for integration tests"
    )


@pytest.fixture
def kafka_admin(kafka: KafkaBroker) -> Iterator[AdminClient]:
    """An AdminClient connected to the session broker, destroyed at teardown on the main thread
    (:class:`tests.integration.kafka_helpers.ClosingAdminClient`: an AdminClient has no close())."""
    from tests.integration.kafka_helpers import ClosingAdminClient

    with ClosingAdminClient({"bootstrap.servers": kafka.bootstrap_servers}) as admin:
        yield admin  # type: ignore[misc]  # the wrapper answers as the AdminClient it holds
