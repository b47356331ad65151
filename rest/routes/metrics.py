"""``GET /metrics``: the worker's metrics in the Prometheus text format (see
:mod:`sluice.worker.observability.metrics`); ``GET /cluster/metrics``: every worker's, for a page
that shows a connector whose tasks run on several workers."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from sluice.rest.deps import HerderDep
from sluice.worker.observability.metrics import CONTENT_TYPE, MetricsCollector

router = APIRouter(tags=["worker"])

#: How long another worker is given for its /metrics (a worker of 800 tasks renders in well under 1 s).
PEER_METRICS_TIMEOUT_S = 5.0

NamesQuery = Annotated[
    list[str],
    Query(alias="name", description="Only these metric families (repeat the parameter); default: all"),
]


def _render(request: Request, names: list[str]) -> str:
    collector: MetricsCollector = request.app.state.metrics
    return collector.render(request.app.state.backfills, only=frozenset(names))


@router.get("/metrics", summary="Metrics in the Prometheus text format", response_class=Response)
def metrics(request: Request, names: NamesQuery = []) -> Response:  # noqa: B006 - FastAPI copies defaults
    return Response(_render(request, names), media_type=CONTENT_TYPE)


@router.get("/cluster/metrics", summary="Every worker's /metrics, as text per worker (Sluice's own)")
def cluster_metrics(request: Request, herder: HerderDep, names: NamesQuery = []) -> dict[str, Any]:  # noqa: B006
    """``workers``: for each worker of ``GET /cluster``, its ``id`` and the text of its ``/metrics``
    (with the same ``name`` filter), asked with the caller's credentials; ``metrics`` is ``null``
    and ``error`` says why for a worker that did not answer with them."""
    view = herder.cluster_view()
    path = "/metrics" + (f"?{urlencode([('name', n) for n in names])}" if names else "")
    workers: list[dict[str, Any]] = [{"id": view.worker_id, "metrics": _render(request, names), "error": None}]
    for answer in herder.ask_workers(view, path, PEER_METRICS_TIMEOUT_S):
        if answer.status == 200:
            workers.append({"id": answer.worker.id, "metrics": answer.body.decode("utf-8", "replace"), "error": None})
        else:
            error = answer.error or f"HTTP {answer.status}: {answer.body[:200].decode('utf-8', 'replace')}"
            workers.append({"id": answer.worker.id, "metrics": None, "error": error})
    return {"workers": workers}


@router.get("/connectors/{name}/metrics/history", summary="A connector's throughput, errors and lag over the last hour")
def connector_history(
    name: str,
    herder: HerderDep,
    span_ms: Annotated[
        int | None, Query(ge=1, description="How far back (default and at most the worker's metrics.history.span.ms)")
    ] = None,
) -> dict[str, Any]:
    """Sluice's own. ``points``: one per ``interval_ms`` (``metrics.history.interval.ms``) with
    ``at`` (ms since the epoch), records per second ``in`` and ``out``, ``errors`` in the interval
    and ``lag`` (a sink's records behind at its end; ``null`` for a source), summed over every
    worker that runs the connector's tasks; ``unreachable`` names a worker that did not answer."""
    return herder.connector_history(name, span_ms)
