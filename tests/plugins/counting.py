"""The sequence source, plus a line in ``starts.file`` each time one of its tasks starts.

Tests of distributed mode count those lines to prove that work they did not touch was never
restarted by a rebalance.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from sluice.connectors.api import SourceTaskContext
from sluice.connectors.source.sequence.connector import (
    SequenceSourceConfig,
    SequenceSourceConnector,
    SequenceSourceTask,
)


class CountingSequenceConfig(SequenceSourceConfig):
    starts_file: str = Field(description="File that gets one line '<task>' per task start")


class CountingSequenceTask(SequenceSourceTask):
    def start(self, config: Mapping[str, Any], context: SourceTaskContext) -> None:
        own = {k: v for k, v in config.items() if k != "starts.file"}
        super().start(own, context)
        with Path(config["starts.file"]).open("a") as f:
            f.write(f"{self.task}\n")


class CountingSequenceSource(SequenceSourceConnector):
    Config = CountingSequenceConfig
    task_class = CountingSequenceTask
