"""REST server settings, read from the worker's configuration.

Keys (all optional, in ``worker.properties``):

``listeners``
    ``http://host:port`` or ``https://host:port``; the first listener is served.
``listeners.https.ssl.certfile`` / ``listeners.https.ssl.keyfile``
    PEM certificate chain and private key for an ``https://`` listener (Connect's keystore keys
    ``listeners.https.ssl.keystore.*`` take JKS/PKCS12 stores, which Python's TLS cannot read).
``listeners.https.ssl.keyfile.password``
    Password of an encrypted key file.
``rest.auth.basic.users`` / ``rest.auth.basic.users.file``
    HTTP basic users as ``alice:secret,bob:pw``, or a file of ``user:password`` (or
    ``user=password``) lines.
``rest.auth.bearer.tokens``
    Comma-separated bearer tokens.
``rest.request.max.bytes``
    Largest accepted request body (default 1 MiB); larger ones get 413.

With any user or token configured, every endpoint except ``/health`` requires credentials.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from connectors.api import ConfigError

DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024


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

    @property
    def auth_enabled(self) -> bool:
        return bool(self.basic_users or self.bearer_tokens)

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
                raise ConfigError(f"Cannot read rest.auth.basic.users.file {path}: {exc}", key="rest.auth.basic.users.file") from exc
            entries = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
            users.update(_parse_users(",".join(e.replace("=", ":", 1) if ":" not in e else e for e in entries),
                                      "rest.auth.basic.users.file"))
        tokens = frozenset(t.strip() for t in str(raw.get("rest.auth.bearer.tokens") or "").split(",") if t.strip())
        limit_text = str(raw.get("rest.request.max.bytes") or DEFAULT_MAX_REQUEST_BYTES)
        try:
            limit = int(limit_text)
        except ValueError:
            raise ConfigError(f"rest.request.max.bytes must be an integer, got {limit_text!r}", key="rest.request.max.bytes") from None
        first = str(raw.get("listeners") or "http://127.0.0.1:8083").split(",")[0].strip()
        scheme = urlparse(first).scheme if "://" in first else "http"
        certfile = raw.get("listeners.https.ssl.certfile") or None
        keyfile = raw.get("listeners.https.ssl.keyfile") or None
        if scheme == "https" and not certfile:
            raise ConfigError("An https listener needs listeners.https.ssl.certfile", key="listeners.https.ssl.certfile")
        return cls(
            basic_users=users,
            bearer_tokens=tokens,
            max_request_bytes=max(1, limit),
            scheme=scheme,
            ssl_certfile=str(certfile) if certfile else None,
            ssl_keyfile=str(keyfile) if keyfile else None,
            ssl_keyfile_password=raw.get("listeners.https.ssl.keyfile.password") or None,
        )


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
