"""A test sink that takes raw JSON values and has no code of its own for values it cannot use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from sluice.connectors.api import PluginConfig, SinkConnector, SinkRecordBatch, SinkTask, SinkTaskContext, ValueFormat


class RawJsonSinkConfig(PluginConfig):
    topics: str
    file: str


class RawJsonSinkTask(SinkTask):
    """Appends each value as a JSON line: the values of a raw batch, decoded when read. A value
    that does not decode is the runtime's business (it delivers the batch again, decoded)."""

    value_format = ValueFormat.RAW_JSON

    def start(self, config: Mapping[str, Any], context: SinkTaskContext) -> None:
        self.cfg = RawJsonSinkConfig.parse(config, ignore={"name"})
        self.raw_batches = 0

    def put(self, records: SinkRecordBatch) -> None:
        kind = "raw" if records.raw_values is not None else "decoded"
        with open(self.cfg.file, "ab") as f:
            f.writelines(orjson.dumps({"value": v, "delivered": kind}) + b"\n" for v in records.values)

    def stop(self) -> None:
        pass


class RawJsonSink(SinkConnector):
    Config = RawJsonSinkConfig
    task_class = RawJsonSinkTask

    def start(self, config: Any) -> None:
        self.config = config

    def task_configs(self, max_tasks: int) -> list[dict[str, Any]]:
        return [self.config.model_dump(by_alias=True)]
