"""Runs the REST app with uvicorn on a background thread of the worker process.

The listener's transport guards live here, below the ASGI app, because they act on connections
rather than requests: a header timeout (uvicorn has none, so a client could hold a connection
open forever by never finishing its headers), a cap on connections per client address, and the
client certificate of a mutual-TLS connection, handed to the app in the ASGI ``tls`` extension.
The accept loop itself, with the listener-wide cap and the descriptor reserve, is
:mod:`sluice.rest.listener`'s, in place of the one ``loop.create_server`` would run.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
import time
from collections import Counter
from typing import Any, ClassVar, cast

import h11
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from sluice.rest.app import metrics_only
from sluice.rest.listener import (
    DescriptorBudget,
    GuardedListener,
    ListenerLimits,
    auto_fd_reserve,
    auto_max_connections,
    soft_nofile_limit,
)
from sluice.rest.settings import RestSettings

log = logging.getLogger(__name__)

_CERT_REQS = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class RestServer:
    """uvicorn on a thread; the worker's main thread keeps signal handling.

    ``app`` is the FastAPI app, or (with ``settings``) any ASGI app, e.g. :func:`metrics_only`'s;
    ``name`` names the listener in errors and logs.
    """

    def __init__(
        self, app: Any, host: str, port: int, *, settings: RestSettings | None = None, name: str = "REST server"
    ) -> None:
        settings = settings or getattr(app.state, "rest_settings", None) or RestSettings()
        tls: dict[str, Any] = {}
        if settings.scheme == "https":
            tls = {
                "ssl_certfile": settings.ssl_certfile,
                "ssl_keyfile": settings.ssl_keyfile,
                "ssl_keyfile_password": settings.ssl_keyfile_password,
                "ssl_cert_reqs": _CERT_REQS[settings.client_auth],
                "ssl_ca_certs": settings.ssl_cafile,
            }
        self.scheme = settings.scheme
        soft_limit = soft_nofile_limit()
        listener_limits = ListenerLimits(
            settings.max_connections if settings.max_connections is not None else auto_max_connections(soft_limit),
            DescriptorBudget(
                soft_limit, settings.fd_reserve if settings.fd_reserve is not None else auto_fd_reserve(soft_limit)
            ),
        )
        limits = ConnectionLimits(
            settings.request_header_timeout_ms / 1000, settings.max_connections_per_client, listener_limits
        )
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            log_config=None,
            http=GuardedH11Protocol.bound_to(limits),
            # The API has no WebSocket routes; an upgraded connection would also leave the
            # protocol's connection count and header deadline behind.
            ws="none",
            **tls,
        )
        self._server = GuardedUvicornServer(config, limits)
        self._thread = threading.Thread(
            target=self._server.run, name=name.split(" (")[0].lower().replace(" ", "-"), daemon=True
        )
        self.host = host
        self.port = port
        self.name = name

    def start(self, timeout: float = 15.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"The {self.name} could not listen on {self.host}:{self.port} (is the port in use?)")
            if time.monotonic() > deadline:
                raise RuntimeError(f"The {self.name} did not start on {self.host}:{self.port} within {timeout:.0f}s")
            time.sleep(0.02)
        listener = self._server.limits.listener
        log.info(
            "The %s is listening on %s://%s:%d (at most %d connections, rest.connections.max; "
            "%s file descriptors kept for the rest of the worker, rest.connections.fd.reserve)",
            self.name,
            self.scheme,
            self.host,
            self.port,
            listener.max_connections,
            f"{listener.budget.reserve} of {listener.budget.soft_limit}"
            if listener.budget.soft_limit
            else "no limit on",
        )

    def stop(self) -> None:
        if self._thread.ident is None:
            return  # never started (an earlier part of the worker failed to start)
        self._server.should_exit = True
        self._thread.join(10)


def metrics_listener_server(app: FastAPI, listener: tuple[str, str, int] | None) -> RestServer | None:
    """The server of ``metrics.listeners`` (``listener`` is its scheme, host and port), ``None`` when unset.

    It serves ``app`` restricted to ``GET /metrics`` and ``GET /health``, behind the same
    authentication and access rules; like the REST listener, one other machines can reach is
    refused without authentication. Raises :class:`~sluice.connectors.api.ConfigError` before
    anything listens.
    """
    if listener is None:
        return None
    scheme, host, port = listener
    settings = cast("RestSettings", app.state.rest_settings).for_metrics_listener(scheme)
    settings.check_exposure(host, "The metrics listener (metrics.listeners)")
    return RestServer(metrics_only(app), host, port, settings=settings, name="metrics listener (metrics.listeners)")


class GuardedUvicornServer(uvicorn.Server):
    """uvicorn serving through a :class:`~sluice.rest.listener.GuardedListener`.

    ``startup`` is uvicorn's hook for opening the listening sockets; this one binds them itself so
    that the accepts are the guarded listener's rather than asyncio's.
    """

    def __init__(self, config: uvicorn.Config, limits: ConnectionLimits) -> None:
        super().__init__(config)
        self.limits = limits

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await self.lifespan.startup()
        if self.lifespan.should_exit:
            raise SystemExit(3)
        config = self.config

        def create_protocol() -> asyncio.Protocol:
            # http_protocol_class is typed as asyncio.Protocol's class, which takes no arguments.
            protocol_class = cast("Any", config.http_protocol_class)
            return cast(
                "asyncio.Protocol",
                protocol_class(config=config, server_state=self.server_state, app_state=self.lifespan.state),
            )

        try:
            listening = GuardedListener.bind(config.host, config.port, config.backlog)
        except OSError as exc:
            # RestServer.start reports the thread's end as "could not listen".
            log.error("Cannot listen on %s:%d: %s", config.host, config.port, exc)
            await self.lifespan.shutdown()
            raise SystemExit(1) from exc
        listener = GuardedListener(
            listening,
            create_protocol,
            self.limits.listener,
            ssl_context=config.ssl,
            # A client that never completes its TLS handshake holds a descriptor as long as one that never sends headers.
            ssl_handshake_timeout_s=self.limits.header_timeout_s,
        )
        self.servers = [cast("asyncio.base_events.Server", listener)]
        self.started = True


class ConnectionLimits:
    """The limits of one listener and the per-client connection counts its connections share.

    Only the server's event loop thread touches it, so it needs no lock. ``listener`` holds the
    listener-wide cap, which the protocol tells which connections still wait for their headers.
    """

    def __init__(self, header_timeout_s: float, per_client_max: int, listener: ListenerLimits) -> None:
        self.header_timeout_s = header_timeout_s
        self.per_client_max = per_client_max
        self.listener = listener
        self._open: Counter[str] = Counter()
        self._warned: set[str] = set()

    def admit(self, client: str) -> bool:
        """Count a new connection from ``client``; False when it is one too many."""
        self._open[client] += 1
        if self._open[client] <= self.per_client_max:
            return True
        # One line per burst, not per refused connection: a flood must not flood the log too.
        if client not in self._warned:
            self._warned.add(client)
            log.warning(
                "Closing connections from %s beyond rest.connections.per.client.max=%d", client, self.per_client_max
            )
        return False

    def release(self, client: str) -> None:
        self._open[client] -= 1
        if self._open[client] < self.per_client_max:
            self._warned.discard(client)
        if self._open[client] <= 0:
            del self._open[client]


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header timeout, a per-client connection cap and mTLS identity.

    The header deadline runs while the connection waits for bytes the client owes before the app
    can act: from the connection's opening, or from the first byte of the next request on a
    keep-alive connection (an idle keep-alive connection is uvicorn's ``timeout_keep_alive``'s
    business), and for the rest of a body the app answered without reading. It stops when a
    request's headers are complete; the body has its own deadline in
    :class:`sluice.rest.middleware.RequestLimitsMiddleware`.

    uvicorn builds a protocol with keyword arguments only, so the per-listener
    :class:`ConnectionLimits` travel as a class attribute: :meth:`bound_to` makes the subclass.
    """

    limits: ClassVar[ConnectionLimits]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._counted_client: str | None = None
        self._tls: dict[str, Any] | None = None
        self._plain_app = self.app

    @classmethod
    def bound_to(cls, limits: ConnectionLimits) -> type[GuardedH11Protocol]:
        """A subclass whose connections share ``limits``."""
        return cast("type[GuardedH11Protocol]", type(cls.__name__, (cls,), {"limits": limits}))

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.client is not None:
            self._counted_client = self.client[0]
            if not self.limits.admit(self.client[0]):
                transport.abort()
                return
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:
            self._tls = tls_extension(ssl_object)
            self.app = self._app_with_tls
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_timer()
        if self._counted_client is not None:
            self.limits.release(self._counted_client)
            self._counted_client = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow_client_state()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # An idle keep-alive connection (nothing of a next request buffered) is left to uvicorn's
        # keep-alive timer; anything else the client still owes runs against the header deadline.
        if self.conn.their_state is h11.IDLE and not self.conn.trailing_data[0]:
            return
        self._follow_client_state()

    def _follow_client_state(self) -> None:
        if self.transport.is_closing():
            self._cancel_header_timer()
            return
        their, ours = self.conn.their_state, self.conn.our_state
        # IDLE: the request's headers are incomplete. SEND_BODY after our response is DONE: the
        # app answered without reading the body, and h11 must discard the rest before the next request.
        if their is h11.IDLE or (their is h11.SEND_BODY and ours is h11.DONE):
            self._arm_header_timer()
        else:
            self._cancel_header_timer()

    def _arm_header_timer(self) -> None:
        # Not re-armed while running: the deadline counts from the first byte, not the latest.
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.limits.header_timeout_s, self._header_timed_out)
            self.limits.listener.waiting(self)

    def _cancel_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
            self.limits.listener.not_waiting(self)

    def displace(self) -> None:
        """Closed to make room at ``rest.connections.max``: it still owed its request headers."""
        self._cancel_header_timer()
        if not self.transport.is_closing():
            self.transport.abort()

    def _header_timed_out(self) -> None:
        self._header_timer = None
        self.limits.listener.not_waiting(self)
        if not self.transport.is_closing():
            # debug: browsers' speculative pre-connections end this way too, so it is no incident.
            log.debug(
                "Closing the connection from %s: no complete request headers within rest.request.header.timeout.ms=%.0f",
                self.client[0] if self.client else "?",
                self.limits.header_timeout_s * 1000,
            )
            # abort, not close: close would wait for a TLS close_notify the stalling client may never send.
            self.transport.abort()

    async def _app_with_tls(self, scope: Any, receive: Any, send: Any) -> None:
        # A copy per request, so one request's app cannot alter what the next one sees.
        scope.setdefault("extensions", {})["tls"] = dict(self._tls or {})
        await self._plain_app(scope, receive, send)


#: ``SSLObject.version()`` → the TLS version numbers of the ASGI TLS extension.
_TLS_VERSIONS = {"TLSv1": 0x0301, "TLSv1.1": 0x0302, "TLSv1.2": 0x0303, "TLSv1.3": 0x0304}

#: RFC 4514's short names for the attributes Python's ``getpeercert()`` spells out.
_RFC4514_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "domainComponent": "DC",
    "localityName": "L",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "stateOrProvinceName": "ST",
    "streetAddress": "STREET",
    "userId": "UID",
}


def tls_extension(ssl_object: ssl.SSLObject) -> dict[str, Any]:
    """The ASGI ``tls`` scope extension for a connection; ``client_cert_name`` only for a verified certificate."""
    # getpeercert() returns the parsed certificate only once OpenSSL verified it against the CA
    # bundle; without a client certificate it returns None.
    peer = ssl_object.getpeercert()
    der = ssl_object.getpeercert(binary_form=True)
    return {
        "server_cert": None,
        "client_cert_chain": [ssl.DER_cert_to_PEM_cert(der)] if der else [],
        "client_cert_name": rfc4514_name(peer["subject"]) if peer else None,
        "client_cert_error": None,
        "tls_version": _TLS_VERSIONS.get(ssl_object.version() or ""),
        # Python's ssl module exposes the cipher's name, not its IANA number.
        "cipher_suite": None,
    }


def rfc4514_name(subject: Any) -> str:
    """``getpeercert()["subject"]`` as an RFC 4514 string, e.g. ``CN=alice,O=Example``.

    RFC 4514 writes the most specific RDN first, the reverse of the certificate's order.
    Attributes without a short name keep Python's name (``emailAddress``).
    """
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(f"{_RFC4514_NAMES.get(attr, attr)}={_escape_rfc4514(value)}" for attr, value in rdn))
    return ",".join(rdns)


def _escape_rfc4514(value: str) -> str:
    out = []
    last = len(value) - 1
    for i, char in enumerate(value):
        if char in '"+,;<>\\' or (i == 0 and char in " #") or (i == last and char == " "):
            out.append("\\" + char)
        elif char == "\0":
            out.append("\\00")
        else:
            out.append(char)
    return "".join(out)
