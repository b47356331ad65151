"""``/backfills``: bulk loads and reprocessing jobs on Spark (see :mod:`sluice.worker.backfill`).

The routes are thin: the :class:`~worker.backfill.BackfillManager` on ``app.state.backfills``
validates, runs and reports; its domain errors become HTTP statuses in :mod:`sluice.rest.errors`
(a bad spec is a 400 naming the key, an unknown job a 404, a job already running a 409).
"""

from __future__ import annotations

import atexit
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse

from sluice.rest.errors import ERROR_RESPONSES
from sluice.worker.backfill import BackfillManager
from sluice.worker.backfill.handoff_guard import HandoffGuard
from sluice.worker.herder import Herder

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/backfills", tags=["backfills"], responses=ERROR_RESPONSES)


def _manager(request: Request) -> BackfillManager:
    return request.app.state.backfills  # type: ignore[no-any-return]


ManagerDep = Annotated[BackfillManager, Depends(_manager)]


@router.get("", summary="List backfill jobs with the state of their latest run")
def list_backfills(manager: ManagerDep) -> list[dict[str, Any]]:
    return manager.list()


@router.post("", status_code=201, summary="Submit a backfill job (runs now, or on its cron schedule)")
def submit_backfill(manager: ManagerDep, spec: Annotated[dict[str, Any], Body()]) -> JSONResponse:
    info = manager.submit(spec)
    return JSONResponse(info, status_code=201, headers={"Location": f"/backfills/{info['id']}"})


@router.get("/{job_id}", summary="A job's spec (secrets hidden), state, progress, rate, ETA and error")
def get_backfill(job_id: str, manager: ManagerDep) -> dict[str, Any]:
    return manager.get(job_id)


@router.post("/{job_id}/run", summary="Start a stored job now")
def run_backfill(job_id: str, manager: ManagerDep) -> dict[str, Any]:
    return manager.run_now(job_id)


@router.delete("/{job_id}", summary="Cancel the running run (state CANCELLED); with forget=true also remove the job")
def cancel_backfill(
    job_id: str, manager: ManagerDep, forget: Annotated[bool, Query(description="Also delete the job and its schedule")] = False
) -> Response:
    if forget:
        manager.delete(job_id)
        return Response(status_code=204)
    return JSONResponse(manager.cancel(job_id), status_code=202)


def install(app: FastAPI, herder: Herder, manager: BackfillManager | None = None) -> BackfillManager:
    """Mount ``/backfills`` on ``app`` with a manager built from the herder's worker settings.

    The manager starts now (its schedules must run whether or not anyone calls the API) and stops
    when the process exits. A distributed herder (one with ``backfill_cluster``) keeps the jobs in
    its ``sluice.storage.topic`` and lets only its leader fire schedules; that manager starts with the herder,
    once the topic is known to exist, and stops before it.
    """
    cluster = getattr(herder, "backfill_cluster", None)
    if manager is None:
        if cluster is not None:
            manager = BackfillManager.for_cluster(herder.worker_settings(), **cluster())
        else:
            manager = BackfillManager.from_worker_settings(herder.worker_settings())
    if manager.handoff_guard is None:
        manager.handoff_guard = HandoffGuard(herder)
    app.state.backfills = manager
    app.include_router(router)
    if cluster is not None:
        herder.after_start.append(manager.start)  # type: ignore[attr-defined]
        herder.before_stop.append(manager.stop)  # type: ignore[attr-defined]
    else:
        manager.start()
    # The REST server runs without lifespan events, so the process exit stops the manager.
    atexit.register(manager.stop)
    return manager
