"""Secrets never leave the worker: password-typed values are masked in every response and log.

Two mechanisms:

- :func:`mask_config` masks the *values of secret keys* in a config shown to a user (REST bodies).
- A process-wide registry of *secret values* (:func:`register_secret`, fed by the config-provider
  resolver and by the worker for password-typed keys) lets :func:`mask_text` and
  :class:`SecretMaskingFilter` hide a secret wherever it turns up in free text: a log message, an
  exception traceback, a status trace.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "[hidden]"

# Keys that hold secrets whatever the connector's model says (client settings, common names).
_SECRET_KEY = re.compile(
    r"(^|[._-])(password|passwd|secret|token|credentials?|api[._-]?key|jaas\.config|key\.password|user[._-]info)$", re.I
)

# Values this short ("1", "on") or this common would blank out unrelated text all over the logs.
MIN_SECRET_LENGTH = 4
_NOT_SECRET = frozenset({"true", "false", "null", "none"})


def is_secret_key(key: str) -> bool:
    """Whether ``key`` names a secret by Connect's and the clients' conventions."""
    return bool(_SECRET_KEY.search(key))


def mask_config(config: Mapping[str, Any], secret_keys: Iterable[str] = ()) -> dict[str, Any]:
    """A copy of ``config`` with secret values replaced by ``[hidden]``.

    A value that is a config-provider placeholder (``${env:DB_PASSWORD}``) is kept: it is a
    reference, not the secret, and Connect returns it so configs can be read back and re-applied.
    Any other string value has registered secrets masked where they stand alone in it (not inside
    a longer word: a password ``postgres`` must not turn a connector class into
    ``io.debezium.connector.[hidden]ql…``), so a value a connector derived from a resolved secret
    (a task config, a URL with the password in it) does not show it either.
    """
    declared = set(secret_keys)
    masked: dict[str, Any] = {}
    for key, value in config.items():
        if (key in declared or is_secret_key(key)) and value not in (None, "") and not _is_placeholder(value):
            masked[key] = MASK
        elif isinstance(value, str):
            masked[key] = SECRETS.mask_tokens(value)
        else:
            masked[key] = value
    return masked


_PLACEHOLDER = re.compile(r"^\$\{[^}]+\}$")


def _is_placeholder(value: Any) -> bool:
    return isinstance(value, str) and bool(_PLACEHOLDER.match(value.strip()))


class SecretRegistry:
    """Secret values seen by this process, and one compiled pattern that finds any of them.

    Thread-safe: registration takes a lock and swaps in a new pattern; :meth:`mask` reads the
    current pattern without locking.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self._token_pattern: re.Pattern[str] | None = None

    def register(self, value: Any) -> None:
        """Remember ``value`` (a string, or a pydantic ``SecretStr``) as a secret."""
        if hasattr(value, "get_secret_value"):
            value = value.get_secret_value()
        if not isinstance(value, str):
            return
        candidates = {value, value.strip()}
        # repr() of a str inside a traceback or a dict escapes quotes and control characters.
        candidates.add(repr(value)[1:-1])
        new = {c for c in candidates if len(c) >= MIN_SECRET_LENGTH and c.lower() not in _NOT_SECRET} - self._values
        if not new:
            return
        with self._lock:
            self._values |= new
            # Longest first, so a secret that contains another is hidden whole.
            ordered = sorted(self._values, key=len, reverse=True)
            alternatives = "|".join(re.escape(v) for v in ordered)
            self._pattern = re.compile(alternatives)
            self._token_pattern = re.compile(f"(?<![A-Za-z0-9])(?:{alternatives})(?![A-Za-z0-9])")

    def mask(self, text: str) -> str:
        pattern = self._pattern
        if pattern is None or not text:
            return text
        return pattern.sub(MASK, text)

    def mask_tokens(self, text: str) -> str:
        """Like :meth:`mask`, but only where a secret stands alone: not inside a longer word.

        For values shown in a config: a password ``postgres`` then hides the user ``postgres`` and
        ``u:postgres@db``, but not the ``postgres`` inside ``io.debezium.connector.postgresql``.
        """
        pattern = self._token_pattern
        if pattern is None or not text:
            return text
        return pattern.sub(MASK, text)

    def clear(self) -> None:
        """Forget every secret (tests)."""
        with self._lock:
            self._values.clear()
            self._pattern = None
            self._token_pattern = None


SECRETS = SecretRegistry()


def register_secret(value: Any) -> None:
    """Hide ``value`` from every log line and status trace from now on (values under
    :data:`MIN_SECRET_LENGTH` characters and booleans are too common to hide and are ignored)."""
    SECRETS.register(value)


def register_config_secrets(config: Mapping[str, Any], secret_keys: Iterable[str] = ()) -> None:
    """Register the values of the secret keys of ``config`` (declared ones and conventional names)."""
    declared = set(secret_keys)
    for key, value in config.items():
        if (key in declared or is_secret_key(key)) and not _is_placeholder(value):
            register_secret(value)


def mask_text(text: str) -> str:
    """``text`` with every registered secret replaced by ``[hidden]``."""
    return SECRETS.mask(text)


class SecretMaskingFilter(logging.Filter):
    """Hides registered secrets in a record's message and formatted traceback.

    Attach it to a *handler* (a logger's filters do not see records propagated from child loggers).
    It rewrites the record only when a secret is present: the message becomes the masked, fully
    formatted text (``args`` cleared) and the masked traceback is cached in ``exc_text``, which
    :class:`logging.Formatter` uses instead of formatting ``exc_info`` again.
    """

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        if SECRETS._pattern is None:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is logging's to report, not ours
            return True
        masked = mask_text(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_text(record.exc_text)
        if record.stack_info:
            record.stack_info = mask_text(record.stack_info)
        return True
