"""Debezium's heartbeats: a record on ``<topic.heartbeat.prefix>.<topic.prefix>`` every
``heartbeat.interval.ms``, carrying the current position as its offset.

They let the stored offset (and so the database's retained log, a PostgreSQL slot's WAL) move on
while the captured tables are quiet, and show consumers that the source is alive.
"""

from __future__ import annotations

import time
from typing import Any

from sluice.connectors.api import Schema, SourceRecord, Type

HEARTBEAT_KEY_SCHEMA = Schema.struct(
    [("serverName", Schema(Type.STRING))], name="io.debezium.connector.common.ServerNameKey"
)
HEARTBEAT_VALUE_SCHEMA = Schema.struct([("ts_ms", Schema(Type.INT64))], name="io.debezium.connector.common.Heartbeat")


def heartbeat_record(topic: str, server_name: str, partition: dict[str, Any], offset: dict[str, Any]) -> SourceRecord:
    """A heartbeat of the source named ``server_name`` (its ``topic.prefix``) at ``offset``."""
    return SourceRecord(
        topic,
        {"ts_ms": int(time.time() * 1000)},
        HEARTBEAT_VALUE_SCHEMA,
        {"serverName": server_name},
        HEARTBEAT_KEY_SCHEMA,
        None,
        None,
        None,
        partition,
        offset,
    )


class HeartbeatSchedule:
    """When the next heartbeat is due (``interval_ms`` 0: never). Thread: the task thread."""

    def __init__(self, interval_ms: int) -> None:
        self.interval_s = interval_ms / 1000
        self.next_at = time.monotonic() + self.interval_s

    def due(self, now: float) -> bool:
        """Whether a heartbeat is due at ``now`` (``time.monotonic()``); if so, the next one is planned."""
        if not self.interval_s or now < self.next_at:
            return False
        self.next_at = now + self.interval_s
        return True
