"""Fixture for tests that need a real search node (OpenSearch, from the integ-test zip on Maven Central).

``opensearch`` starts one :class:`sluice.deploy.opensearch.OpenSearchNode` per session on a free loopback
port (about 10 s; the first run also fetches the zip with Maven). Like the ``kafka`` fixture it
never skips: a node that cannot start is a test error, in CI (``CI=true``) and locally, so a
missing Java or Maven cannot pass unnoticed. Tests give their indices unique names (the topic's).

Import it from the integration conftest::

    from tests.integration.opensearch_fixtures import opensearch  # noqa: F401
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sluice.deploy.opensearch import DEFAULT_OPENSEARCH_VERSION, OpenSearchError, OpenSearchNode


@pytest.fixture(scope="session")
def opensearch() -> Iterator[OpenSearchNode]:
    """A single-node OpenSearch for the session: ``.url``, ``.request(method, path, body)``, ``.restart()``."""
    # Not under pytest's basetemp: the node runs as an unprivileged user that cannot enter it.
    node = OpenSearchNode(
        version=os.environ.get("SLUICE_OPENSEARCH_VERSION", DEFAULT_OPENSEARCH_VERSION),
        kill_with_parent=True,
    )
    reason: str | None = None
    try:
        node.start()
    except (OpenSearchError, ValueError) as exc:
        reason = str(exc)
    if reason is not None:
        ci = " (CI=true: a missing service is a failure)" if os.environ.get("CI", "").lower() == "true" else ""
        pytest.fail(f"could not start OpenSearch for integration tests{ci}:\n{reason}", pytrace=False)
    try:
        yield node
    finally:
        node.stop()
