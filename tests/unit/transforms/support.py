"""Helpers shared by the transform tests."""

from __future__ import annotations

from typing import Any

from sluice.connectors.api import SinkRecord, SourceRecord
from sluice.connectors.api.transform import Predicate, Transformation


def configured(cls: type[Transformation] | type[Predicate], **config: Any) -> Any:
    """An instance of ``cls`` configured with ``config``; ``static_field`` stands for ``static.field``."""
    plugin = cls()
    plugin.configure({key.replace("_", "."): value for key, value in config.items()})
    return plugin


def sink(value: Any = None, value_schema: Any = None, **fields: Any) -> SinkRecord:
    """A sink record on topic ``test``, partition 0, offset 42, timestamp 1_700_000_000_000."""
    base: dict[str, Any] = {"topic": "test", "partition": 0, "kafka_offset": 42, "timestamp": 1_700_000_000_000}
    base.update(fields)
    return SinkRecord(value=value, value_schema=value_schema, **base)


def source(value: Any = None, value_schema: Any = None, **fields: Any) -> SourceRecord:
    """A source record on topic ``test`` with partition 0 and timestamp 1_700_000_000_000."""
    base: dict[str, Any] = {"topic": "test", "partition": 0, "timestamp": 1_700_000_000_000}
    base.update(fields)
    return SourceRecord(value=value, value_schema=value_schema, **base)
