"""Fixture for tests that need a real search node (OpenSearch, from the integ-test zip on Maven Central).

``opensearch`` starts one :class:`tests.services.opensearch.OpenSearchNode` per session on a free loopback
port (about 10 s; the first run also fetches the zip with Maven). Like the ``kafka`` fixture it
never skips: a node that cannot start is a test error, in CI (``CI=true``) and locally, so a
missing Java or Maven cannot pass unnoticed. Tests give their indices unique names (the topic's).

Import it from the integration conftest::

    from tests.integration.opensearch_fixtures import opensearch  # noqa: F401
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.shared_services import session_service
from tests.services.opensearch import DEFAULT_OPENSEARCH_VERSION, OpenSearchNode


def new_opensearch(data_dir: Path) -> OpenSearchNode:
    """The session's node, not started. Not under pytest's basetemp: the node runs as an
    unprivileged user that cannot enter it."""
    return OpenSearchNode(version=os.environ.get("SLUICE_OPENSEARCH_VERSION", DEFAULT_OPENSEARCH_VERSION), kill_with_parent=True)


@pytest.fixture(scope="session")
def opensearch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenSearchNode]:
    """A single-node OpenSearch for the session: ``.url``, ``.request(method, path, body)``."""
    yield from session_service(
        tmp_path_factory, "opensearch", new_opensearch, "could not start OpenSearch for integration tests"
    )


@pytest.fixture
def private_opensearch() -> Iterator[OpenSearchNode]:
    """A node of the test's own, for a test that stops and restarts it (the session node is shared
    by xdist's workers). Import it into the test module that uses it."""
    node = new_opensearch(Path())
    reason: str | None = None
    try:
        node.start()
    except Exception as exc:  # noqa: BLE001 - the test fails with the reason
        reason = str(exc)
    if reason is not None:
        pytest.fail(f"could not start a private OpenSearch node:\n{reason}", pytrace=False)
    try:
        yield node
    finally:
        node.stop()
