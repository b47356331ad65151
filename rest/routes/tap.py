"""``POST /connectors/{name}/tap``: the live tap — a sample of the next records a connector moves
(:mod:`sluice.worker.observability.tap`). Sluice's, not Connect's; records are data, so it needs
the operator role on the connector."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query

from sluice.rest.deps import HerderDep
from sluice.rest.errors import ERROR_RESPONSES
from sluice.worker.observability.tap import MAX_COUNT, MAX_TIMEOUT_S

router = APIRouter(prefix="/connectors", tags=["live tap"], responses=ERROR_RESPONSES)


@router.post("/{name}/tap", summary="Sample the next records the connector moves")
def tap(
    name: str,
    herder: HerderDep,
    count: int = Query(10, ge=1, le=MAX_COUNT, description="How many records to wait for"),
    timeout: float = Query(10.0, gt=0, le=MAX_TIMEOUT_S, description="The longest wait, in seconds"),
) -> dict[str, Any]:
    """``records`` (each with its task, topic, key, value and headers decoded; a sink's also its
    partition and offset), ``complete`` (``count`` arrived in time) and ``unreachable`` (workers
    running tasks of the connector that did not answer)."""
    return herder.tap(name, count, timeout)
