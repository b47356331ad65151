"""``GET /metrics``: the worker's metrics in the Prometheus text format (see :mod:`sluice.worker.observability.metrics`)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from sluice.worker.observability.metrics import CONTENT_TYPE, MetricsCollector

router = APIRouter(tags=["worker"])


@router.get("/metrics", summary="Metrics in the Prometheus text format", response_class=Response)
def metrics(request: Request) -> Response:
    collector: MetricsCollector = request.app.state.metrics
    return Response(collector.render(request.app.state.backfills), media_type=CONTENT_TYPE)
