"""ASGI middleware: authentication and request limits, ahead of routing.

Both answer with Connect's ``{"error_code", "message"}`` body through :func:`rest.errors.error_response`,
so a client sees one error shape whatever layer refused its request.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import re

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rest.errors import error_response
from rest.settings import RestSettings
from worker.distributed.forwarding import request_headers

#: Paths served without credentials: load balancers and orchestrators probe them.
OPEN_PATHS = frozenset({"/health"})

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


_INTERNAL_TASKS = re.compile(r"^/connectors/[^/]+/tasks/?$")


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


class AuthMiddleware:
    """HTTP basic and bearer authentication against the users and tokens of :class:`RestSettings`."""

    def __init__(self, app: ASGIApp, settings: RestSettings) -> None:
        self.app = app
        self.settings = settings
        challenges = []
        if settings.basic_users:
            challenges.append('Basic realm="sluice"')
        if settings.bearer_tokens:
            challenges.append('Bearer realm="sluice"')
        self._challenge = ", ".join(challenges)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        # Internal requests between workers (task configs to the leader) carry the cluster's HMAC
        # signature instead of user credentials; the herder verifies it.
        internal = scope["method"] == "POST" and _INTERNAL_TASKS.match(scope["path"]) and "x-connect-authorization" in headers
        if scope["path"] in OPEN_PATHS or internal or self._authorized(headers.get("authorization")):
            await self.app(scope, receive, send)
            return
        response = error_response(
            401, "Authentication required: send valid HTTP basic or bearer credentials", {"WWW-Authenticate": self._challenge}
        )
        await response(scope, receive, send)

    def _authorized(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, credentials = header.partition(" ")
        credentials = credentials.strip()
        if scheme.lower() == "bearer" and self.settings.bearer_tokens:
            # compare_digest against every token: the time taken says nothing about which one matched.
            matches = [hmac.compare_digest(credentials.encode(), t.encode()) for t in self.settings.bearer_tokens]
            return any(matches)
        if scheme.lower() == "basic" and self.settings.basic_users:
            try:
                user, sep, password = base64.b64decode(credentials, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return False
            expected = self.settings.basic_users.get(user)
            return bool(sep) and expected is not None and hmac.compare_digest(password.encode(), expected.encode())
        return False


class RequestLimitsMiddleware:
    """Refuse bodies over the size limit (413) and bodies that are not JSON (415).

    The body is read here, up to the limit, and replayed to the app: a client that lies in
    ``Content-Length`` or streams chunks forever is cut off at the limit instead of filling memory.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _BODY_METHODS:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._too_large(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
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

    async def _too_large(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(413, f"Request body is larger than the limit of {self.max_bytes} bytes")
        await response(scope, receive, send)


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))
