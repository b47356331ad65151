"""Who is calling: HTTP basic users, bearer tokens and TLS client certificates, as a principal name.

A principal is a plain name that ``rest.auth.roles`` grants roles to (see :mod:`sluice.rest.authz`). The
three sources share one namespace on purpose: basic user ``alice``, the token entry
``alice:<token>`` and a client certificate with ``CN=alice`` are the same principal.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import Headers
from starlette.types import Scope

from sluice.connectors.api import ConfigError
from sluice.rest.settings import RestSettings

#: The principal of a ``rest.auth.bearer.tokens`` entry that names none (the pre-roles format).
DEFAULT_BEARER_PRINCIPAL = "bearer"

#: The header the web console sends on its API calls (lower case, as ASGI scopes carry names).
CONSOLE_HEADER = b"x-sluice-console"

#: Attribute types RFC 4514 writes for the common name (its short name and its OID).
_COMMON_NAME_TYPES = frozenset({"CN", "2.5.4.3", "OID.2.5.4.3"})


@dataclass(frozen=True)
class BearerToken:
    """One ``principal:token`` entry of ``rest.auth.bearer.tokens``."""

    principal: str
    secret: str


def parse_bearer_tokens(entries: frozenset[str] | set[str]) -> tuple[BearerToken, ...]:
    """``principal:token`` entries (or bare tokens, principal ``bearer``); :class:`ConfigError` on a bad one."""
    tokens: list[BearerToken] = []
    for entry in sorted(entries):
        principal, sep, secret = entry.partition(":")
        if not sep:
            principal, secret = DEFAULT_BEARER_PRINCIPAL, entry
        principal, secret = principal.strip(), secret.strip()
        if not principal or not secret:
            # Never quote the entry: it holds the secret.
            raise ConfigError("rest.auth.bearer.tokens entries must look like principal:token (or a bare token)",
                              key="rest.auth.bearer.tokens")
        tokens.append(BearerToken(principal, secret))
    if len({t.secret for t in tokens}) != len(tokens):
        # One token for two principals would make the role of its holder depend on set order.
        raise ConfigError("rest.auth.bearer.tokens lists the same token twice", key="rest.auth.bearer.tokens")
    return tuple(tokens)


class Authenticator:
    """Turns a request's credentials into a principal name, or ``None`` when they are missing or wrong.

    The ``Authorization`` header decides when it is present (basic: the user name; bearer: the
    token's principal), so wrong credentials are refused even on a connection that also presented
    a client certificate. Without the header, the CN of the client certificate the server verified
    is the principal. Secrets are compared in constant time, against every candidate.
    """

    def __init__(self, settings: RestSettings) -> None:
        self._users = dict(settings.basic_users)
        self._tokens = parse_bearer_tokens(set(settings.bearer_tokens))
        schemes = []
        if self._users:
            schemes.append('Basic realm="sluice"')
        if self._tokens:
            schemes.append('Bearer realm="sluice"')
        self._challenge = ", ".join(schemes)

    def challenge_headers(self, scope: Scope | None = None) -> dict[str, str]:
        """``WWW-Authenticate`` for a 401; a worker that only takes client certificates has no scheme to offer.

        The web console's own calls (header ``X-Sluice-Console``) get no ``Basic`` challenge: on a
        call that carries the browser's credentials (its client certificate) a Basic challenge
        would open the browser's sign-in dialog over the console's own form."""
        challenge = self._challenge
        if scope is not None and any(name == CONSOLE_HEADER for name, _ in scope.get("headers", ())):
            challenge = ", ".join(s for s in challenge.split(", ") if not s.startswith("Basic "))
        return {"WWW-Authenticate": challenge} if challenge else {}

    def refusal_message(self) -> str:
        """What a 401 tells the client to send."""
        ways = []
        if self._users:
            ways.append("HTTP basic")
        if self._tokens:
            ways.append("bearer")
        credentials = f"valid {' or '.join(ways)} credentials" if ways else ""
        return "Authentication required: send " + (credentials or "a trusted TLS client certificate")

    def principal(self, scope: Scope) -> str | None:
        """The caller's principal name, or ``None`` (then the request needs a 401)."""
        header = Headers(scope=scope).get("authorization")
        if header:
            return self._from_header(header)
        return _certificate_principal(scope)

    def _from_header(self, header: str) -> str | None:
        scheme, _, credentials = header.partition(" ")
        credentials = credentials.strip()
        if scheme.lower() == "bearer" and self._tokens:
            found = None
            # compare_digest against every token: the time taken says nothing about which one matched.
            for token in self._tokens:
                if hmac.compare_digest(credentials.encode(), token.secret.encode()):
                    found = token.principal
            return found
        if scheme.lower() == "basic" and self._users:
            try:
                user, sep, password = base64.b64decode(credentials, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return None
            expected = self._users.get(user)
            # An unknown user still pays for a comparison, so timing does not tell which users exist.
            matches = hmac.compare_digest(password.encode(), (expected if expected is not None else "\0" + password).encode())
            return user if sep and expected is not None and matches else None
        return None


def _certificate_principal(scope: Scope) -> str | None:
    # The server (rest.server) puts the verified client certificate's subject into the ASGI TLS
    # extension; read it defensively, since plain HTTP, older servers and tests carry none.
    extensions: Any = scope.get("extensions")
    tls = extensions.get("tls") if isinstance(extensions, Mapping) else None
    if not isinstance(tls, Mapping) or tls.get("client_cert_error"):
        return None
    name = tls.get("client_cert_name")
    return common_name(name) if isinstance(name, str) and name else None


def common_name(distinguished_name: str) -> str | None:
    """The first CN of an RFC 4514 name (the most specific one: RFC 4514 lists the leaf RDN first).

    ``None`` when there is none, or when it is written as ``#`` + hex BER, which names no one readable.
    """
    for rdn in _split_unescaped(distinguished_name, ","):
        for attribute in _split_unescaped(rdn, "+"):
            kind, sep, value = attribute.partition("=")
            if sep and kind.strip().upper() in _COMMON_NAME_TYPES:
                # Only leading spaces: a trailing one may be backslash-escaped, and then it belongs to the value.
                value = value.lstrip()
                if not value or value.startswith("#"):
                    return None
                return _unescape(value) or None
    return None


def _split_unescaped(text: str, separator: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    chars = iter(text)
    for char in chars:
        if char == "\\":
            current.append(char)
            current.append(next(chars, ""))
        elif char == separator:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _unescape(value: str) -> str:
    # RFC 4514 escapes a special character as \c and any byte as \XX; the bytes of several \XX may
    # form one UTF-8 character, so decode once at the end.
    out = bytearray()
    i = 0
    while i < len(value):
        char = value[i]
        if char == "\\" and _is_hex(value[i + 1 : i + 3]):
            out += bytes.fromhex(value[i + 1 : i + 3])
            i += 3
        elif char == "\\" and i + 1 < len(value):
            out += value[i + 1].encode()
            i += 2
        else:
            out += char.encode()
            i += 1
    return out.decode("utf-8", errors="replace")


def _is_hex(pair: str) -> bool:
    return len(pair) == 2 and all(c in "0123456789abcdefABCDEF" for c in pair)
