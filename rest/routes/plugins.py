"""``/connector-plugins``: installed plugins, their config definitions and config validation."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from sluice.plugins import PluginKind
from sluice.rest.deps import HerderDep
from sluice.rest.errors import ERROR_RESPONSES

router = APIRouter(prefix="/connector-plugins", tags=["plugins"], responses=ERROR_RESPONSES)

_CONNECTOR_KINDS = {PluginKind.SOURCE, PluginKind.SINK}


@router.get("", summary="Installed plugins")
def list_plugins(herder: HerderDep, connectorsOnly: bool = True) -> list[dict[str, Any]]:  # noqa: N803 - Connect's name
    return [
        {"class": p.class_name, "type": p.kind.value, "version": p.version}
        for p in herder.plugins()
        if not connectorsOnly or p.kind in _CONNECTOR_KINDS
    ]


@router.get("/{plugin}/config", summary="The plugin's configuration definition (ConfigKeyInfo list)")
def plugin_config(plugin: str, herder: HerderDep) -> list[dict[str, Any]]:
    return herder.connector_plugin_config(plugin)


@router.put("/{plugin}/config/validate", summary="Validate a connector configuration key by key (ConfigInfos)")
def validate_config(plugin: str, herder: HerderDep, config: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    return herder.validate_connector_config(plugin, config)
