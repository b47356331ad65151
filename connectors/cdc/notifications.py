"""Debezium's snapshot notifications (``notification.enabled.channels``).

A notification says where a snapshot stands: ``STARTED``, ``IN_PROGRESS`` (per chunk),
``TABLE_SCAN_COMPLETED``, ``COMPLETED``, ``PAUSED``, ``RESUMED``, ``ABORTED``. The ``sink`` channel
writes each as a record to ``notification.sink.topic.name`` with Debezium's schemas
(``io.debezium.connector.common.NotificationKey`` / ``…Notification``); the ``log`` channel writes
an INFO line. Records carry no source offset: they say nothing about where streaming stands.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

from sluice.connectors.api import Schema, SourceRecord, Type
from sluice.connectors.cdc.config import NotificationSettings
from sluice.connectors.cdc.emitter import ChangeBuffer

log = logging.getLogger(__name__)

INITIAL_SNAPSHOT = "Initial Snapshot"
INCREMENTAL_SNAPSHOT = "Incremental Snapshot"

NOTIFICATION_KEY_SCHEMA = Schema.struct(
    [("id", Schema(Type.STRING))], name="io.debezium.connector.common.NotificationKey", version=1
)
NOTIFICATION_VALUE_SCHEMA = Schema.struct(
    [
        ("id", Schema(Type.STRING)),
        ("type", Schema(Type.STRING)),
        ("aggregate_type", Schema(Type.STRING)),
        ("additional_data", Schema.map(Schema(Type.STRING), Schema(Type.STRING), optional=True)),
        ("timestamp", Schema(Type.INT64)),
    ],
    name="io.debezium.connector.common.Notification",
    version=1,
)


class SnapshotNotifier:
    """Sends a snapshot's notifications to the enabled channels.

    Sink records go to the stream decoder's outbox, so they leave with the poll that caused them.
    Thread: the task thread."""

    def __init__(self, cfg: NotificationSettings, buffer: ChangeBuffer) -> None:
        self.connector_name = cfg.topic_prefix
        self.topic = cfg.notification_sink_topic_name if "sink" in cfg.notification_enabled_channels else None
        self.log = "log" in cfg.notification_enabled_channels
        self.buffer = buffer

    @property
    def enabled(self) -> bool:
        return self.topic is not None or self.log

    def __call__(self, aggregate_type: str, kind: str, data: dict[str, Any] | None = None) -> None:
        """Send one notification; ``data`` becomes ``additional_data`` (values as strings)."""
        if not self.enabled:
            return
        additional = {"connector_name": self.connector_name}
        additional.update({k: _text(v) for k, v in (data or {}).items() if v is not None})
        note = {
            "id": str(uuid.uuid4()),
            "type": kind,
            "aggregate_type": aggregate_type,
            "additional_data": additional,
            "timestamp": int(time.time() * 1000),
        }
        if self.log:
            log.info("Notification %s: %s %s %s", note["id"], aggregate_type, kind, additional)
        if self.topic is not None:
            record = SourceRecord(
                self.topic, note, NOTIFICATION_VALUE_SCHEMA, {"id": note["id"]}, NOTIFICATION_KEY_SCHEMA
            )
            self.buffer.outbox.append([record])


def _text(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)
