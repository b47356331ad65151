"""An example third-party Sluice connector package: an inbox-file source and a JSON-lines sink."""

from __future__ import annotations

from sluice_example_connector.inbox import InboxSourceConnector, InboxSourceTask
from sluice_example_connector.jsonlines import JsonLinesSinkConnector, JsonLinesSinkTask

__all__ = ["InboxSourceConnector", "InboxSourceTask", "JsonLinesSinkConnector", "JsonLinesSinkTask"]
