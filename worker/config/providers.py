"""Config providers (Kafka Connect's KIP-297): secrets referenced as ``${provider:path:key}``.

A connector config may hold placeholders instead of secrets::

    connection.password=${env:DB_PASSWORD}
    connection.user=${file:/etc/sluice/db.properties:user}
    ssl.key.password=${dir:/var/run/secrets/db:key-password}

The herder stores and returns the placeholders; the worker resolves them (:class:`ConfigProviders`)
only where a value is handed to a connector, a task, a converter or a Kafka client, and feeds every
resolved value to :func:`sluice.worker.config.masking.register_secret`, as a secret of the connector whose
config named it, so that its log lines, messages and traces never show it.

Worker configuration, with Connect's keys::

    config.providers=env,file,dir
    config.providers.file.class=org.apache.kafka.common.config.provider.FileConfigProvider
    config.providers.file.param.allowed.paths=/etc/sluice,/var/run/secrets
    config.providers.env.param.allowlist.pattern=DB_.*

**Only declared providers exist**, as in Connect: a provider is available only when
``config.providers`` lists it, and an absent or empty ``config.providers`` means none — a connector
config with ``${env:…}``, ``${file:…}`` or ``${dir:…}`` is then refused at validation (``PUT
/connector-plugins/{plugin}/config/validate`` reports it on that key, ``POST /connectors`` answers
400), never resolved. Otherwise anyone who may create a connector could make the worker read its
environment or any file its user can, and get the value back as a topic name. ``env``, ``file``
and ``dir`` need no ``config.providers.<name>.class``; other names do. Declare only what connectors
need, and restrict what a declared provider reaches: ``allowed.paths`` for ``file`` and ``dir``
(KIP-993; realpath on both sides, so ``..`` and symlinks do not lead out) and ``allowlist.pattern``
for ``env`` (KIP-887). Keys ``config.providers.<name>.*`` of a provider that is not listed are
ignored, with a warning.

**Plugins.** A provider is a class with ``is_config_provider = True``, a ``Config`` model (a
:class:`~connectors.api.PluginConfig` for its ``param.*`` keys), ``configure(params)``,
``get(path, keys) -> dict[str, str]`` and ``close()`` — subclass :class:`ConfigProvider` — found
through the ``sluice.config_providers`` entry-point group or by its Python path.

**Differences from Connect**, each so that a mistake is an error instead of a literal
``${...}`` reaching a database driver: an unknown provider name, a missing variable, file or key,
and a path outside ``allowed.paths`` raise :class:`~connectors.api.ConfigError` naming the config
key and the placeholder (never the value); Connect leaves such placeholders unresolved. TTLs and
``config.action.reload`` are not implemented yet.
"""

from __future__ import annotations

import abc
import logging
import os
import re
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator

from sluice.connectors.api import ConfigError, PluginConfig
from sluice.plugins import PluginKind, PluginRegistry
from sluice.worker.config.local_paths import PathGrant
from sluice.worker.config.masking import register_secret
from sluice.worker.config.properties import parse_properties

log = logging.getLogger(__name__)

# Connect's ConfigTransformer.DEFAULT_PATTERN: ${provider:[path:]key}; the key may contain ':'.
PLACEHOLDER = re.compile(r"\$\{([^}]*?):(?:([^}]*?):)?([^}]*?)\}")

PROVIDERS_KEY = "config.providers"


class ConfigProvider(abc.ABC):
    """Base of config providers: looks up the values that ``${<name>:<path>:<key>}`` refers to.

    The worker creates one instance per ``config.providers`` entry, calls :meth:`configure` once
    with its ``param.*`` keys, then :meth:`get` from the herder's and the task runners' threads
    (implementations must be thread-safe), and :meth:`close` when the worker stops.
    """

    version: ClassVar[str] = "0.1.0"

    is_config_provider: ClassVar[bool] = True
    aliases: ClassVar[tuple[str, ...]] = ()
    Config: ClassVar[type[PluginConfig]] = PluginConfig

    def configure(self, params: Mapping[str, Any]) -> None:
        """Validate and keep ``params`` (the ``config.providers.<name>.param.*`` keys)."""
        self.config = self.Config.parse(params)

    @abc.abstractmethod
    def get(self, path: str, keys: Iterable[str]) -> dict[str, str]:
        """The values of ``keys`` under ``path`` ("" when the placeholder has no path).

        Leave out keys that do not exist (the caller reports them); raise
        :class:`~connectors.api.ConfigError` when ``path`` itself cannot be read.
        """

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`configure` acquired."""


class _EnvConfig(PluginConfig):
    """``config.providers.env.param.*``."""

    allowlist_pattern: str = Field(
        ".*", description="Regular expression a variable's whole name must match to be readable"
    )

    @field_validator("allowlist_pattern")
    @classmethod
    def _valid_regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


class EnvVarConfigProvider(ConfigProvider):
    """``${env:VAR}``: the worker process's environment variables (KIP-887)."""

    aliases = ("org.apache.kafka.common.config.provider.EnvVarConfigProvider",)
    Config = _EnvConfig

    def configure(self, params: Mapping[str, Any]) -> None:
        super().configure(params)
        self._allowed = re.compile(self.config.allowlist_pattern)

    def get(self, path: str, keys: Iterable[str]) -> dict[str, str]:
        if path:
            raise ConfigError(f"the env provider takes no path (use ${{env:VARIABLE}}), got path {path!r}")
        return {k: os.environ[k] for k in keys if k in os.environ and self._allowed.fullmatch(k)}


class _PathConfig(PluginConfig):
    """``config.providers.{file,dir}.param.*``."""

    allowed_paths: str = Field(
        "", description="Comma-separated directories or files the provider may read; empty allows all (KIP-993)"
    )


class _PathProvider(ConfigProvider):
    """Shared ``allowed.paths`` handling: the path must lie under an allowed one once resolved.

    Checked when the placeholder is resolved and again as each file is opened
    (:meth:`sluice.worker.config.local_paths.PathGrant.open`), so a symlink inside an allowed directory
    that points outside it is not followed, even one planted after a first resolution.
    """

    Config = _PathConfig

    def configure(self, params: Mapping[str, Any]) -> None:
        super().configure(params)
        allowed = [p.strip() for p in self.config.allowed_paths.split(",") if p.strip()]
        for p in allowed:
            if not os.path.isabs(p):
                raise ConfigError(f"allowed.paths must be absolute paths, got {p!r}", key="allowed.paths")
        # realpath on both sides, so neither '..' nor a symlink leads outside an allowed path;
        # empty allows every path (KIP-993).
        roots = tuple(Path(os.path.realpath(p)) for p in allowed)
        self._grant = PathGrant(roots, anywhere=not roots, granted_by="the provider's allowed.paths")

    def _checked(self, path: str) -> Path:
        if not path:
            raise ConfigError("a path is required (use ${<provider>:<path>:<key>})")
        if "\0" in path:
            raise ConfigError("a path cannot contain a NUL character")
        real = Path(os.path.realpath(path))
        if not self._grant.permits(real):
            raise ConfigError(f"path {path} is outside the provider's allowed.paths")
        return real


class FileConfigProvider(_PathProvider):
    """``${file:/path/to.properties:key}``: a key of a ``.properties`` file."""

    aliases = ("org.apache.kafka.common.config.provider.FileConfigProvider",)

    def get(self, path: str, keys: Iterable[str]) -> dict[str, str]:
        self._checked(path)
        try:
            with self._grant.open(path, "r", key="path", encoding="utf-8") as stream:
                text = stream.read()
        except OSError as exc:
            raise ConfigError(f"cannot read properties file {path}: {exc.strerror or exc}") from None
        values = parse_properties(text)
        return {k: values[k] for k in keys if k in values}


class DirectoryConfigProvider(_PathProvider):
    """``${dir:/path/dir:filename}``: a whole file in a directory (a Kubernetes secret mount).

    As in Connect, the value is the file's entire content, decoded as UTF-8 — a trailing newline is
    kept — and only regular files directly in the directory are keys. A key that is a symlink is
    followed only while it stays inside ``allowed.paths`` (a Kubernetes mount's ``..data`` links do).
    """

    aliases = ("org.apache.kafka.common.config.provider.DirectoryConfigProvider",)

    def get(self, path: str, keys: Iterable[str]) -> dict[str, str]:
        directory = self._checked(path)
        if not directory.is_dir():
            raise ConfigError(f"{path} is not a readable directory")
        values: dict[str, str] = {}
        for key in keys:
            # A key is a file name, never a path: ${dir:/secrets:../etc/shadow} finds nothing.
            if not key or "/" in key or os.sep in key or key in (".", ".."):
                continue
            try:
                with self._grant.open(str(directory / key), "rb", key=key) as stream:
                    if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
                        continue
                    values[key] = stream.read().decode("utf-8")
            except (FileNotFoundError, IsADirectoryError):
                continue  # only regular files are keys
            except UnicodeDecodeError:
                # Not the codec's message: it quotes a byte of the file.
                raise ConfigError(f"{key} in {path} is not UTF-8 text") from None
            except OSError as exc:
                raise ConfigError(f"cannot read {key} in {path}: {exc.strerror or type(exc).__name__}") from None
        return values


BUILTIN_PROVIDERS: dict[str, type[ConfigProvider]] = {}
for _cls in (EnvVarConfigProvider, FileConfigProvider, DirectoryConfigProvider):
    for _name in (_cls.__name__, *_cls.aliases):
        BUILTIN_PROVIDERS[_name] = _cls
# The class a declared provider of one of these names gets without config.providers.<name>.class.
_IMPLIED_CLASSES: dict[str, type[ConfigProvider]] = {
    "env": EnvVarConfigProvider,
    "file": FileConfigProvider,
    "dir": DirectoryConfigProvider,
}


def has_placeholder(value: Any) -> bool:
    """Whether ``value`` is a string with at least one ``${provider:...}`` reference."""
    return isinstance(value, str) and PLACEHOLDER.search(value) is not None


class ConfigProviders:
    """The worker's configured providers, and the resolution of placeholders in a config."""

    def __init__(self, providers: Mapping[str, ConfigProvider]) -> None:
        self._providers = dict(providers)

    @property
    def names(self) -> list[str]:
        return sorted(self._providers)

    @classmethod
    def from_worker_config(cls, raw: Mapping[str, Any], plugins: PluginRegistry | None = None) -> ConfigProviders:
        """Build the providers from worker keys (``config.providers``, ``config.providers.<n>.*``).

        Raises :class:`ConfigError` naming the worker key when a class cannot be found or a
        provider rejects its parameters.
        """
        names = tuple(dict.fromkeys(n.strip() for n in str(raw.get(PROVIDERS_KEY) or "").split(",") if n.strip()))
        _warn_undeclared(raw, names)
        providers: dict[str, ConfigProvider] = {}
        for name in names:
            prefix = f"{PROVIDERS_KEY}.{name}."
            class_key = f"{prefix}class"
            provider_cls = _provider_class(name, raw.get(class_key), class_key, plugins)
            params = {k[len(prefix + "param.") :]: v for k, v in raw.items() if k.startswith(prefix + "param.")}
            provider = provider_cls()
            try:
                provider.configure(params)
            except ConfigError as exc:
                key = f"{prefix}param.{exc.key}" if exc.key else class_key
                raise ConfigError(f"Invalid configuration of config provider {name!r}: {exc}", key=key) from None
            providers[name] = provider
        if providers:
            log.info("Config providers: %s", ", ".join(f"{n} ({type(p).__name__})" for n, p in providers.items()))
        return cls(providers)

    def close(self) -> None:
        for name, provider in self._providers.items():
            try:
                provider.close()
            except Exception:
                log.exception("Error closing config provider %s", name)

    def resolve(self, config: Mapping[str, Any], connector: str | None = None) -> dict[str, Any]:
        """A copy of ``config`` with every placeholder replaced by its value.

        Each (provider, path) is asked once, for all its keys. Every value found is registered
        with :func:`sluice.worker.config.masking.register_secret` as a secret of ``connector`` (``None``:
        the worker's own, hidden everywhere). Raises :class:`ConfigError` naming the config
        key and the placeholder — never the value — when a placeholder cannot be resolved.
        """
        wanted: dict[tuple[str, str], dict[str, str]] = {}  # (provider, path) → {key: config key}
        for config_key, value in config.items():
            if not isinstance(value, str):
                continue
            for match in PLACEHOLDER.finditer(value):
                provider, path, key = match.group(1), match.group(2) or "", match.group(3)
                if provider not in self._providers:
                    declared = f"it declares {', '.join(self.names)}" if self._providers else "it declares none"
                    raise ConfigError(
                        f"Cannot resolve {match.group(0)} in '{config_key}': config provider {provider!r} is not "
                        f"declared in the worker's config.providers ({declared})",
                        key=config_key,
                    )
                wanted.setdefault((provider, path), {}).setdefault(key, config_key)
        if not wanted:
            return dict(config)
        found: dict[tuple[str, str], dict[str, str]] = {}
        for (provider, path), keys in wanted.items():
            try:
                values = self._providers[provider].get(path, list(keys))
            except Exception as exc:  # noqa: BLE001 - a plugin's own failure (a vault that is down) is still a config error
                config_key = next(iter(keys.values()))
                reason = str(exc) if isinstance(exc, ConfigError) else f"{type(exc).__name__}: {exc}"
                raise ConfigError(
                    f"Cannot resolve ${{{provider}:{path}:...}} in '{config_key}': {reason}", key=config_key
                ) from None
            for key, config_key in keys.items():
                if key not in values:
                    placeholder = f"${{{provider}:{path}:{key}}}" if path else f"${{{provider}:{key}}}"
                    raise ConfigError(
                        f"Cannot resolve {placeholder} in '{config_key}': {_missing(provider, path, key)}",
                        key=config_key,
                    )
                register_secret(values[key], connector)
            found[(provider, path)] = values

        def substitute(match: re.Match[str]) -> str:
            return found[(match.group(1), match.group(2) or "")][match.group(3)]

        return {k: PLACEHOLDER.sub(substitute, v) if isinstance(v, str) else v for k, v in config.items()}


def reverse_transform(raw: Mapping[str, Any], task_configs: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Put the placeholders of ``raw`` back into task configs a connector built from resolved values.

    Connect's ``AbstractHerder.reverseTransform``: a task config key that the connector config set
    with a placeholder gets that placeholder back, so stored and returned task configs hold
    references, and the task resolves them again when it starts.
    """
    templated = {k: v for k, v in raw.items() if has_placeholder(v)}
    return [{k: templated.get(k, v) for k, v in config.items()} for config in task_configs]


def _warn_undeclared(raw: Mapping[str, Any], names: Iterable[str]) -> None:
    """Say so when ``config.providers.<name>.*`` keys configure a provider that is not declared.

    Such keys once tuned providers that existed by default; now they do nothing, and a worker
    file that still has them should not look as if it enabled anything.
    """
    declared = set(names)
    prefix = f"{PROVIDERS_KEY}."
    orphans = sorted({k[len(prefix) :].split(".", 1)[0] for k in raw if k.startswith(prefix)} - declared)
    for name in orphans:
        log.warning(
            "Ignoring %s%s.*: config provider %r is not declared in %s, so it does not exist",
            prefix,
            name,
            name,
            PROVIDERS_KEY,
        )


def _missing(provider: str, path: str, key: str) -> str:
    if provider == "env":
        return f"environment variable {key} is not set (or not allowed by allowlist.pattern)"
    if provider == "file":
        return f"key {key!r} not found in {path}"
    if provider == "dir":
        return f"no file {key!r} in {path}"
    return f"provider {provider!r} has no key {key!r} under path {path!r}"


def _provider_class(name: str, class_name: Any, class_key: str, plugins: PluginRegistry | None) -> type[ConfigProvider]:
    if not class_name:
        if name in _IMPLIED_CLASSES:
            return _IMPLIED_CLASSES[name]
        raise ConfigError(f"Missing required configuration {class_key!r} for config provider {name!r}", key=class_key)
    class_name = str(class_name).strip()
    if class_name in BUILTIN_PROVIDERS:
        return BUILTIN_PROVIDERS[class_name]
    if plugins is not None:
        info = plugins.find(class_name, (PluginKind.CONFIG_PROVIDER,))
        if info is not None:
            return info.cls  # type: ignore[no-any-return]
    known = sorted(BUILTIN_PROVIDERS)
    if plugins is not None:
        known += sorted({p.name for p in plugins.plugins([PluginKind.CONFIG_PROVIDER])} - set(known))
    raise ConfigError(
        f"Config provider class {class_name} not found; {class_key} must be one of: {', '.join(known)} "
        "or the Python path of a class with is_config_provider = True found in plugin.path at start",
        key=class_key,
    )
