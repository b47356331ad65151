"""``/backfills``: bulk loads and reprocessing jobs on Spark (see :mod:`sluice.worker.backfill`).

The routes are thin: the :class:`~worker.backfill.BackfillManager` on ``app.state.backfills``
validates, runs and reports; its domain errors become HTTP statuses in :mod:`sluice.rest.errors`
(a bad spec is a 400 naming the key, an unknown job a 404, a job already running a 409). The
manager is the herder's: it starts and stops with the herder, and :func:`~sluice.rest.create_app`
is given it.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Query, Request, Response
from fastapi.responses import JSONResponse

from sluice.rest.errors import ERROR_RESPONSES
from sluice.worker.backfill import BackfillManager

log = logging.getLogger(__name__)

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


@router.get("/kinds", summary="Each job kind's spec as a form: sections, fields, types, defaults, documentation")
def backfill_kinds(manager: ManagerDep) -> list[dict[str, Any]]:
    # Declared before /{job_id}: "kinds" is this route, not a job (a new spec may not take that id).
    return manager.kind_forms()


@router.post("/validate", summary="Check a spec as POST /backfills would, storing and running nothing")
def validate_backfill(manager: ManagerDep, spec: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    return manager.validate(spec)


@router.get("/{job_id}", summary="A job's spec (secrets hidden), state, progress, rate, ETA and error")
def get_backfill(job_id: str, manager: ManagerDep) -> dict[str, Any]:
    return manager.get(job_id)


@router.post("/{job_id}/run", summary="Start a stored job now")
def run_backfill(job_id: str, manager: ManagerDep) -> dict[str, Any]:
    return manager.run_now(job_id)


@router.delete("/{job_id}", summary="Cancel the running run (state CANCELLED); with forget=true also remove the job")
def cancel_backfill(
    job_id: str,
    manager: ManagerDep,
    forget: Annotated[bool, Query(description="Also delete the job and its schedule")] = False,
) -> Response:
    if forget:
        manager.delete(job_id)
        return Response(status_code=204)
    return JSONResponse(manager.cancel(job_id), status_code=202)
