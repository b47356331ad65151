"""The connector kit's standard checks on the built-ins that need no external service:
the FileStream source and sink, and the sequence source."""

from __future__ import annotations

import json
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import pytest

from sluice.connectors.api import SourceRecord
from sluice.connectors.sink.file.connector import FileStreamSinkConnector
from sluice.connectors.source.file.connector import FileStreamSourceConnector
from sluice.connectors.source.sequence.connector import SequenceSourceConnector
from sluice.connectors.testkit import InvalidConfig, SinkConnectorChecks, SourceConnectorChecks


class TestFileStreamSource(SourceConnectorChecks):
    connector_class = FileStreamSourceConnector

    @pytest.fixture(autouse=True)
    def _input_file(self, tmp_path: Path) -> None:
        self.path = tmp_path / "in.txt"
        self.path.touch()

    def valid_config(self) -> dict[str, Any]:
        return {"file": str(self.path), "topic": "kit-lines", "batch.size": "4"}

    def invalid_configs(self) -> list[InvalidConfig]:
        valid = self.valid_config()
        return [
            InvalidConfig({**valid, "topic": "no spaces allowed"}, "topic", "illegal topic name"),
            InvalidConfig({**valid, "batch.size": "0"}, "batch.size", "batch.size below 1"),
        ]

    def add_source_data(self, start: int, count: int) -> None:
        with self.path.open("a") as f:
            f.writelines(f"line {n}\n" for n in range(start, start + count))

    def expected_identities(self, start: int, count: int) -> list[Hashable]:
        return [("kit-lines", None, f"line {n}") for n in range(start, start + count)]


class TestFileStreamSink(SinkConnectorChecks):
    connector_class = FileStreamSinkConnector

    @pytest.fixture(autouse=True)
    def _output_file(self, tmp_path: Path) -> None:
        self.path = tmp_path / "out.txt"

    def valid_config(self) -> dict[str, Any]:
        return {"file": str(self.path), "topics": "kit-items"}

    def invalid_configs(self) -> list[InvalidConfig]:
        return [InvalidConfig({"file": str(self.path)}, "topics", "neither topics nor topics.regex")]

    def read_written(self) -> list[Hashable]:
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        return [json.loads(line)["id"] for line in lines]


class TestSequenceSource(SourceConnectorChecks):
    """The sequence source makes up its data: ``sequence.count`` bounds it, so the restart check
    sees exactly 0 … 11 once each."""

    connector_class = SequenceSourceConnector
    first_count = 4  # two polls of sequence.batch.size
    second_count = 8

    def valid_config(self) -> dict[str, Any]:
        return {"topic": "kit-seq", "sequence.count": "12", "sequence.batch.size": "2"}

    def invalid_configs(self) -> list[InvalidConfig]:
        return [InvalidConfig({**self.valid_config(), "sequence.rate": "-1"}, "sequence.rate", "negative rate")]

    def add_source_data(self, start: int, count: int) -> None:
        """Nothing to add: task 0 counts by itself."""

    def record_identity(self, record: SourceRecord) -> Hashable:
        return record.value["seq"]

    def expected_identities(self, start: int, count: int) -> list[Hashable]:
        return list(range(start, start + count))
