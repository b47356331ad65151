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

import os
from collections.abc import Iterator

import pytest

from sluice.deploy.schema_registry import SchemaRegistryError, SchemaRegistryServer


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistryServer]:
    """A Schema Registry for the session: ``.url`` is the ``schema.registry.url``."""
    server = SchemaRegistryServer(
        # Under pytest's basetemp, so server.log remains to inspect after a failure.
        data_dir=tmp_path_factory.mktemp("schema-registry"),
        kill_with_parent=True,
    )
    reason: str | None = None
    try:
        server.start()
    except (SchemaRegistryError, ValueError) as exc:
        reason = str(exc)
    if reason is not None:
        ci = " (CI=true: a missing service is a failure)" if os.environ.get("CI", "").lower() == "true" else ""
        pytest.fail(f"could not start the Schema Registry for integration tests{ci}:\n{reason}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()
