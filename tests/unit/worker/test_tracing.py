"""Batch traces: off unless an endpoint is configured, and the attributes a batch's trace carries."""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

import pytest
from click.testing import CliRunner

from sluice.cli.main import main
from sluice.connectors.api import SourceRecord, SourceRecordBatch, TopicPartition
from sluice.worker.observability import tracing
from sluice.worker.status import ConnectorTaskId


class Message(NamedTuple):
    t: str
    p: int
    o: int

    def topic(self) -> str:
        return self.t

    def partition(self) -> int:
        return self.p

    def offset(self) -> int:
        return self.o


@pytest.fixture
def untraced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(tracing.ENDPOINT_ENV, raising=False)
    monkeypatch.delenv(tracing.TRACES_ENDPOINT_ENV, raising=False)


def test_no_tracer_without_an_endpoint(untraced: None) -> None:
    assert not tracing.enabled()
    assert tracing.batch_tracer(ConnectorTaskId("c", 0), "sink") is None


def test_the_worker_key_turns_tracing_on(untraced: None) -> None:
    tracing.configure(None)
    assert not tracing.enabled()
    try:
        tracing.configure("http://collector:4318")
        assert tracing.enabled()
    finally:
        # configure() wrote it: take it out again. (monkeypatch.delenv would put it back at teardown,
        # and every worker a later test starts would then export traces to a host that does not exist.)
        os.environ.pop(tracing.ENDPOINT_ENV, None)


def test_sink_attributes_name_each_partition_with_its_first_and_last_offset() -> None:
    messages = [Message("t", 1, 7), Message("t", 0, 3), Message("t", 1, 8), Message("t", 0, 4), Message("t", 0, 5)]
    consumed = {TopicPartition("t", 0): 6, TopicPartition("t", 1): 9}  # next offsets, as the runner tracks them
    attributes = tracing.sink_attributes(messages, consumed, partitions=2)
    assert attributes == {
        "messaging.batch.message_count": 5,
        "sluice.topic_partitions": ["t-0", "t-1"],
        "sluice.offset.first": [3, 7],
        "sluice.offset.last": [5, 8],
    }


def test_source_attributes_of_a_list_and_of_a_batch() -> None:
    partition = {"file": "in.txt"}
    records = [SourceRecord("t", f"v{i}", source_partition=partition, source_offset={"position": i}) for i in range(3)]
    attributes = tracing.source_attributes(records, 3, ["t"] * 3)
    assert attributes["sluice.topics"] == ["t"] and attributes["messaging.batch.message_count"] == 3
    assert json.loads(attributes["sluice.source.offset.first"]) == {"position": 0}
    assert json.loads(attributes["sluice.source.offset.last"]) == {"position": 2}
    assert json.loads(attributes["sluice.source.partition"]) == partition

    loaded: list[Any] = []

    def loader() -> list[Any]:
        loaded.append(True)
        return [{"position": i} for i in range(3)]

    batch = SourceRecordBatch("t", ["a", "b", "c"], source_partition=partition, offsets_loader=loader, last_offset={"position": 2})
    attributes = tracing.source_attributes(batch, 3, ["t"])
    assert json.loads(attributes["sluice.source.offset.last"]) == {"position": 2}
    assert "sluice.source.offset.first" not in attributes and not loaded  # no offset computed per record


def test_the_worker_commands_take_log_format() -> None:
    for command in ("standalone", "distributed"):
        result = CliRunner().invoke(main, [command, "--help"])
        assert result.exit_code == 0 and "--log-format [text|json]" in result.output
