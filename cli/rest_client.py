"""The HTTP client behind ``sluice connectors``: one worker's Kafka Connect REST API.

Failures are :class:`click.ClickException` subclasses carrying the message a user should read:
the server's own ``message`` for a 4xx/5xx, or what to check when the worker cannot be reached.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import click
import httpx
import orjson


class WorkerUnreachable(click.ClickException):
    """The worker did not answer at all: nothing listens there, or it timed out."""


class WorkerRequestFailed(click.ClickException):
    """The worker answered with a 4xx/5xx; the message is the server's own."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ConnectRestClient:
    """Calls to one worker's Connect REST API, with auth, a timeout and Connect's error body decoded.

    ``transport`` lets tests (and programs embedding the CLI) swap the network for an in-process
    fake such as :class:`httpx.MockTransport`.
    """

    def __init__(
        self,
        url: str,
        *,
        auth: httpx.Auth | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.url = url
        self.timeout = timeout
        self._http = httpx.Client(base_url=url, auth=auth, headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | tuple[tuple[str, str], ...] | None = None,
        body: Any = None,
    ) -> tuple[int, Any]:
        """Send one request; return the status code and the decoded JSON body (``None`` when empty).

        Raises :class:`WorkerUnreachable` or :class:`WorkerRequestFailed` for anything but 2xx.
        """
        try:
            response = self._http.request(method, path, params=params, json=body)
        except httpx.ConnectError:
            raise WorkerUnreachable(
                f"cannot reach the Sluice worker at {self.url} "
                "(is it running? start one with `sluice standalone worker.properties`)"
            ) from None
        except httpx.TimeoutException:
            raise WorkerUnreachable(
                f"the Sluice worker at {self.url} did not answer within {self.timeout:g}s (see --timeout)"
            ) from None
        except httpx.HTTPError as exc:
            raise WorkerUnreachable(f"request to {self.url}{path} failed: {exc}") from None
        decoded = _decode(response)
        if response.is_success:
            return response.status_code, decoded
        message = decoded.get("message") if isinstance(decoded, dict) else None
        if not message:
            message = response.text.strip() or response.reason_phrase
        message = f"{message} (HTTP {response.status_code})"
        if response.status_code == 401:
            message += "\nGive credentials with --user/--password or --token (or SLUICE_USER, SLUICE_TOKEN, ...)."
        raise WorkerRequestFailed(response.status_code, message)

    def get(self, path: str, params: Mapping[str, str] | tuple[tuple[str, str], ...] | None = None) -> Any:
        return self.call("GET", path, params=params)[1]


def _decode(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return None


def rest_path(*segments: str | int) -> str:
    """``/connectors/my%20conn/status`` from ``"connectors", "my conn", "status"``."""
    # Connector names may hold spaces, slashes or '?'; each must stay one path segment.
    return "/" + "/".join(quote(str(s), safe="") for s in segments)


def open_client(
    ctx: click.Context, url: str, user: str | None, password: str | None, token: str | None, timeout: float
) -> ConnectRestClient:
    """The REST client a CLI command group talks through: basic auth or a bearer token (not both),
    ``http://`` added to a bare ``host:port``, closed with the click context. A caller may hand in
    an httpx transport as the context object (tests use an in-process fake)."""
    if user and token:
        raise click.UsageError("give either --user/--password (basic auth) or --token (bearer), not both")
    auth = httpx.BasicAuth(user, password or "") if user else None
    headers = {"Authorization": f"Bearer {token}"} if token and not user else {}
    url = url.rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    transport = ctx.obj if isinstance(ctx.obj, httpx.BaseTransport) else None
    client = ConnectRestClient(url, auth=auth, headers=headers, timeout=timeout, transport=transport)
    ctx.call_on_close(client.close)
    return client
