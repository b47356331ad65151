"""Fixtures for tests that need a real Confluent-compatible Schema Registry (Apicurio Registry).

``schema_registry`` starts one :class:`sluice.deploy.schema_registry.SchemaRegistryServer` per session on
a free loopback port; the first run fetches Apicurio with Maven (about 110 MB), later runs start
in about 3 s. Storage is in memory and shared by the session's tests: use subjects of your own.
Like the ``kafka`` fixture it never skips: a registry that cannot start is a test error, in CI
(``CI=true``) and locally, so a missing Java or Maven cannot pass unnoticed. Import it from the
integration conftest::

    from tests.integration.schema_registry_fixtures import schema_registry  # noqa: F401
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.deploy.schema_registry import SchemaRegistryServer
from tests.integration.shared_services import session_service


def new_schema_registry(data_dir: Path) -> SchemaRegistryServer:
    """The session's registry, not started; its server.log stays under ``data_dir``."""
    return SchemaRegistryServer(data_dir=data_dir, kill_with_parent=True)


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistryServer]:
    """A Schema Registry for the session: ``.url`` is the ``schema.registry.url``."""
    yield from session_service(
        tmp_path_factory, "schema-registry", new_schema_registry,
        "could not start the Schema Registry for integration tests",
    )  # fmt: skip
