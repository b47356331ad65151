"""Reading a task configuration: the connector's own keys, whatever the runtime adds beside them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from sluice.connectors.api import PluginConfig

C = TypeVar("C", bound=PluginConfig)


def task_settings(config_class: type[C], raw: Mapping[str, Any]) -> C:
    """Parse a task configuration with the connector's model.

    The runtime passes keys of its own beside the connector's (a sink's ``topics``); the connector already refused unknown keys when it was created, so they are
    dropped here rather than failing the task.
    """
    known = {info.alias or name for name, info in config_class.model_fields.items()}
    parsed: C = config_class.parse({k: v for k, v in raw.items() if k in known})
    return parsed
