"""Domain errors → HTTP, in one place, with Connect's ``{"error_code", "message"}`` body."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from sluice.connectors.api import AlreadyExistsError, ConfigError, ConnectError, NotFoundError
from sluice.worker.distributed.forwarding import ForwardedError
from sluice.worker.herder import BadRequest, Conflict, Forbidden, NoLeader

log = logging.getLogger(__name__)


class ErrorBody(BaseModel):
    """Kafka Connect's error body, returned with every 4xx and 5xx status."""

    error_code: int = Field(description="The HTTP status code, repeated", examples=[404])
    message: str = Field(description="What went wrong, naming the key or resource", examples=["Connector x not found"])


def _documented(description: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": description}


#: The error statuses every route may answer with, for the OpenAPI document.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _documented("Invalid request or configuration"),
    401: _documented("Authentication required (when the worker enables it)"),
    403: _documented("The caller's role does not allow this request"),
    404: _documented("Unknown connector, task or plugin"),
    408: _documented("The request body did not arrive within rest.request.body.timeout.ms"),
    409: _documented("Conflict with the current state (the name exists, a rebalance is running)"),
    413: _documented("Request body over the size limit"),
    415: _documented("Request body is not application/json"),
    500: _documented("Unexpected worker error"),
}


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The one place Connect's error JSON is built."""
    return JSONResponse({"error_code": status, "message": message}, status_code=status, headers=headers)


_STATUS: list[tuple[type[Exception], int]] = [
    (NotFoundError, 404),
    (AlreadyExistsError, 409),
    (Conflict, 409),
    (Forbidden, 403),
    (BadRequest, 400),
    (ConfigError, 400),
]


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that turn domain errors into Connect's error body."""

    async def connect_error(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, ForwardedError):  # the leader's own answer, passed on unchanged
            return error_response(exc.status, str(exc))
        if isinstance(exc, NoLeader):
            return error_response(409, str(exc), headers={"Retry-After": str(exc.retry_after_s)})
        for cls, status in _STATUS:
            if isinstance(exc, cls):
                message = str(exc)
                if isinstance(exc, ConfigError) and not message.startswith("Connector configuration is invalid"):
                    message = f"Connector configuration is invalid and contains the following 1 error(s):\n{message}"
                return error_response(status, message)
        log.error("Request %s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
        return error_response(500, str(exc))

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        parts = []
        for err in exc.errors():
            loc = ".".join(str(p) for p in err.get("loc", ()) if p != "body") or "body"
            parts.append(f"{loc}: {err.get('msg')}")
        return error_response(400, "Invalid request: " + "; ".join(parts))

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return error_response(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    async def unexpected_error(request: Request, exc: Exception) -> JSONResponse:
        # A bug must still answer in Connect's shape; the trace goes to the log, not the client.
        log.error("Request %s %s failed unexpectedly", request.method, request.url.path, exc_info=exc)
        return error_response(500, f"Unexpected error: {type(exc).__name__}")

    app.add_exception_handler(ConnectError, connect_error)
    app.add_exception_handler(Exception, unexpected_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
