"""ASGI middleware: request limits and request headers, ahead of routing.

Authentication, authorization and the audit trail are :class:`sluice.rest.authz.AccessControlMiddleware`.
Refusals answer with Connect's ``{"error_code", "message"}`` body through
:func:`sluice.rest.errors.error_response`, so a client sees one error shape whatever layer refused its request.
"""

from __future__ import annotations

import asyncio

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sluice.rest.errors import error_response
from sluice.worker.distributed.forwarding import request_headers
from sluice.worker.observability.logcontext import connector_context

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class RequestHeadersMiddleware:
    """Makes the request's headers visible to the herder (forwarding passes ``Authorization`` on)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        token = request_headers.set(dict(Headers(scope=scope)))
        try:
            await self.app(scope, receive, send)
        finally:
            request_headers.reset(token)


class ConnectorLogContextMiddleware:
    """Tags what a request on ``/connectors/{name}[/tasks/{n}]…`` logs (here and in the herder calls
    it makes, on the thread pool, which copies the context) with ``[name|worker]`` or ``[name|task-n]``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        parts: list[str] = scope["path"].split("/", 5) if scope["type"] == "http" else []
        if len(parts) < 3 or parts[1] != "connectors" or not parts[2]:
            await self.app(scope, receive, send)
            return
        task = int(parts[4]) if len(parts) > 4 and parts[3] == "tasks" and parts[4].isdigit() else None
        with connector_context(parts[2], task):
            await self.app(scope, receive, send)


class RequestLimitsMiddleware:
    """Refuse bodies over the size limit (413), too slow to arrive (408) or not JSON (415).

    The body is read here, up to the limit and within ``body_timeout_s``, and replayed to the app:
    a client that lies in ``Content-Length``, streams chunks forever or trickles its body a byte
    at a time is cut off instead of filling memory or holding a connection.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, body_timeout_s: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        try:
            async with asyncio.timeout(self.body_timeout_s):
                body = await self._read_body(receive)
        except _BodyTooLarge:
            await self._too_large(scope, receive, send)
            return
        except TimeoutError:
            # Connection: close, so the rest of the body cannot keep the connection busy either.
            response = error_response(
                408, f"Request body not received within {self.body_timeout_s * 1000:.0f} ms", {"Connection": "close"}
            )
            await response(scope, receive, send)
            return
        if body is None:  # the client went away
            return
        content_type = headers.get("content-type")
        if body and content_type is not None and not _is_json(content_type):
            response = error_response(415, f"HTTP 415 Unsupported Media Type: expected application/json, got {content_type}")
            await response(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole body, or None when the client disconnects; :class:`_BodyTooLarge` past the limit."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise _BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(413, f"Request body is larger than the limit of {self.max_bytes} bytes")
        await response(scope, receive, send)


class _BodyTooLarge(Exception):
    """Raised by :meth:`RequestLimitsMiddleware._read_body` once the body passes the size limit."""


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))
