"""Differential tests of the JDBC sink's fast path: the same batches written into two tables, once
as a ``raw_typed`` task receives them (the fast path may take them) and once decoded (it may not),
and the tables compared row by row."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar

from sluice.connectors.api import SinkRecordBatch
from sluice.connectors.sink.jdbc.task import JdbcSinkTask
from tests.integration.jdbc_helpers import sql
from tests.unit.connectors.jdbc.conftest import FakeReporter, FakeSinkContext

Item = TypeVar("Item")
#: ``(a batch's items, its first offset, raw?)`` → the batch the sink runner would build.
BatchMaker = Callable[[Sequence[Item], int, bool], SinkRecordBatch]


class FastAndDecoded(Generic[Item]):
    """Two tables (``fast_…``, ``slow_…``) written with the same batches of ``topic``; ``settings``
    are the task settings both get besides the connection, the topic and the table (``auto.create``,
    …); with ``columns`` both tables are created first."""

    def __init__(self, url: str, topic: str, settings: dict[str, str], columns: str | None = None) -> None:
        self.url, self.topic = url, topic
        suffix = uuid.uuid4().hex[:8]
        self.fast_table, self.slow_table = f"fast_{suffix}", f"slow_{suffix}"
        if columns is not None:
            for table in (self.fast_table, self.slow_table):
                sql(url, f'CREATE TABLE "{table}" ({columns})')
        self.settings = settings
        self.tasks: list[JdbcSinkTask] = []
        self.reporters: dict[str, FakeReporter] = {}

    def task(self, table: str, config: dict[str, str]) -> JdbcSinkTask:
        task, reporter = JdbcSinkTask(), FakeReporter()
        task.start(
            {"connection.url": self.url, "topics": self.topic, "table.name.format": table, **self.settings, **config},
            FakeSinkContext(reporter),
        )
        self.tasks.append(task)
        self.reporters[table] = reporter
        return task

    def write_with(
        self, make: BatchMaker[Item], batches: Iterable[Sequence[Item]], config: dict[str, str], *, held: bool = False
    ) -> JdbcSinkTask:
        """Write ``batches`` (built by ``make``) through both tasks; return the fast table's task.
        Each batch is a poll that caught up (an empty put follows it, so nothing is held back
        across batches) unless ``held``: then the task may join consecutive batches into one chunk."""
        batches = list(batches)
        fast, slow = self.task(self.fast_table, config), self.task(self.slow_table, config)
        for task, raw in ((fast, True), (slow, False)):
            offset = 0
            for items in batches:
                task.put(make(items, offset, raw))
                offset += len(items)
                if not held:
                    task.put(make([], offset, raw))
            task.flush({})
        assert slow.records_from_json == 0
        return fast

    def rows(self, table: str) -> list[str]:
        return [r[0] for r in sql(self.url, f'SELECT t::text FROM "{table}" t ORDER BY t::text')]

    def assert_same(self) -> list[str]:
        fast, slow = self.rows(self.fast_table), self.rows(self.slow_table)
        assert fast == slow
        return fast

    def close(self) -> None:
        for task in self.tasks:
            task.stop()


def pairs(make: Callable[..., Any]) -> Iterator[Callable[..., Any]]:
    """A fixture's body: yields a factory of pairs (``make``'s arguments), closes every pair made."""
    made: list[Any] = []

    def factory(*args: Any, **kwargs: Any) -> Any:
        made.append(make(*args, **kwargs))
        return made[-1]

    yield factory
    for pair in made:
        pair.close()
