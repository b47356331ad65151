"""Drive a connector and its tasks through the SPI the way the runtime does, in the test's thread.

The runtime's order is kept: ``validate`` → ``initialize`` → ``start`` → ``task_configs`` for the
connector; task configurations reach the tasks as the runtime stores them (numbers and booleans as
strings; a sink's also carry ``topics``); a source's offsets are stored only
for the records it delivered, by the last record of each source partition; a sink task is
``open``-ed before ``put`` and ``close``-d before ``stop``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from sluice.connectors.api import (
    Connector,
    RecordMetadata,
    SinkConnector,
    SinkRecordBatch,
    SinkTask,
    SourceRecord,
    SourceRecordBatch,
    SourceTask,
    TopicPartition,
)
from sluice.connectors.testkit.contexts import (
    MemoryConnectorContext,
    MemoryOffsetReader,
    MemorySinkTaskContext,
    MemorySourceTaskContext,
)

#: Keys of a sink's configuration that the runtime reads itself; the connector sees them only if
#: its ``Config`` declares them.
SINK_RUNTIME_KEYS = frozenset({"topics", "topics.regex"})


def as_config_string(value: Any) -> Any:
    """A value as a Connect configuration carries it: booleans and numbers as strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return value


def stringified(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` as read from a ``.properties`` file: every scalar a string."""
    return {str(k): as_config_string(v) for k, v in config.items()}


def own_keys(connector_class: type[Connector], config: Mapping[str, Any]) -> dict[str, Any]:
    """The part of ``config`` the runtime hands to ``validate`` (a sink's ``topics`` only if declared)."""
    if not issubclass(connector_class, SinkConnector):
        return dict(config)
    declared = {info.alias or name for name, info in connector_class.Config.model_fields.items()}
    return {k: v for k, v in config.items() if k not in SINK_RUNTIME_KEYS or k in declared}


def started_connector(connector_class: type[Connector], config: Mapping[str, Any], context: MemoryConnectorContext | None = None) -> Connector:
    """A connector validated, initialized and started as the runtime starts it."""
    validated = connector_class.validate(own_keys(connector_class, config))
    connector = connector_class()
    connector.initialize(context or MemoryConnectorContext())
    connector.start(validated)
    return connector


def runtime_task_configs(connector_class: type[Connector], config: Mapping[str, Any], max_tasks: int) -> list[dict[str, Any]]:
    """Start the connector, ask it for ``max_tasks`` task configurations, stop it; return the
    configurations as a task receives them."""
    connector = started_connector(connector_class, config)
    try:
        generated = connector.task_configs(max_tasks)
    finally:
        connector.stop()
    result = []
    for task_config in generated:
        stored = stringified(task_config)  # the worker stores strings (Connect's task.class it keeps to itself)
        if issubclass(connector_class, SinkConnector):
            stored.update({k: as_config_string(config[k]) for k in SINK_RUNTIME_KEYS if k in config})
        result.append(stored)
    return result


class SourceTaskHarness:
    """One source task, polled by the test, whose delivered offsets go to a :class:`MemoryOffsetReader`.

    ``poll`` counts every record it returns as delivered at once (Kafka acknowledged it): the
    offsets are stored, ``commit_record`` is called if the task overrides it, then ``commit``.
    """

    def __init__(self, task_class: type[SourceTask], task_config: Mapping[str, Any], offsets: MemoryOffsetReader, *, task_id: int = 0) -> None:
        self.task = task_class()
        self.task_config = dict(task_config)
        self.offsets = offsets
        self.context = MemorySourceTaskContext(offsets, task_id=task_id)
        self._wants_commit_record = task_class.commit_record is not SourceTask.commit_record
        self._produced = 0

    def start(self) -> SourceTaskHarness:
        self.task.start(self.task_config, self.context)
        return self

    def poll(self) -> list[SourceRecord]:
        """One ``poll()``; the records it returned, delivered."""
        batch = self.task.poll()
        if not batch:
            return []
        records = list(batch)
        self._deliver(batch, records)
        return records

    def _deliver(self, batch: Sequence[SourceRecord], records: list[SourceRecord]) -> None:
        if isinstance(batch, SourceRecordBatch):
            self.offsets.store(batch.source_partition, batch.last_offset)
        else:
            for record in records:
                self.offsets.store(record.source_partition, record.source_offset)
        if self._wants_commit_record:
            for record in records:
                self.task.commit_record(record, RecordMetadata(record.topic, record.partition or 0, self._produced))
                self._produced += 1
        self.task.commit()

    def poll_until(self, count: int, timeout_s: float) -> list[SourceRecord]:
        """Poll until at least ``count`` records arrived or ``timeout_s`` passed; return them all."""
        deadline = time.monotonic() + timeout_s
        records: list[SourceRecord] = []
        while len(records) < count and time.monotonic() < deadline:
            records.extend(self.poll())
        return records

    def poll_for(self, seconds: float) -> list[SourceRecord]:
        """Every record polled during ``seconds`` (at least one poll)."""
        deadline = time.monotonic() + seconds
        records = self.poll()
        while time.monotonic() < deadline:
            records.extend(self.poll())
        return records

    def stop(self) -> None:
        self.task.stop()


class SinkTaskHarness:
    """One sink task with an assignment, fed and committed by the test."""

    def __init__(self, task_class: type[SinkTask], task_config: Mapping[str, Any], partitions: Sequence[TopicPartition], *, task_id: int = 0) -> None:
        self.task = task_class()
        self.task_config = dict(task_config)
        self.partitions = list(partitions)
        self.context = MemorySinkTaskContext(partitions, task_id=task_id)

    def start(self) -> SinkTaskHarness:
        self.task.start(self.task_config, self.context)
        self.task.open(self.partitions)
        return self

    def put(self, records: SinkRecordBatch) -> None:
        """Hand ``records`` to ``put``, as the runtime does: one batch of one topic."""
        self.task.put(records)

    def pre_commit(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, int]:
        """``pre_commit``, checked against the SPI's rule: only partitions it was given, and for
        each at most the offset it was given (a sink cannot make durable what it never received)."""
        safe = dict(self.task.pre_commit(dict(offsets)))
        for tp, offset in safe.items():
            assert tp in offsets, f"pre_commit returned {tp}, which it was not given ({sorted(offsets)})"
            assert offset <= offsets[tp], f"pre_commit returned offset {offset} for {tp}, beyond the {offsets[tp]} it was given"
        return safe

    def commit_all(self, offsets: Mapping[TopicPartition, int], timeout_s: float) -> dict[TopicPartition, int]:
        """Call ``pre_commit`` (as the runtime does every flush interval) until, over its answers,
        every partition reached its offset in ``offsets`` or ``timeout_s`` passed.

        Returns the highest offset committed per partition. A partition missing from an answer keeps
        what an earlier answer committed, as the runtime's consumer group does.
        """
        deadline = time.monotonic() + timeout_s
        committed: dict[TopicPartition, int] = {}
        while True:
            for tp, offset in self.pre_commit(offsets).items():
                committed[tp] = max(offset, committed.get(tp, offset))
            done = all(committed.get(tp) == offset for tp, offset in offsets.items())
            if done or time.monotonic() >= deadline:
                return committed
            time.sleep(0.2)

    def close_and_stop(self) -> None:
        try:
            self.task.close(self.partitions)
        finally:
            self.task.stop()
