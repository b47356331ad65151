"""``/admin/loggers``: read and change this worker's log levels at runtime (KIP-495)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from pydantic import BaseModel, Field

from sluice.rest.deps import HerderDep
from sluice.rest.errors import ERROR_RESPONSES
from sluice.rest.logger_levels import LoggerLevels

router = APIRouter(prefix="/admin/loggers", tags=["admin"], responses=ERROR_RESPONSES)


def _levels(request: Request) -> LoggerLevels:
    return request.app.state.logger_levels  # type: ignore[no-any-return]


LevelsDep = Annotated[LoggerLevels, Depends(_levels)]


class LevelRequest(BaseModel):
    """Body of ``PUT /admin/loggers/{name}``."""

    level: str = Field(description="OFF, FATAL, ERROR, WARN, INFO, DEBUG or TRACE")


@router.get("", summary="Loggers with an explicit level, and the root logger")
def list_loggers(levels: LevelsDep) -> dict[str, Any]:
    return levels.all()


@router.get("/{name}", summary="Effective level of one logger")
def get_logger(name: str, levels: LevelsDep) -> dict[str, Any]:
    return levels.level(name)


@router.put("/{name}", summary="Set the level of a logger and its descendants")
def set_logger(name: str, body: LevelRequest, levels: LevelsDep, herder: HerderDep, scope: str = "worker") -> Any:
    """``scope=worker`` (the default; any other value too, as in Connect): this worker and its task
    processes, answered with the loggers affected here. ``scope=cluster`` (KIP-976): every worker of
    the cluster through the config topic (a standalone worker is a cluster of one), answered 204."""
    if scope.lower() == "cluster":
        levels.parse_level(body.level)  # a bad level is a 400 before anything is written
        herder.set_cluster_logger_level(name, body.level)
        return Response(status_code=204)
    return levels.set_level(name, body.level)
