"""Domain errors → HTTP, in one place, with Connect's ``{"error_code", "message"}`` body."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from connectors.api import AlreadyExistsError, ConfigError, ConnectError, NotFoundError
from worker.herder import BadRequest, Conflict

log = logging.getLogger(__name__)


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error_code": status, "message": message}, status_code=status, headers=headers)


_STATUS: list[tuple[type[Exception], int]] = [
    (NotFoundError, 404),
    (AlreadyExistsError, 409),
    (Conflict, 409),
    (BadRequest, 400),
    (ConfigError, 400),
]


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers that turn domain errors into Connect's error body."""

    async def connect_error(request: Request, exc: Exception) -> JSONResponse:
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

    app.add_exception_handler(ConnectError, connect_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
