"""What the worker lends the Spark jobs of :mod:`sluice.connectors.backfill`, which may not import it:
the kinds that run a sink connector's task, and the plugin registry's converters."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sluice.connectors.backfill.context import BackfillRuntime
from sluice.plugins import PluginRegistry
from sluice.worker.backfill.topic_sink import run_topic_to_connector, run_topic_to_s3


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


RUNTIME = BackfillRuntime(
    kinds={"topic_to_s3": run_topic_to_s3, "topic_to_sink": run_topic_to_connector},
    load_converters=load_converters,
)
