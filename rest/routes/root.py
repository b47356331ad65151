"""``GET /`` and ``GET /health``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from rest.deps import HerderDep

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
    ready = getattr(herder, "ready", True)
    if ready:
        return JSONResponse({"status": "healthy", "message": "Worker has completed startup and is ready to handle requests."})
    return JSONResponse({"status": "starting", "message": "Worker is still starting up."}, status_code=503)
