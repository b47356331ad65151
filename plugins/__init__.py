"""Plugin discovery: connectors, converters, transforms, predicates and config providers."""

from sluice.plugins.registry import PluginInfo, PluginKind, PluginRegistry

__all__ = ["PluginInfo", "PluginKind", "PluginRegistry"]
