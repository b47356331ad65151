"""The in-memory bucket the S3 sink task tests write to."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sluice.connectors.s3_common.storage import MemoryStorage
from sluice.connectors.sink.s3.task import S3SinkTask


@pytest.fixture
def bucket() -> Iterator[MemoryStorage]:
    storage = MemoryStorage("bkt")
    S3SinkTask.storage_factory = lambda cfg: storage
    yield storage
    S3SinkTask.storage_factory = None
