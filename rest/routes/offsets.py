"""``/connectors/{name}/offsets``: read, alter and reset a connector's offsets (KIP-875)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from sluice.rest.deps import HerderDep
from sluice.rest.errors import ERROR_RESPONSES

router = APIRouter(prefix="/connectors", tags=["offsets"], responses=ERROR_RESPONSES)


class ConnectorOffset(BaseModel):
    """One partition and its offset; sinks use ``{kafka_topic, kafka_partition}`` / ``{kafka_offset}``."""

    partition: dict[str, Any] | None = Field(None, description="The source partition or Kafka topic partition")
    offset: dict[str, Any] | None = Field(None, description="The new offset; null resets the partition")


class ConnectorOffsets(BaseModel):
    """Body of ``GET`` and ``PATCH /connectors/{name}/offsets``."""

    offsets: list[ConnectorOffset] = Field(default_factory=list)


class OffsetsMessage(BaseModel):
    """The answer to an offsets change."""

    message: str


@router.get("/{name}/offsets", summary="The connector's current offsets", response_model=ConnectorOffsets)
def get_offsets(name: str, herder: HerderDep) -> dict[str, Any]:
    return {"offsets": herder.connector_offsets(name)}


@router.patch("/{name}/offsets", summary="Alter the offsets of a STOPPED connector", response_model=OffsetsMessage)
def alter_offsets(name: str, body: ConnectorOffsets, herder: HerderDep) -> dict[str, Any]:
    entries = [entry.model_dump() for entry in body.offsets]
    return {"message": herder.alter_connector_offsets(name, entries)}


@router.delete("/{name}/offsets", summary="Reset every offset of a STOPPED connector", response_model=OffsetsMessage)
def reset_offsets(name: str, herder: HerderDep) -> dict[str, Any]:
    return {"message": herder.reset_connector_offsets(name)}
