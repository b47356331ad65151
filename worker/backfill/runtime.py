"""What the worker lends the Spark jobs of :mod:`sluice.connectors.backfill`, which may not import it:
the plugin registry's converters. (The kinds that run a sink connector's task, the worker's own, are
found through entry points like the others: :mod:`sluice.worker.backfill.topic_sink`.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.connectors.backfill.context import BackfillRuntime
from sluice.plugins import PluginRegistry


def load_converters(spec: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    """``{"key.converter": class, "key": config, ...}`` → the configured (key, value, header)
    converters. Module-level, so Spark pickles it by reference into its executors."""
    registry = PluginRegistry([])
    key = registry.converter(spec["key.converter"], "source.key.converter")()
    key.configure(spec.get("key", {}), True)
    value = registry.converter(spec["value.converter"], "source.value.converter")()
    value.configure(spec.get("value", {}), False)
    header = registry.header_converter(spec["header.converter"], "source.header.converter")()
    header.configure(spec.get("header", {}))
    return key, value, header


RUNTIME = BackfillRuntime(load_converters=load_converters)
