"""``GET /``, ``GET /health`` and ``GET /cluster``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from sluice.rest.deps import HerderDep

try:
    SLUICE_VERSION = version("sluice")
except PackageNotFoundError:  # running from a source tree
    SLUICE_VERSION = "0.1.0"

router = APIRouter(tags=["worker"])


@router.get("/", summary="Worker information")
def worker_info(herder: HerderDep) -> dict[str, Any]:
    return {"version": SLUICE_VERSION, "commit": "sluice", "kafka_cluster_id": herder.kafka_cluster_id()}


@router.get("/health", summary="Readiness and liveness")
def health(herder: HerderDep) -> JSONResponse:
    """KIP-1017: 200 healthy; 503 while the worker starts; 500 when its herder is stuck or it has
    lost contact with the Kafka cluster, with the reason in ``message``; ``details`` add what an
    operator checks beside it (``sandbox``: whether task hosts are confined)."""
    report = herder.health()
    body: dict[str, Any] = {"status": report.status, "message": report.message}
    if report.details:
        body["details"] = dict(report.details)
    return JSONResponse(body, status_code=report.http_status)


@router.get("/cluster", summary="The cluster's workers and its leader (Sluice's own)")
def cluster(
    herder: HerderDep,
    health: Annotated[bool, Query(description="Also ask every worker for its /health (2 s each, at once)")] = False,
) -> dict[str, Any]:
    """``mode`` (``standalone`` or ``distributed``), this worker's id, the leader's id (``null``:
    none) and the live workers with their REST URLs, as this worker knows them now. With
    ``health=true`` each worker also carries ``health``: ``{"status", "message"}`` as its own
    ``/health`` answers (``unreachable`` when it does not answer in time)."""
    view = herder.cluster_view()
    body = view.to_json()
    if health:
        healths = herder.cluster_health(view)
        for worker in body["workers"]:
            worker["health"] = healths.get(worker["id"], {"status": "unknown", "message": ""})
    return body
