"""A test sink whose ``put()`` rejects some records through the errant record reporter (KIP-610)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sluice.connectors.api import DataError, PluginConfig, SinkConnector, SinkRecord, SinkTask, SinkTaskContext


class ErrantSinkConfig(PluginConfig):
    topics: str
    file: str
    reject: str = "bad"


class ErrantSinkTask(SinkTask):
    """Appends each record's value to ``file``; a value containing ``reject`` is reported instead."""

    def start(self, config: Mapping[str, Any], context: SinkTaskContext) -> None:
        self.cfg = ErrantSinkConfig.parse(config, ignore={"name"})
        self.context = context

    def put(self, records: Sequence[SinkRecord]) -> None:
        lines = []
        for record in records:
            if self.cfg.reject in str(record.value):
                reporter = self.context.errant_record_reporter
                error = DataError(f"rejected value {record.value!r}")
                if reporter is None:
                    raise error
                reporter.report(record, error)
            else:
                lines.append(f"{record.value}\n")
        with open(self.cfg.file, "a") as f:
            f.writelines(lines)

    def stop(self) -> None:
        pass


class ErrantSink(SinkConnector):
    Config = ErrantSinkConfig
    task_class = ErrantSinkTask

    def start(self, config: Any) -> None:
        self.config = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [self.config.model_dump(by_alias=True) for _ in range(max_tasks)]
