"""Requests between workers: forwarding writes to the leader, and signing internal requests.

Any worker accepts any REST call. Reads are answered from the worker's own copy of the config
and status topics; writes go to the leader, which alone writes the config topic. A forwarded
request carries ``X-Sluice-Forwarded`` so a worker that is no longer the leader answers 409
instead of forwarding it again (no loops during a leader change), and the caller's
``Authorization`` header so the leader applies the same access rules.

Internal requests (task configs from the worker running a connector to the leader) are signed
as Connect signs them: ``X-Connect-Authorization`` is the base64 HMAC-SHA256 of the body under
the cluster's session key, which the leader keeps in the config topic.
"""

from __future__ import annotations

import base64
import contextvars
import hashlib
import hmac
import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import httpx
import orjson

from sluice.connectors.api import ConnectError
from sluice.worker.herder.api import NoLeader

log = logging.getLogger(__name__)

FORWARDED_HEADER = "X-Sluice-Forwarded"
SIGNATURE_HEADER = "X-Connect-Authorization"
ALGORITHM_HEADER = "X-Connect-Request-Signature-Algorithm"
ALGORITHM = "HmacSHA256"

#: The headers of the REST request being served (set by the REST layer; empty outside requests).
request_headers: contextvars.ContextVar[Mapping[str, str]] = contextvars.ContextVar(
    "sluice_request_headers", default=MappingProxyType({})
)


class ForwardedError(ConnectError):
    """The leader (or owner) answered a forwarded request with an error: pass it on unchanged."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def is_forwarded() -> bool:
    return FORWARDED_HEADER.lower() in {k.lower() for k in request_headers.get()}


def sign(key: bytes, body: bytes) -> str:
    return base64.b64encode(hmac.new(key, body, hashlib.sha256).digest()).decode()


def verify(key: bytes | None, body: bytes, signature: str | None) -> bool:
    if key is None or not signature:
        return False
    return hmac.compare_digest(sign(key, body), signature)


class Forwarder:
    """Sends a REST request to another worker and returns its JSON answer (or raises its error)."""

    def __init__(self, *, timeout_s: float = 30.0, verify_tls: bool | str = True) -> None:
        self._client = httpx.Client(timeout=timeout_s, verify=verify_tls)

    def close(self) -> None:
        self._client.close()

    def peek(self, base_url: str, path: str, *, timeout_s: float) -> tuple[int, bytes]:
        """``GET path`` on another worker with the caller's credentials: its status and body,
        whatever the status. Raises :class:`ConnectError` when it does not answer in ``timeout_s``."""
        headers = {FORWARDED_HEADER: "true"}
        for name, value in request_headers.get().items():
            if name.lower() == "authorization":
                headers["Authorization"] = value
        try:
            response = self._client.get(base_url.rstrip("/") + path, headers=headers, timeout=timeout_s)
        except httpx.HTTPError as exc:
            raise ConnectError(f"{base_url} did not answer: {type(exc).__name__}: {exc}") from None
        return response.status_code, response.content

    def send(
        self,
        base_url: str,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> tuple[int, Any]:
        headers = {FORWARDED_HEADER: "true", "Content-Type": "application/json", **dict(extra_headers or {})}
        for name, value in request_headers.get().items():
            if name.lower() == "authorization":
                headers["Authorization"] = value
        content = None if body is None else (body if isinstance(body, bytes) else orjson.dumps(body))
        try:
            response = self._client.request(method, base_url.rstrip("/") + path, content=content, params=params, headers=headers)
        except httpx.HTTPError as exc:
            log.info("Could not forward %s %s to %s: %s", method, path, base_url, exc)
            raise NoLeader() from None
        if response.status_code >= 400:
            try:
                message = str(response.json().get("message"))
            except ValueError:
                message = response.text
            # The leader's "ask again in a moment" (no leader yet, or it stopped being the leader
            # while the request travelled): the client gets it with its Retry-After, not as a
            # final answer, so it retries against whoever leads then.
            if response.status_code == 409 and ("no known leader" in message or "Retry-After" in response.headers):
                raise NoLeader(message)
            raise ForwardedError(response.status_code, message)
        if response.status_code == 204 or not response.content:
            return response.status_code, None
        return response.status_code, response.json()
