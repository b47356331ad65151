"""Fakes of the runtime contexts for JDBC connector unit tests (SQLite only, no services)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from sluice.connectors.api import SinkRecord, TopicPartition


class FakeOffsetReader:
    """Stored source offsets, keyed by partition."""

    def __init__(self, stored: Mapping[Any, Any] | None = None) -> None:
        self.stored = {_key(p): o for p, o in (stored or {}).items()} if stored else {}

    def put(self, partition: Mapping[str, Any], offset: Mapping[str, Any]) -> None:
        self.stored[_key(partition)] = offset

    def offset(self, partition: Mapping[str, Any]) -> Mapping[str, Any] | None:
        return self.stored.get(_key(partition))

    def offsets(self, partitions: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any] | None]:
        return [self.offset(p) for p in partitions]


def _key(partition: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(dict(partition).items()))


class FakeSourceContext:
    connector_name = "jdbc-source"
    task_id = 0

    def __init__(self, reader: FakeOffsetReader | None = None) -> None:
        self.offset_reader = reader or FakeOffsetReader()


class FakeReporter:
    def __init__(self) -> None:
        self.reported: list[tuple[SinkRecord, BaseException]] = []

    def report(self, record: SinkRecord, error: BaseException) -> None:
        self.reported.append((record, error))


class FakeSinkContext:
    connector_name = "jdbc-sink"
    task_id = 0

    def __init__(self, reporter: FakeReporter | None = None) -> None:
        self.errant_record_reporter = reporter

    def assignment(self) -> set[TopicPartition]:
        return set()

    def pause(self, *partitions: TopicPartition) -> None: ...

    def resume(self, *partitions: TopicPartition) -> None: ...

    def rewind(self, offsets: Any) -> None: ...

    def request_commit(self) -> None: ...


class FakeConnectorContext:
    def __init__(self) -> None:
        self.reconfigurations = 0

    def request_task_reconfiguration(self) -> None:
        self.reconfigurations += 1

    def raise_error(self, error: BaseException) -> None:
        raise error


@pytest.fixture
def db_url(tmp_path: Any) -> str:
    """A SQLite database file of this test."""
    return f"sqlite:///{tmp_path / 'test.db'}"
