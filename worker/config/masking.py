"""Secrets never leave the worker: a connector's secrets are masked in what shows that connector.

Whose secret it is decides where it is hidden. A connector's secrets (the values of its
password-typed keys, and whatever its ``${provider:…}`` placeholders resolve to) are hidden in *that*
connector's configs, validate messages, status traces and log lines (those tagged
``[connector|task-N]``), never in another connector's: a CDC connector whose password is
``postgres`` must not turn another connector's ``connection.user: postgres`` into ``[hidden]``. The
worker's own credentials (``producer.sasl.jaas.config``, ``ssl.key.password``, …) are hidden
everywhere, and so is every secret in a line no connector is named on (a startup line, a client's
line outside any task): with no owner to go by, hiding too much beats leaking.

The rules, one place each:

- :func:`mask_config` shows a config: a secret key's value (password-typed, or named like one) is
  ``[hidden]`` whatever its length; a placeholder is shown as it is (a reference, not the secret);
  any other value is never replaced *as a whole*, because a plain key holding the same word as a
  secret is a user name or a database, not that secret; only a secret standing as a token *inside*
  a longer value is hidden (a password in ``postgresql://app:pw@db/shop``).
- :func:`mask_text` (and :func:`scrub_secrets`, for a status trace) hides secrets in free text (messages, traces, log lines) where one stands as a
  token: not preceded or followed by a letter, digit or underscore where the secret itself begins or
  ends with one. The ``postgres`` of ``postgresql+psycopg://`` is not a password ``postgres``.
- Secrets shorter than :data:`MIN_SECRET_LENGTH` characters (and ``true``/``false``/``null``/
  ``none``) are never searched for in free text: a one-letter password would turn ``port 5432``
  into noise and a three-letter one hides in every other word, while telling nothing a brute
  force would not. They are still ``[hidden]`` as the values of their keys.

A process-wide :class:`SecretRegistry` keeps each owner's secrets: the config-provider resolver
and the task builder feed it, and :class:`SecretMaskingFilter` reads it for every log line.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import SecretStr

MASK = "[hidden]"

# Keys that hold secrets whatever the connector's model says (client settings, common names).
_SECRET_KEY = re.compile(
    r"(^|[._-])(password|passwd|secret|token|credentials?|api[._-]?key|jaas\.config|key\.password|user[._-]info)$", re.I
)

#: Secrets shorter than this are hidden only as whole values of their keys, never searched for in text.
MIN_SECRET_LENGTH = 4
_NOT_SECRET = frozenset({"true", "false", "null", "none"})
_WORD = re.compile(r"\w")


def is_secret_key(key: str) -> bool:
    """Whether ``key`` names a secret by Connect's and the clients' conventions."""
    return bool(_SECRET_KEY.search(key))


_PLACEHOLDER = re.compile(r"^\$\{[^}]+\}$")


def is_placeholder(value: Any) -> bool:
    """Whether ``value`` is one config-provider placeholder (``${env:DB_PASSWORD}``) and nothing else."""
    return isinstance(value, str) and bool(_PLACEHOLDER.match(value.strip()))


def secret_values(config: Mapping[str, Any], secret_keys: Iterable[str] = ()) -> frozenset[str]:
    """The literal values of ``config``'s secret keys (declared ones and conventional names).

    A placeholder is left out: it is what the user wrote, and what it resolves to is registered by
    whoever resolves it."""
    declared = set(secret_keys)
    found = set()
    for key, value in config.items():
        if (key in declared or is_secret_key(key)) and not is_placeholder(value):
            text = _text_of(value)
            if text:
                found.add(text)
    return frozenset(found)


def _text_of(value: Any) -> str | None:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    return value if isinstance(value, str) else None


def searchable_forms(value: Any) -> frozenset[str]:
    """The forms ``value`` takes in free text, long enough to search for (none for a short value).

    Besides the value itself: stripped, as ``repr()`` quotes it in a traceback or a dict (quotes
    and control characters escaped), and percent-encoded as it stands in a URL's user info.
    """
    text = _text_of(value)
    if not text:
        return frozenset()
    forms = {text, text.strip(), repr(text)[1:-1], urllib.parse.quote(text, safe=""), urllib.parse.quote_plus(text)}
    return frozenset(f for f in forms if len(f) >= MIN_SECRET_LENGTH and f.lower() not in _NOT_SECRET)


def _token(secret: str) -> str:
    """``secret`` as a regex that matches only where it is not part of a longer word."""
    head = r"(?<!\w)" if _WORD.match(secret[0]) else ""
    tail = r"(?!\w)" if _WORD.match(secret[-1]) else ""
    return f"{head}{re.escape(secret)}{tail}"


@functools.lru_cache(maxsize=256)
def _pattern(secrets: frozenset[str]) -> re.Pattern[str] | None:
    """One pattern for all of ``secrets``, longest first so a secret containing another is hidden whole."""
    if not secrets:
        return None
    ordered = sorted(secrets, key=lambda s: (-len(s), s))
    return re.compile("|".join(_token(s) for s in ordered))


def _forms(values: Iterable[Any]) -> frozenset[str]:
    return frozenset(f for v in values for f in searchable_forms(v))


class SecretRegistry:
    """The secrets this process has seen, by owner: the worker's own, and each connector's.

    Thread-safe: registration takes a lock and replaces immutable sets; readers take the current
    ones without locking (a log line must not wait for a registration).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._worker: frozenset[str] = frozenset()
        self._connectors: dict[str, frozenset[str]] = {}
        self._everything: frozenset[str] = frozenset()
        # What one connector's text is searched for (its own and the worker's), built on first use.
        self._views: dict[str, frozenset[str]] = {}

    def register(self, value: Any, connector: str | None = None) -> None:
        """Remember ``value`` (a string, or a pydantic ``SecretStr``) as a secret of ``connector``
        (``None``: of the worker, hidden everywhere). Short and boolean values are ignored."""
        forms = searchable_forms(value)
        if not forms:
            return
        with self._lock:
            if connector is None:
                if forms <= self._worker:
                    return
                self._worker |= forms
            else:
                own = self._connectors.get(connector, frozenset())
                if forms <= own:
                    return
                self._connectors[connector] = own | forms
            self._everything |= forms
            self._views = {}

    @property
    def empty(self) -> bool:
        return not self._everything

    def secrets(self, connector: str | None = None) -> frozenset[str]:
        """The searchable secrets of ``connector`` and of the worker; every secret for ``None``."""
        if connector is None:
            return self._everything
        # One read of the cache: registration replaces the sets first, then the cache, so a view
        # built while it runs lands in the cache it discards, never in the fresh one.
        views = self._views
        view = views.get(connector)
        if view is None:
            view = self._worker | self._connectors.get(connector, frozenset())
            views[connector] = view
        return view

    def mask(self, text: str, connector: str | None = None, known: Iterable[Any] = ()) -> str:
        """``text`` with the secrets of ``connector`` (see :meth:`secrets`) and ``known`` hidden as tokens."""
        if not text:
            return text
        secrets = self.secrets(connector)
        extra = _forms(known)
        pattern = _pattern(secrets | extra if extra else secrets)
        return pattern.sub(MASK, text) if pattern is not None else text

    def clear(self) -> None:
        """Forget every secret (tests)."""
        with self._lock:
            self._worker = frozenset()
            self._connectors = {}
            self._everything = frozenset()
            self._views = {}


SECRETS = SecretRegistry()


def register_secret(value: Any, connector: str | None = None) -> None:
    """Hide ``value`` from now on wherever ``connector`` is shown (the worker's own secret, hidden
    everywhere, when ``connector`` is ``None``). Values under :data:`MIN_SECRET_LENGTH` characters
    and booleans are too common to search for and are ignored."""
    SECRETS.register(value, connector)


def register_config_secrets(
    config: Mapping[str, Any], secret_keys: Iterable[str] = (), connector: str | None = None
) -> None:
    """Register the literal values of the secret keys of ``config`` as ``connector``'s."""
    for value in secret_values(config, secret_keys):
        register_secret(value, connector)


def mask_text(text: str, connector: str | None = None, known: Iterable[Any] = ()) -> str:
    """``text`` about ``connector`` with its secrets, the worker's and ``known`` hidden where one
    stands as a token; with no connector, every registered secret is hidden."""
    return SECRETS.mask(text, connector, known)


def mask_secrets(text: str, secrets: Iterable[Any]) -> str:
    """``text`` with each of ``secrets`` (and nothing registered) hidden where it stands as a token."""
    pattern = _pattern(_forms(secrets))
    return pattern.sub(MASK, text) if pattern is not None and text else text


_ENV_PLACEHOLDER = re.compile(r"\$\{env:([^}:]+)(?::[^}]*)?\}")


def scrub_secrets(trace: str, config: Mapping[str, Any], secret_keys: Iterable[str] = ()) -> str:
    """``trace`` with every secret of ``config`` replaced by ``[hidden]``.

    Secrets are the literal values of password-typed keys and whatever an ``${env:VAR}``
    placeholder resolves to, in any key: an exception message may quote either, and a status
    trace is returned over REST.
    """
    declared = set(secret_keys)
    secrets: set[str] = set()
    for key, value in config.items():
        if not isinstance(value, str) or not value:
            continue
        for var in _ENV_PLACEHOLDER.findall(value):
            resolved = os.environ.get(var)
            if resolved:
                secrets.add(resolved)
        if (key in declared or is_secret_key(key)) and not value.startswith("${"):
            secrets.add(value)
    # As tokens, long enough ones only (see mask_text): a password "postgres" must not turn
    # "postgresql+psycopg://" in the trace into "[hidden]ql+psycopg://".
    return mask_secrets(trace, secrets)


def mask_config(
    config: Mapping[str, Any],
    secret_keys: Iterable[str] = (),
    *,
    connector: str | None = None,
    known: Iterable[Any] = (),
) -> dict[str, Any]:
    """A copy of ``config`` (of ``connector``) as a user may see it.

    A secret key's value is ``[hidden]``, however short; a placeholder is kept (Connect returns it,
    so configs can be read back and re-applied). Another value is never hidden as a whole, however
    it compares with a secret; a secret of this connector (registered, in ``config``'s own secret
    keys, or ``known``) or of the worker standing as a token inside it is hidden (a URL with the
    password in it, a value a connector derived from a resolved secret).
    """
    declared = set(secret_keys)
    secrets = SECRETS.secrets(connector) | _forms(secret_values(config, declared)) | _forms(known)
    pattern = _pattern(secrets)
    masked: dict[str, Any] = {}
    for key, value in config.items():
        if (key in declared or is_secret_key(key)) and value not in (None, "") and not is_placeholder(value):
            masked[key] = MASK
        elif isinstance(value, str) and pattern is not None and not pattern.fullmatch(value.strip()):
            masked[key] = pattern.sub(MASK, value)
        else:
            masked[key] = value
    return masked


def _no_connector() -> str | None:
    return None


class SecretMaskingFilter(logging.Filter):
    """Hides secrets in a record's message and formatted traceback: the secrets of the connector the
    line is about (``owner``, read when the line is written) and the worker's; every secret when
    the line is about no connector.

    Attach it to a *handler* (a logger's filters do not see records propagated from child loggers).
    It rewrites the record only when a secret is present: the message becomes the masked, fully
    formatted text (``args`` cleared) and the masked traceback is cached in ``exc_text``, which
    :class:`logging.Formatter` uses instead of formatting ``exc_info`` again.
    """

    _formatter = logging.Formatter()

    def __init__(self, owner: Callable[[], str | None] = _no_connector) -> None:
        super().__init__()
        self._owner = owner

    def filter(self, record: logging.LogRecord) -> bool:
        if SECRETS.empty:
            return True
        connector = self._owner()
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string is logging's to report, not ours
            return True
        masked = mask_text(message, connector)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_text(record.exc_text, connector)
        if record.stack_info:
            record.stack_info = mask_text(record.stack_info, connector)
        return True
