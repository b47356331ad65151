"""A kit for connector authors: the standard checks every Sluice connector should pass.

Subclass :class:`SourceConnectorChecks` or :class:`SinkConnectorChecks` in a pytest module, fill
in the hooks (the connector class, a valid configuration, how to add source data or read back
what a sink wrote), and pytest runs the checks against your connector through the SPI alone, with
the in-memory contexts of :mod:`sluice.connectors.testkit.contexts`: no Kafka, no worker. See
``docs/writing-connectors.md``.

It imports only :mod:`sluice.connectors.api`, the standard library and pytest; the worker never imports
it, and it is no pytest plugin: a test module that subclasses a check class is all it takes.
"""

from __future__ import annotations

from sluice.connectors.testkit.common import ConnectorChecks, InvalidConfig, frozen
from sluice.connectors.testkit.contexts import (
    CollectingErrantRecordReporter,
    MemoryConnectorContext,
    MemoryOffsetReader,
    MemorySinkTaskContext,
    MemorySourceTaskContext,
)
from sluice.connectors.testkit.harness import (
    SinkTaskHarness,
    SourceTaskHarness,
    runtime_task_configs,
    started_connector,
)
from sluice.connectors.testkit.sink_checks import KIT_VALUE_SCHEMA, SinkConnectorChecks
from sluice.connectors.testkit.source_checks import SourceConnectorChecks

__all__ = [
    "KIT_VALUE_SCHEMA",
    "CollectingErrantRecordReporter",
    "ConnectorChecks",
    "InvalidConfig",
    "MemoryConnectorContext",
    "MemoryOffsetReader",
    "MemorySinkTaskContext",
    "MemorySourceTaskContext",
    "SinkConnectorChecks",
    "SinkTaskHarness",
    "SourceConnectorChecks",
    "SourceTaskHarness",
    "frozen",
    "runtime_task_configs",
    "started_connector",
]
