"""REST server settings, read from the worker's configuration.

Keys (all optional, in ``worker.properties``):

``listeners``
    ``http://host:port`` or ``https://host:port``; the first listener is served.
``listeners.https.ssl.certfile`` / ``listeners.https.ssl.keyfile``
    PEM certificate chain and private key for an ``https://`` listener (Connect's keystore keys
    ``listeners.https.ssl.keystore.*`` take JKS/PKCS12 stores, which Python's TLS cannot read).
``listeners.https.ssl.keyfile.password``
    Password of an encrypted key file.
``listeners.https.ssl.client.authentication``
    ``none`` (default), ``requested`` or ``required``, as in Connect: whether an ``https://``
    listener asks clients for a certificate. A client's verified certificate names it (its subject
    reaches the app as ``scope["extensions"]["tls"]["client_cert_name"]``); with ``requested`` a
    client without one may still send basic or bearer credentials, with ``required`` it fails the
    TLS handshake.
``listeners.https.ssl.cafile``
    PEM bundle of the CAs that sign client certificates; required unless client authentication
    is ``none``.
``rest.auth.basic.users`` / ``rest.auth.basic.users.file``
    HTTP basic users as ``alice:secret,bob:pw``, or a file of ``user:password`` (or
    ``user=password``) lines.
``rest.auth.bearer.tokens``
    Comma-separated bearer tokens.
``rest.auth.roles``
    Comma-separated grants ``principal:role[:pattern]``, e.g.
    ``alice:admin,bob:operator:orders-*,carol:viewer``. A principal is a basic user name, the
    ``principal`` of a ``principal:token`` entry of ``rest.auth.bearer.tokens`` (a bare token's
    principal is ``bearer``) or the CN of a verified TLS client certificate. The role is
    ``viewer``, ``operator`` or ``admin`` (see :mod:`sluice.rest.authz` for what each may do); the
    pattern is an ``fnmatch`` glob on connector names (default ``*``, the only pattern that also
    opens the worker-wide routes); a principal may have several grants. Unset, every
    authenticated principal is admin; set, a principal without a grant gets 403. An unknown role
    or malformed grant stops the worker. An admin grant may scope the data its connectors reach
    with ``;topics=glob|glob`` and ``;groups=glob|glob`` after the pattern, e.g.
    ``team-orders:admin:orders-*;topics=orders-*|orders.dlq``: its connectors may read and write
    only those topics (sink ``topics``/``topics.regex``, the DLQ, routing transforms, and every
    record a source task sends) and join consumer groups outside ``connect-<name>[-…]`` only when
    ``groups=`` names them. An admin grant on a narrower pattern than ``*`` without ``topics=``
    reaches no topic (write ``topics=*`` for every topic); only ``admin`` on ``*`` without
    ``topics=`` is unrestricted, and only it may point a connector's clients at another cluster.
``rest.request.max.bytes``
    Largest accepted request body (default 1 MiB); larger ones get 413.
``rest.request.header.timeout.ms``
    Time a client has to send a request's complete headers (default 10000), counted from the
    connection's opening or, on a keep-alive connection, from the first byte of its next
    request; a connection that takes longer is closed.
``rest.request.body.timeout.ms``
    Time a request body has to arrive in full once its headers are in (default 30000); a slower
    one is answered 408 and the connection closed.
``rest.connections.per.client.max``
    Connections one client address may hold open at once (default 32); further ones are closed
    as soon as they are accepted, while the client's other connections are served.
``rest.connections.max``
    Connections the listener holds open at once, all clients together (default: a quarter of the
    process's soft ``RLIMIT_NOFILE``, at most 1024). At the cap, a new connection displaces the
    oldest one still waiting for its request headers; with none to displace it is answered 503
    and closed without being read.
``rest.connections.fd.reserve``
    File descriptors the listener leaves to tasks, Kafka clients and offset files (default: a
    quarter of the soft ``RLIMIT_NOFILE``): a connection that would leave fewer free is answered
    503 and closed at once. ``0`` keeps no reserve.
``rest.auth.allow.unauthenticated``
    ``true`` lets a worker whose listener is not on a loopback address start without any
    authentication (default ``false``: it refuses to start, naming the keys to set).
``metrics.listeners``
    A listener of its own for ``GET /metrics`` and ``GET /health`` only (see
    :meth:`RestSettings.for_metrics_listener`): the authentication above and the
    ``listeners.https.*`` keys apply to it, and so does ``rest.auth.allow.unauthenticated``.

With any user, token or client authentication configured, every endpoint except ``/health``
requires credentials.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sluice.connectors.api import ConfigError
from sluice.worker.config.models import is_loopback_host

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024
DEFAULT_HEADER_TIMEOUT_MS = 10_000
DEFAULT_BODY_TIMEOUT_MS = 30_000
DEFAULT_CONNECTIONS_PER_CLIENT = 32
#: Connect's values of ``listeners.https.ssl.client.authentication``.
CLIENT_AUTH_MODES = ("none", "requested", "required")


@dataclass(frozen=True)
class RestSettings:
    """What the REST app and server need from the worker configuration."""

    basic_users: dict[str, str] = field(default_factory=dict)
    bearer_tokens: frozenset[str] = frozenset()
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    scheme: str = "http"
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_keyfile_password: str | None = None
    client_auth: str = "none"
    ssl_cafile: str | None = None
    request_header_timeout_ms: int = DEFAULT_HEADER_TIMEOUT_MS
    request_body_timeout_ms: int = DEFAULT_BODY_TIMEOUT_MS
    max_connections_per_client: int = DEFAULT_CONNECTIONS_PER_CLIENT
    #: ``None``: sized from ``RLIMIT_NOFILE`` when the listener starts (:mod:`sluice.rest.listener`).
    max_connections: int | None = None
    fd_reserve: int | None = None
    allow_unauthenticated: bool = False

    @property
    def auth_enabled(self) -> bool:
        return bool(self.basic_users or self.bearer_tokens or self.client_auth != "none")

    def check_exposure(self, host: str, listener: str = "The REST listener") -> None:
        """Refuse to serve ``host`` without authentication unless it is loopback or the operator opted out.

        The REST API decides what code runs on the worker, so an open listener other machines can
        reach is refused with a :class:`ConfigError` that names the keys to set. ``listener`` names
        the listener in messages (the REST one, or ``metrics.listeners``).
        """
        if self.auth_enabled or is_loopback_host(host):
            return
        if not self.allow_unauthenticated:
            raise ConfigError(
                f"{listener} on {host or 'all interfaces'} is reachable from other machines but has no "
                "authentication. Set rest.auth.basic.users (or rest.auth.basic.users.file), rest.auth.bearer.tokens, "
                "or listeners.https.ssl.client.authentication=required with listeners.https.ssl.cafile on an https "
                "listener; or listen on 127.0.0.1; or set rest.auth.allow.unauthenticated=true to let anyone who "
                "can reach the port control this worker",
                key="rest.auth.allow.unauthenticated",
            )
        log.warning(
            "%s on %s has no authentication and rest.auth.allow.unauthenticated=true: anyone who can "
            "reach it can read what it serves (the REST listener: create connectors and so run code on this worker)",
            listener,
            host or "all interfaces",
        )

    def for_metrics_listener(self, scheme: str) -> RestSettings:
        """These settings for the ``metrics.listeners`` listener, whose scheme may differ from the
        REST listener's: an https one takes the same ``listeners.https.*`` TLS keys."""
        key = "metrics.listeners"
        if scheme == "https" and not self.ssl_certfile:
            raise ConfigError(
                f"An https {key} listener needs listeners.https.ssl.certfile (and keyfile)",
                key="listeners.https.ssl.certfile",
            )
        if scheme != "https" and self.client_auth != "none" and not (self.basic_users or self.bearer_tokens):
            # Client certificates are the only credentials, and a plain http listener sees none.
            raise ConfigError(
                f"{key} must be https:// when listeners.https.ssl.client.authentication is the only authentication",
                key=key,
            )
        return replace(self, scheme=scheme)

    @classmethod
    def from_worker_config(cls, raw: Mapping[str, Any]) -> RestSettings:
        """Parse the worker keys listed in the module docstring; :class:`ConfigError` names a bad one."""
        users = _parse_users(str(raw.get("rest.auth.basic.users") or ""), "rest.auth.basic.users")
        users_file = str(raw.get("rest.auth.basic.users.file") or "").strip()
        if users_file:
            path = Path(users_file)
            try:
                lines = path.read_text().splitlines()
            except OSError as exc:
                raise ConfigError(
                    f"Cannot read rest.auth.basic.users.file {path}: {exc}", key="rest.auth.basic.users.file"
                ) from exc
            entries = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
            users.update(
                _parse_users(
                    ",".join(e.replace("=", ":", 1) if ":" not in e else e for e in entries),
                    "rest.auth.basic.users.file",
                )
            )
        tokens = frozenset(t.strip() for t in str(raw.get("rest.auth.bearer.tokens") or "").split(",") if t.strip())
        limit = _int_key(raw, "rest.request.max.bytes", DEFAULT_MAX_REQUEST_BYTES)
        first = str(raw.get("listeners") or "http://127.0.0.1:8083").split(",")[0].strip()
        scheme = urlparse(first).scheme if "://" in first else "http"
        certfile = raw.get("listeners.https.ssl.certfile") or None
        keyfile = raw.get("listeners.https.ssl.keyfile") or None
        if scheme == "https" and not certfile:
            raise ConfigError(
                "An https listener needs listeners.https.ssl.certfile", key="listeners.https.ssl.certfile"
            )
        client_auth, cafile = _client_auth(raw, scheme)
        return cls(
            basic_users=users,
            bearer_tokens=tokens,
            max_request_bytes=max(1, limit),
            scheme=scheme,
            ssl_certfile=str(certfile) if certfile else None,
            ssl_keyfile=str(keyfile) if keyfile else None,
            ssl_keyfile_password=raw.get("listeners.https.ssl.keyfile.password") or None,
            client_auth=client_auth,
            ssl_cafile=cafile,
            request_header_timeout_ms=_int_key(
                raw, "rest.request.header.timeout.ms", DEFAULT_HEADER_TIMEOUT_MS, minimum=1
            ),
            request_body_timeout_ms=_int_key(raw, "rest.request.body.timeout.ms", DEFAULT_BODY_TIMEOUT_MS, minimum=1),
            max_connections_per_client=_int_key(
                raw, "rest.connections.per.client.max", DEFAULT_CONNECTIONS_PER_CLIENT, minimum=1
            ),
            max_connections=_optional_int_key(raw, "rest.connections.max", minimum=1),
            fd_reserve=_optional_int_key(raw, "rest.connections.fd.reserve", minimum=0),
            allow_unauthenticated=_bool_key(raw, "rest.auth.allow.unauthenticated"),
        )


def _client_auth(raw: Mapping[str, Any], scheme: str) -> tuple[str, str | None]:
    key = "listeners.https.ssl.client.authentication"
    mode = str(raw.get(key) or "none").strip().lower()
    if mode not in CLIENT_AUTH_MODES:
        raise ConfigError(f"{key} must be one of {', '.join(CLIENT_AUTH_MODES)}, got {mode!r}", key=key)
    cafile = str(raw.get("listeners.https.ssl.cafile") or "").strip() or None
    if mode == "none":
        return mode, cafile
    # Refused rather than ignored: on plain http the key would count as authentication while none happens.
    if scheme != "https":
        raise ConfigError(f"{key}={mode} needs an https:// listener", key=key)
    if not cafile:
        raise ConfigError(
            f"{key}={mode} needs listeners.https.ssl.cafile, the CAs that sign client certificates",
            key="listeners.https.ssl.cafile",
        )
    # Checked here because uvicorn reads it only on its own thread, where a failure looks like a busy port.
    if not Path(cafile).is_file():
        raise ConfigError(
            f"listeners.https.ssl.cafile {cafile} is not a readable file", key="listeners.https.ssl.cafile"
        )
    return mode, cafile


def _int_key(raw: Mapping[str, Any], key: str, default: int, *, minimum: int | None = None) -> int:
    text = str(raw.get(key) or default).strip()
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{key} must be an integer, got {text!r}", key=key) from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{key} must be at least {minimum}, got {value}", key=key)
    return value


def _optional_int_key(raw: Mapping[str, Any], key: str, *, minimum: int) -> int | None:
    """The key's integer, or ``None`` when unset (the default is worked out later)."""
    if str(raw.get(key, "")).strip() == "":
        return None
    return _int_key(raw, key, minimum, minimum=minimum)


def _bool_key(raw: Mapping[str, Any], key: str) -> bool:
    value = raw.get(key)
    if isinstance(value, bool):
        return value
    text = str(value or "false").strip().lower()
    if text not in ("true", "false"):
        raise ConfigError(f"{key} must be true or false, got {value!r}", key=key)
    return text == "true"


def _parse_users(text: str, key: str) -> dict[str, str]:
    users: dict[str, str] = {}
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        user, sep, password = entry.partition(":")
        if not sep or not user.strip():
            raise ConfigError(f"{key} entries must look like user:password", key=key)
        users[user.strip()] = password.strip()
    return users
