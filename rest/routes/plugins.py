"""``/connector-plugins``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from plugins import PluginKind
from rest.deps import HerderDep

router = APIRouter(prefix="/connector-plugins", tags=["plugins"])

_CONNECTOR_KINDS = {PluginKind.SOURCE, PluginKind.SINK}


@router.get("", summary="Installed plugins")
def list_plugins(herder: HerderDep, connectorsOnly: bool = True) -> list[dict[str, Any]]:  # noqa: N803 - Connect's name
    return [
        {"class": p.class_name, "type": p.kind.value, "version": p.version}
        for p in herder.plugins()
        if not connectorsOnly or p.kind in _CONNECTOR_KINDS
    ]
