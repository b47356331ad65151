"""Configuration models for plugins.

Every connector, converter and transform declares its configuration as a pydantic model derived
from :class:`PluginConfig`. Attribute names are the Connect keys with dots replaced by
underscores (``batch_size`` ↔ ``batch.size``); the model accepts the dotted keys, forbids unknown
ones and coerces the strings of ``.properties`` files (``"2000"`` → ``2000``, ``"true"`` → ``True``).
Secrets are declared as :class:`pydantic.SecretStr` so the runtime masks them everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from connectors.api.errors import ConfigError


def dotted(name: str) -> str:
    """``batch_size`` → ``batch.size``: the Connect spelling of a model attribute."""
    return name.replace("__", "-").replace("_", ".")


class PluginConfig(BaseModel):
    """Base of every plugin configuration model (unknown keys are rejected)."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=dotted,
        populate_by_name=True,
        frozen=True,
        str_strip_whitespace=True,
        hide_input_in_errors=True,
    )

    @classmethod
    def parse(cls, raw: Mapping[str, Any], *, ignore: frozenset[str] | set[str] = frozenset()) -> Any:
        """Validate ``raw`` (minus the ``ignore`` keys) or raise :class:`ConfigError` naming each bad key."""
        data = {k: v for k, v in raw.items() if k not in ignore}
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            problems = config_problems(exc)
            first_key = next(iter(problems))
            message = "; ".join(f"{key}: {msg}" for key, msg in problems.items())
            raise ConfigError(f"Invalid configuration: {message}", key=first_key, problems=problems) from None

    @classmethod
    def secret_keys(cls) -> set[str]:
        """The dotted keys whose values are secrets (typed :class:`SecretStr`)."""
        keys = set()
        for name, info in cls.model_fields.items():
            if info.annotation is SecretStr or "SecretStr" in str(info.annotation):
                keys.add(info.alias or dotted(name))
        return keys


def config_problems(exc: ValidationError) -> dict[str, str]:
    """Map a pydantic error to ``{dotted key: message}`` in the words a Connect user expects."""
    problems: dict[str, str] = {}
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<config>"
        kind = err["type"]
        if kind == "extra_forbidden":
            msg = "unknown configuration key"
        elif kind == "missing":
            msg = "missing required configuration"
        else:
            msg = err["msg"]
            if "input" in err and not isinstance(err["input"], (dict, list)):
                msg = f"invalid value {err['input']!r}: {msg}"
        problems.setdefault(loc, msg)
    return problems
