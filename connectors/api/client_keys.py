"""The Kafka client settings no connector config may set, whoever builds the client.

A connector config comes from whoever may call the REST API, and the clients built from it run
inside the worker or its task hosts: the worker's clients (``producer.override.*`` …, see
:mod:`sluice.worker.config.client_policy`) and the clients a connector builds for itself with
settings of its own config (a CDC source's ``signal.consumer.*``, the binlog source's
``schema.history.internal.producer.*`` / ``.consumer.*``). Kafka Connect's history
(CVE-2023-25194: a JNDI login module through ``sasl.jaas.config``; CVE-2025-27817: OAuth URLs that
read local files and reach internal hosts) shows that a client setting can be code execution, a
file read or a request to another host in disguise; :func:`denied_reason` names the keys that are,
and :func:`check_denied` refuses them with a :class:`ConfigError` naming the connector key.
A connector checks its own client settings with it *before* it builds any client from them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from sluice.connectors.api.errors import ConfigError

_CODE = "loads code into the worker"
_COMMAND = "runs a command on the worker"
_FILE = "names a local file the client would read"
_URL = "makes the client fetch a URL the operator did not choose"

#: librdkafka's and the Java client's keys, each with what it would let a caller do.
DENIED_KEYS: Mapping[str, str] = {
    "plugin.library.paths": _CODE,
    "ssl.engine.location": _CODE,
    "ssl.engine.id": _CODE,
    "ssl.providers": _CODE,
    "security.providers": _CODE,
    "config.providers": "declares config providers that read local files and the environment",
    "sasl.kerberos.kinit.cmd": _COMMAND,
    "sasl.kerberos.keytab": _FILE,
    "sasl.oauthbearer.metadata.authentication.type": "makes the client query a cloud metadata endpoint",
}

#: Suffixes that mark a kind of value, so keys a newer client adds are refused too.
DENIED_SUFFIXES: tuple[tuple[str, str], ...] = (
    (".class", _CODE),
    (".classes", _CODE),
    (".location", _FILE),
    (".file", _FILE),
    (".files", _FILE),
    (".path", _FILE),
    (".paths", _FILE),
    (".dir", _FILE),
    (".cmd", _COMMAND),
    (".command", _COMMAND),
    (".url", _URL),
    (".urls", _URL),
)

# JAAS login modules that only carry credentials; anything else (JndiLoginModule, Krb5LoginModule
# with a keytab, a custom module) can load code or read files inside a JVM client.
_SAFE_LOGIN_MODULE = re.compile(
    r"^\s*org\.apache\.kafka\.common\.security\.(plain\.PlainLoginModule|scram\.ScramLoginModule|"
    r"oauthbearer\.OAuthBearerLoginModule)\s+(required|requisite|sufficient|optional)\b"
)


def denied_reason(key: str, value: Any = None) -> str | None:
    """Why a connector may never set client key ``key`` (to ``value``), or None when it may."""
    key = key.strip().lower()
    if key in DENIED_KEYS:
        return DENIED_KEYS[key]
    for suffix, reason in DENIED_SUFFIXES:
        if key.endswith(suffix):
            return reason
    if key == "sasl.jaas.config" and value is not None:
        # A JAAS config may hold several entries separated by ';': each must be a safe module.
        entries = [e for e in str(value).split(";") if e.strip()]
        if not entries or not all(_SAFE_LOGIN_MODULE.match(e) for e in entries):
            return "names a JAAS login module other than PlainLoginModule, ScramLoginModule or OAuthBearerLoginModule"
    return None


def check_denied(options: Mapping[str, Any], prefix: str) -> None:
    """Refuse the first key of ``options`` on the deny-list, naming it as ``prefix + key``."""
    for key, value in options.items():
        reason = denied_reason(key, value)
        if reason is not None:
            raise ConfigError(
                f"{prefix}{key} is not allowed in a connector config: it {reason}. "
                "Set it in the worker's configuration instead if the operator wants it.",
                key=f"{prefix}{key}",
            )
