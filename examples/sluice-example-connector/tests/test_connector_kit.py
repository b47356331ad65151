"""The connector kit's standard checks on this package's connectors (``pytest tests``)."""

from __future__ import annotations

import json
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest
from sluice_example_connector import InboxSourceConnector, JsonLinesSinkConnector

from sluice.connectors.api import SinkRecord
from sluice.connectors.testkit import InvalidConfig, SinkConnectorChecks, SourceConnectorChecks


class TestInboxSource(SourceConnectorChecks):
    connector_class = InboxSourceConnector

    @pytest.fixture(autouse=True)
    def _inbox(self, tmp_path: Path) -> None:
        self.inbox = tmp_path / "inbox.jsonl"

    def valid_config(self) -> dict[str, Any]:
        return {"file": str(self.inbox), "topic": "orders", "batch.size": 3}

    def invalid_configs(self) -> list[InvalidConfig]:
        valid = self.valid_config()
        return [
            InvalidConfig({**valid, "batch.size": 0}, "batch.size", "no records per poll"),
            InvalidConfig({**valid, "poll.interval.ms": 5000}, "poll.interval.ms", "poll would block too long"),
        ]

    def add_source_data(self, start: int, count: int) -> None:
        with self.inbox.open("a") as f:
            f.writelines(json.dumps({"id": n, "item": f"order {n}"}) + "\n" for n in range(start, start + count))

    def expected_identities(self, start: int, count: int) -> list[Hashable]:
        return [self.record_identity_of(n) for n in range(start, start + count)]

    @staticmethod
    def record_identity_of(n: int) -> Hashable:
        return ("orders", str(n), json.dumps({"id": n, "item": f"order {n}"}, sort_keys=True))


class TestJsonLinesSink(SinkConnectorChecks):
    connector_class = JsonLinesSinkConnector

    @pytest.fixture(autouse=True)
    def _output(self, tmp_path: Path) -> None:
        self.output = tmp_path / "out.jsonl"

    def valid_config(self) -> dict[str, Any]:
        return {"file": str(self.output), "topics": "orders"}

    def invalid_configs(self) -> list[InvalidConfig]:
        return [InvalidConfig({"file": "", "topics": "orders"}, "file", "empty file name")]

    def read_written(self) -> list[Hashable]:
        lines = self.output.read_text().splitlines() if self.output.exists() else []
        return [json.loads(line)["value"]["id"] for line in lines]

    def unwritable_record(self, topic: str, partition: int, offset: int) -> SinkRecord:
        return SinkRecord(topic, partition, offset, value={"note": "an order without an id"})
