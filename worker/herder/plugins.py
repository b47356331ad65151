"""Plugin queries: what is installed, a plugin's config keys, and validation of a config."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sluice.connectors.api import NotFoundError
from sluice.plugins import PluginInfo, PluginKind
from sluice.worker.config.infos import plugin_definitions, validate_config
from sluice.worker.herder.api import BadRequest
from sluice.worker.herder.calls import CONNECTOR_KINDS, stringify
from sluice.worker.worker import Worker


class PluginCatalog:
    """The herder's answers about plugins, from the worker's plugin registry."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def plugins(self) -> list[PluginInfo]:
        return self.worker.plugins.plugins()

    def secret_keys(self, raw: Mapping[str, Any]) -> set[str]:
        """The password-typed keys of the connector ``raw`` configures (none for an unknown class)."""
        info = self.worker.plugins.find(str(raw.get("connector.class", "")), CONNECTOR_KINDS)
        if info is None:
            return set()
        config_model: Any = getattr(info.cls, "Config", None)
        return set(config_model.secret_keys()) if config_model is not None else set()

    def connector_type(self, raw: Mapping[str, Any]) -> str:
        """``source``, ``sink`` or ``unknown``."""
        info = self.worker.plugins.find(str(raw.get("connector.class", "")), CONNECTOR_KINDS)
        return info.kind.value if info is not None else "unknown"

    def connector_plugin_config(self, plugin: str) -> list[dict[str, Any]]:
        kinds = (*CONNECTOR_KINDS, *(k for k in PluginKind if k not in CONNECTOR_KINDS))
        info = self.worker.plugins.find(plugin, kinds)
        if info is None:
            raise NotFoundError(self._unknown_plugin(plugin, kinds))
        return plugin_definitions(info)

    def _unknown_plugin(self, plugin: str, kinds: Iterable[PluginKind]) -> str:
        """Connect's "Unknown plugin X." plus the closest names, when one is close (a typo)."""
        close = self.worker.plugins.suggest(plugin, kinds)
        return f"Unknown plugin {plugin}." + (f" Did you mean {' or '.join(close)}?" if close else "")

    def validate_connector_config(self, plugin: str, config: Mapping[str, Any]) -> dict[str, Any]:
        info = self.worker.plugins.find(plugin, CONNECTOR_KINDS)
        if info is None:
            raise NotFoundError(self._unknown_plugin(plugin, CONNECTOR_KINDS))
        raw = {str(k): stringify(v) for k, v in config.items()}
        included = raw.get("connector.class")
        if included:
            included_info = self.worker.plugins.find(str(included), CONNECTOR_KINDS)
            if included_info is None or included_info.cls is not info.cls:
                close = self.worker.plugins.suggest(str(included), CONNECTOR_KINDS) if included_info is None else []
                hint = f" (did you mean {' or '.join(close)}?)" if close else ""
                raise BadRequest(f"Included connector type {included}{hint} does not match request type {plugin}")
        else:
            raw["connector.class"] = plugin
        return validate_config(
            info,
            raw,
            self.worker.validate,
            self.worker.resolve,
            exactly_once_enabled=self.worker.exactly_once_source_enabled,
            offsets_topics=self.worker.honours_offsets_topics,
        )
