"""``/connectors``: create, inspect, control and delete connectors."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from sluice.connectors.api import NotFoundError
from sluice.rest.authz import stamp_scope, visible_connectors
from sluice.rest.deps import HerderDep
from sluice.rest.errors import ERROR_RESPONSES
from sluice.worker.herder import BadRequest
from sluice.worker.status import TargetState

router = APIRouter(prefix="/connectors", tags=["connectors"], responses=ERROR_RESPONSES)


class CreateConnectorRequest(BaseModel):
    """Body of ``POST /connectors``."""

    name: str = Field(description="Unique connector name")
    config: dict[str, Any] = Field(description="Connector configuration (flat string map)")
    initial_state: Literal["RUNNING", "PAUSED", "STOPPED"] | None = Field(
        None, description="State to create the connector in"
    )


_INITIAL = {"RUNNING": TargetState.STARTED, "PAUSED": TargetState.PAUSED, "STOPPED": TargetState.STOPPED}


@router.get("", summary="List connectors")
def list_connectors(request: Request, herder: HerderDep, expand: Annotated[list[str] | None, Query()] = None) -> Any:
    # Any role opens this route; each caller sees only the connectors its grants let it view.
    names = visible_connectors(request, herder.connectors())
    if not expand:
        return names
    result: dict[str, Any] = {}
    for name in names:
        entry: dict[str, Any] = {}
        try:
            if "status" in expand:
                entry["status"] = herder.connector_status(name).to_json()
            if "info" in expand:
                entry["info"] = herder.connector_info(name).to_json()
        except NotFoundError:
            continue  # deleted while we were listing, as Connect does
        result[name] = entry
    return result


@router.post("", status_code=201, summary="Create a connector")
def create_connector(request: Request, body: CreateConnectorRequest, herder: HerderDep) -> JSONResponse:
    name = body.name.strip()
    request.state.connector = name  # for the audit record: the name is not in the path here
    if not name:
        raise BadRequest("Connector name must not be empty")
    config = stamp_scope(request, name, body.config)
    state = _INITIAL[body.initial_state or "RUNNING"]
    _, info = herder.put_connector_config(name, config, allow_replace=False, initial_state=state)
    return JSONResponse(info.to_json(), status_code=201, headers={"Location": f"/connectors/{quote(name, safe='')}"})


@router.get("/{name}", summary="Connector info")
def get_connector(name: str, herder: HerderDep) -> dict[str, Any]:
    return herder.connector_info(name).to_json()


@router.get("/{name}/config", summary="Connector configuration")
def get_config(name: str, herder: HerderDep) -> dict[str, Any]:
    return herder.connector_config(name)


@router.put("/{name}/config", summary="Create or replace a connector's configuration")
def put_config(
    name: str, request: Request, herder: HerderDep, config: Annotated[dict[str, Any], Body()]
) -> JSONResponse:
    created, info = herder.put_connector_config(name, stamp_scope(request, name, config), allow_replace=True)
    return JSONResponse(info.to_json(), status_code=201 if created else 200)


@router.patch("/{name}/config", summary="Merge-patch a connector's configuration (null deletes a key)")
def patch_config(
    name: str, request: Request, herder: HerderDep, patch: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    return herder.patch_connector_config(name, stamp_scope(request, name, patch, patch=True)).to_json()


@router.get("/{name}/status", summary="Connector and task states")
def get_status(name: str, herder: HerderDep) -> dict[str, Any]:
    return herder.connector_status(name).to_json()


@router.get("/{name}/tasks", summary="Generated task configurations")
def get_tasks(name: str, herder: HerderDep) -> list[dict[str, Any]]:
    return [t.to_json() for t in herder.task_configs(name)]


@router.post("/{name}/tasks", status_code=204, summary="Internal: task configs from the worker running the connector")
async def put_task_configs(name: str, request: Request, herder: HerderDep) -> Response:
    """Distributed mode only: the worker that runs connector ``name`` sends the task configs it
    generated to the leader, signed with the cluster's session key (``X-Connect-Authorization``)."""
    body = await request.body()
    headers = request.headers
    await run_in_threadpool(
        herder.put_task_configs,
        name,
        body,
        headers.get("x-connect-authorization"),
        headers.get("x-connect-request-signature-algorithm"),
    )
    return Response(status_code=204)


@router.put("/{name}/fence", status_code=204, summary="Fence the zombie instances of a source connector's tasks (KIP-618)")
def fence_zombies(name: str, herder: HerderDep) -> Response:
    """Every producer a task of ``name`` ever used is fenced (exactly-once sources): a task instance
    left on a frozen or cut-off worker can no longer commit; the live tasks restart."""
    herder.fence_zombies(name)
    return Response(status_code=204)


@router.get("/{name}/tasks/{task}/status", summary="State of one task")
def get_task_status(name: str, task: int, herder: HerderDep) -> dict[str, Any]:
    return herder.task_status(name, task)


@router.post("/{name}/tasks/{task}/restart", status_code=204, summary="Restart one task")
def restart_task(name: str, task: int, herder: HerderDep) -> Response:
    herder.restart_task(name, task)
    return Response(status_code=204)


@router.post(
    "/{name}/restart",
    status_code=204,
    summary="Restart a connector, optionally with its (failed) tasks",
    responses={202: {"description": "Restart accepted; the body shows the instances being restarted as RESTARTING"}},
)
def restart_connector(
    name: str,
    herder: HerderDep,
    includeTasks: bool = False,  # noqa: N803 - Connect's parameter names
    onlyFailed: bool = False,  # noqa: N803
) -> Response:
    if not includeTasks and not onlyFailed:
        herder.restart_connector(name)
        return Response(status_code=204)
    planned = herder.restart_connector_and_tasks(name, include_tasks=includeTasks, only_failed=onlyFailed)
    return JSONResponse(planned.to_json(), status_code=202)


@router.put("/{name}/pause", status_code=202, summary="Pause a connector and its tasks")
def pause(name: str, herder: HerderDep) -> Response:
    herder.set_target_state(name, TargetState.PAUSED)
    return Response(status_code=202)


@router.put("/{name}/resume", status_code=202, summary="Resume a paused or stopped connector")
def resume(name: str, herder: HerderDep) -> Response:
    herder.set_target_state(name, TargetState.STARTED)
    return Response(status_code=202)


@router.put("/{name}/stop", status_code=204, summary="Stop a connector (tasks shut down)")
def stop(name: str, herder: HerderDep) -> Response:
    herder.set_target_state(name, TargetState.STOPPED)
    return Response(status_code=204)


@router.get("/{name}/topics", summary="Topics the connector has used since creation or the last reset")
def get_topics(name: str, herder: HerderDep) -> dict[str, Any]:
    return {name: {"topics": herder.connector_topics(name)}}


@router.put("/{name}/topics/reset", status_code=202, summary="Forget the topics the connector has used")
def reset_topics(name: str, herder: HerderDep) -> Response:
    herder.reset_connector_topics(name)
    return Response(status_code=202)


@router.delete("/{name}", status_code=204, summary="Delete a connector")
def delete(name: str, herder: HerderDep) -> Response:
    herder.delete_connector(name)
    return Response(status_code=204)
