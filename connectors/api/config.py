"""Configuration models for plugins.

Every connector, converter and transform declares its configuration as a pydantic model derived
from :class:`PluginConfig`. Attribute names are the Connect keys with dots replaced by
underscores (``batch_size`` ↔ ``batch.size``); the model accepts the dotted keys, forbids unknown
ones and coerces the strings of ``.properties`` files (``"2000"`` → ``2000``, ``"true"`` → ``True``).
Secrets are declared as :class:`pydantic.SecretStr` so the runtime masks them everywhere, and
keys that name a file or directory on the worker's machine as :data:`LocalPath` so the runtime can
confine them to the directories the operator allows (``connector.allowed.paths``).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError, model_validator

from sluice.connectors.api.errors import ConfigError


class LocalPathKey:
    """The ``Annotated`` metadata behind :data:`LocalPath`; the one instance is :data:`LOCAL_PATH`."""

    def __repr__(self) -> str:
        return "LOCAL_PATH"


LOCAL_PATH = LocalPathKey()

#: The type of a config key whose value names a file or directory on the worker's machine (a file to
#: read, a file to write, a spool directory, a PEM file). Use it instead of ``str`` — ``file:
#: LocalPath = Field(...)``, or ``LocalPath | None`` — and :meth:`PluginConfig.path_keys` lists the
#: key. The worker then refuses a connector whose value resolves (``..`` and symlinks followed)
#: outside ``connector.allowed.paths``, so a REST caller cannot make a connector read ``/etc/shadow``
#: or write over a file of the worker's user. An empty value is not a path (the file connectors
#: read standard input or write standard output then) and is never checked.
LocalPath = Annotated[str, LOCAL_PATH]


def _marks_local_path(annotation: Any, metadata: typing.Iterable[Any] = ()) -> bool:
    """Whether a field's annotation (or pydantic's copy of its metadata) carries :data:`LOCAL_PATH`.

    pydantic moves the metadata of a bare ``Annotated`` into ``FieldInfo.metadata``, but keeps it
    inside the annotation of ``LocalPath | None``, so both places are searched.
    """
    if any(m is LOCAL_PATH for m in metadata):
        return True
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        inner, *extra = typing.get_args(annotation)
        return any(m is LOCAL_PATH for m in extra) or _marks_local_path(inner)
    if origin in (typing.Union, types.UnionType):
        return any(_marks_local_path(arg) for arg in typing.get_args(annotation))
    return False


def split_list(value: Any) -> Any:
    """Connect's LIST type: ``"a, b"`` and ``["a", "b"]`` mean the same; empty items are dropped.

    For a ``mode="before"`` validator of a list-typed key; anything else is returned as it is, for
    pydantic to refuse with its own message.
    """
    if value is None:
        return []
    if isinstance(value, str):
        value = value.split(",")
    if isinstance(value, (list, tuple)):
        return [item.strip() if isinstance(item, str) else item for item in value if not (isinstance(item, str) and not item.strip())]
    return value


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

    #: Key prefixes whose keys pass through to a client the plugin builds (Debezium's
    #: ``signal.consumer.*``): ``{"signal.consumer.": "signal_consumer"}`` gathers every
    #: ``signal.consumer.<setting>`` key into the ``dict[str, str]`` attribute ``signal_consumer`` as
    #: ``{"<setting>": value}``. Such keys are the plugin's own: accepted, validated as strings, kept.
    prefixed_keys: ClassVar[Mapping[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _gather_prefixed(cls, data: Any) -> Any:
        if not cls.prefixed_keys or not isinstance(data, Mapping):
            return data
        out = dict(data)
        for prefix, name in cls.prefixed_keys.items():
            gathered = {k[len(prefix) :]: out.pop(k) for k in list(out) if k.startswith(prefix)}
            if gathered:
                out[name] = {**out.get(name, {}), **gathered}
        return out

    @classmethod
    def prefixed_flat(cls, model: BaseModel) -> dict[str, Any]:
        """The prefixed keys of ``model`` as the flat keys they came from (for a task config)."""
        return {
            prefix + key: value
            for prefix, name in cls.prefixed_keys.items()
            for key, value in (getattr(model, name, None) or {}).items()
        }

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

    @classmethod
    def path_keys(cls) -> set[str]:
        """The dotted keys whose values name a local file or directory (typed :data:`LocalPath`)."""
        return {
            info.alias or dotted(name)
            for name, info in cls.model_fields.items()
            if _marks_local_path(info.annotation, info.metadata)
        }

    def local_paths(self) -> dict[str, str | tuple[str, ...]]:
        """Every local file or directory this validated config makes the worker open, as ``{key: path}``.

        The runtime confines each one to ``connector.allowed.paths`` before a task starts (and at
        validate and create), so override this when a value names a file in a way a type cannot mark:
        a SQLite database inside ``connection.url``, a libpq ``sslkey=`` parameter. Report such a file
        under the key the user wrote (``connection.url``); a key whose value names several files (a
        URL with ``sslcert=`` and ``sslkey=``) maps to a tuple of them. By default, the non-empty
        values of the keys typed :data:`LocalPath`.
        """
        found: dict[str, str | tuple[str, ...]] = {}
        for name, info in type(self).model_fields.items():
            if not _marks_local_path(info.annotation, info.metadata):
                continue
            value = getattr(self, name)
            if isinstance(value, str) and value.strip():
                found[info.alias or dotted(name)] = value
        return found


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
