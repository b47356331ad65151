"""``/connectors/{name}/dlq``: read a connector's dead letter queue and send a sink's dead letters
back to their topics (:mod:`sluice.worker.herder.dead_letters`). Sluice's, not Connect's; records
are data, so both need the operator role on the connector."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from sluice.rest.deps import HerderDep
from sluice.rest.errors import ERROR_RESPONSES
from sluice.worker.herder.dead_letters import MAX_PAGE

router = APIRouter(prefix="/connectors", tags=["dead letter queue"], responses=ERROR_RESPONSES)


class Redrive(BaseModel):
    """Which dead letters to send back: an inclusive range of one DLQ partition's offsets."""

    partition: int = Field(0, ge=0, description="The DLQ partition")
    from_offset: int = Field(ge=0, description="The first offset to send back")
    to_offset: int = Field(ge=0, description="The last offset to send back (inclusive)")
    max_redrives: int = Field(
        3, ge=1, le=100, description="A record already sent back this many times stays in the DLQ (the loop guard)"
    )


@router.get("/{name}/dlq", summary="A page of the connector's dead letter queue, decoded")
def dead_letters(
    name: str,
    herder: HerderDep,
    partition: int = Query(0, ge=0, description="The DLQ partition"),
    offset: int | None = Query(None, ge=0, description="The first offset (default: the oldest record kept)"),
    limit: int = Query(50, ge=1, le=MAX_PAGE, description="The most records to return"),
) -> dict[str, Any]:
    return herder.dead_letters(name, partition, offset, limit)


@router.post("/{name}/dlq/redrive", summary="Send a range of a sink's dead letters back to their topics")
def redrive(name: str, body: Redrive, herder: HerderDep) -> dict[str, Any]:
    return herder.redrive_dead_letters(name, body.partition, body.from_offset, body.to_offset, body.max_redrives)
