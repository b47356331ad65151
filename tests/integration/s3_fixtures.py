"""Fixtures for tests that need a real S3-compatible server (S3Proxy; moto only as a fallback).

``s3`` starts one :class:`tests.services.s3_server.S3Server` per session on a free loopback port; the
first run fetches S3Proxy's jars with Maven (about 10 s), later runs start in about 3 s. Like the
``kafka`` fixture it never skips: a server that cannot start is a test error, in CI
(``CI=true``) and locally, so a missing Java or Maven cannot pass unnoticed.

``s3_bucket`` creates a fresh bucket per test. Import both from the integration conftest::

    from tests.integration.s3_fixtures import s3, s3_bucket  # noqa: F401
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.shared_services import session_service
from tests.services.s3_server import S3Server


def new_s3(data_dir: Path) -> S3Server:
    """The session's S3 server, not started; its objects and server.log stay under ``data_dir``."""
    return S3Server(backend=os.environ.get("SLUICE_S3_BACKEND", "auto"), data_dir=data_dir, kill_with_parent=True)


@pytest.fixture(scope="session")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """An S3-compatible server for the session: ``.endpoint_url``, ``.access_key``, ``.secret_key``."""
    yield from session_service(tmp_path_factory, "s3", new_s3, "could not start the S3 server for integration tests")


@pytest.fixture
def s3_bucket(s3: S3Server) -> str:
    """A new, empty bucket on the session server."""
    return s3.create_bucket(f"test-{uuid.uuid4().hex[:16]}")
