"""The plugin registry.

Every plugin, built-ins included, is found the same way: through Python entry points in the groups
of :data:`ENTRY_POINT_GROUPS`. A plugin can be named by its entry-point name (``FileStreamSource``),
by any of its ``aliases`` (Kafka Connect class names such as
``org.apache.kafka.connect.json.JsonConverter``), by its Python path (``package.module.Class`` or
``package.module:Class``), or by its class name with or without the ``Connector`` suffix, as
Connect accepts. Directories on ``plugin.path`` are put on ``sys.path`` first, and only modules
found in them can be named by their Python path (a REST client must not make the worker import
arbitrary installed modules).
"""

from __future__ import annotations

import difflib
import enum
import importlib
import importlib.util
import logging
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from sluice.connectors.api import (
    ConfigError,
    Converter,
    HeaderConverter,
    Predicate,
    SinkConnector,
    SourceConnector,
    Transformation,
)

log = logging.getLogger(__name__)


class PluginKind(enum.StrEnum):
    """Plugin types, spelled as Kafka Connect's ``/connector-plugins`` spells them."""

    SOURCE = "source"
    SINK = "sink"
    CONVERTER = "converter"
    HEADER_CONVERTER = "header_converter"
    TRANSFORMATION = "transformation"
    PREDICATE = "predicate"
    CONFIG_PROVIDER = "config_provider"


ENTRY_POINT_GROUPS: dict[str, tuple[PluginKind, ...]] = {
    "sluice.connectors": (PluginKind.SOURCE, PluginKind.SINK),
    "sluice.converters": (PluginKind.CONVERTER,),
    "sluice.header_converters": (PluginKind.HEADER_CONVERTER,),
    "sluice.transforms": (PluginKind.TRANSFORMATION,),
    "sluice.predicates": (PluginKind.PREDICATE,),
    "sluice.config_providers": (PluginKind.CONFIG_PROVIDER,),
}

_BASES: list[tuple[type, PluginKind]] = [
    (SourceConnector, PluginKind.SOURCE),
    (SinkConnector, PluginKind.SINK),
    (Converter, PluginKind.CONVERTER),
    (HeaderConverter, PluginKind.HEADER_CONVERTER),
    (Transformation, PluginKind.TRANSFORMATION),
    (Predicate, PluginKind.PREDICATE),
]


def kind_of(cls: type) -> PluginKind | None:
    """The plugin kind a class implements, judged by its base class."""
    for base, kind in _BASES:
        if isinstance(cls, type) and issubclass(cls, base):
            return kind
    if hasattr(cls, "get") and hasattr(cls, "Config") and getattr(cls, "is_config_provider", False):
        return PluginKind.CONFIG_PROVIDER
    return None


@dataclass(frozen=True)
class PluginInfo:
    """One discovered plugin."""

    name: str
    kind: PluginKind
    cls: type
    aliases: tuple[str, ...] = ()
    distribution: str | None = None

    @property
    def class_name(self) -> str:
        """The fully qualified Python name of the class."""
        return f"{self.cls.__module__}.{self.cls.__qualname__}"

    @property
    def version(self) -> str:
        return str(getattr(self.cls, "version", "unknown"))

    def names(self) -> set[str]:
        names = {self.name, self.class_name, f"{self.cls.__module__}:{self.cls.__qualname__}", self.cls.__name__}
        names.update(self.aliases)
        for n in list(names):
            short = n.rsplit(".", 1)[-1]
            names.add(short)
            if short.endswith("Connector"):
                names.add(short[: -len("Connector")])
        return names


@dataclass
class PluginRegistry:
    """All plugins visible to this worker."""

    plugin_path: Sequence[str] = ()
    _plugins: list[PluginInfo] = field(default_factory=list)
    _by_name: dict[tuple[PluginKind, str], PluginInfo] = field(default_factory=dict)
    _roots: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._roots = [Path(d).resolve() for d in self.plugin_path if d]
        for directory in self.plugin_path:
            if directory and directory not in sys.path:
                sys.path.insert(0, directory)
        self._discover()

    def _discover(self) -> None:
        for group, kinds in ENTRY_POINT_GROUPS.items():
            for ep in entry_points(group=group):
                try:
                    cls = ep.load()
                except Exception as exc:  # a broken third-party plugin must not stop the worker
                    log.error("Cannot load plugin %s from entry point %s: %s", ep.name, ep.value, exc)
                    continue
                kind = kind_of(cls) or kinds[0]
                if kind not in kinds:
                    log.error("Entry point %s in group %s is a %s, not a %s; ignored", ep.name, group, kind.value, kinds[0].value)
                    continue
                dist = getattr(ep, "dist", None)
                self._register(
                    PluginInfo(
                        name=ep.name,
                        kind=kind,
                        cls=cls,
                        aliases=tuple(getattr(cls, "aliases", ())),
                        distribution=dist.name if dist is not None else None,
                    )
                )

    def _register(self, info: PluginInfo) -> None:
        if any(p.cls is info.cls and p.kind is info.kind for p in self._plugins):
            return
        self._plugins.append(info)
        for name in info.names():
            self._by_name.setdefault((info.kind, name), info)

    # -- queries --------------------------------------------------------------------------------

    def plugins(self, kinds: Iterable[PluginKind] | None = None) -> list[PluginInfo]:
        """Discovered plugins of the given kinds (all kinds by default), sorted by kind then name."""
        wanted = set(kinds) if kinds is not None else set(PluginKind)
        order = list(PluginKind)
        return sorted((p for p in self._plugins if p.kind in wanted), key=lambda p: (order.index(p.kind), p.class_name))

    def find(self, name: str, kinds: Iterable[PluginKind]) -> PluginInfo | None:
        """The plugin of one of ``kinds`` known by ``name``, importing a Python path if needed."""
        kinds = tuple(kinds)
        for kind in kinds:
            info = self._by_name.get((kind, name))
            if info is not None:
                return info
        cls = _import_path(name, self._roots)
        if cls is not None:
            found = kind_of(cls)
            if found is not None and found in kinds:
                info = PluginInfo(name=cls.__name__, kind=found, cls=cls, aliases=tuple(getattr(cls, "aliases", ())))
                self._register(info)
                return info
        return None

    def resolve(self, name: str, kinds: Iterable[PluginKind], key: str) -> PluginInfo:
        """Like :meth:`find`, but raise a :class:`ConfigError` for ``key`` listing the known plugins."""
        kinds = tuple(kinds)
        if not name:
            raise ConfigError(f"Missing required configuration \"{key}\"", key=key)
        info = self.find(name, kinds)
        if info is None:
            known = sorted({p.name for p in self.plugins(kinds)})
            what = " or ".join(k.value for k in kinds)
            close = self.suggest(name, kinds)
            hint = f"Did you mean {' or '.join(close)}? " if close else ""
            raise ConfigError(
                f"Failed to find any class that implements {what} plugin and which name matches {name}. "
                f"{hint}{key} must be one of: {', '.join(known) or '(none installed)'}",
                key=key,
            )
        return info

    def suggest(self, name: str, kinds: Iterable[PluginKind], limit: int = 3) -> list[str]:
        """The plugin names closest to a misspelt ``name`` (over every name and alias of each plugin),
        each plugin given once by the spelling that matched, best first."""
        candidates: dict[str, PluginInfo] = {}
        for info in self.plugins(kinds):
            for known in info.names():
                candidates.setdefault(known, info)
        # Case and package don't matter to a reader: compare short, lower-cased names.
        short = {known.rsplit(".", 1)[-1].rsplit(":", 1)[-1].lower(): known for known in candidates}
        wanted = name.rsplit(".", 1)[-1].rsplit(":", 1)[-1].lower()
        found: list[str] = []
        seen: list[PluginInfo] = []
        for match in difflib.get_close_matches(wanted, list(short), n=limit * 4, cutoff=0.8):
            info = candidates[short[match]]
            if any(info is s for s in seen):
                continue
            seen.append(info)
            found.append(short[match].rsplit(".", 1)[-1].rsplit(":", 1)[-1])
            if len(found) == limit:
                break
        return found

    def connector(self, name: str) -> PluginInfo:
        return self.resolve(name, (PluginKind.SOURCE, PluginKind.SINK), "connector.class")

    def converter(self, name: str, key: str) -> type[Converter]:
        return self.resolve(name, (PluginKind.CONVERTER,), key).cls

    def header_converter(self, name: str, key: str) -> type[HeaderConverter]:
        return self.resolve(name, (PluginKind.HEADER_CONVERTER,), key).cls


def _import_path(name: str, roots: Sequence[Path]) -> Any:
    """Import ``pkg.module.Class`` or ``pkg.module:Class`` from a ``plugin.path`` directory.

    Names arrive from REST clients, so only modules that live under one of ``roots`` are imported:
    importing an arbitrary installed module by name would run its import-time code (some start
    programs or exit the process). ``None`` when the name is not such a class.
    """
    if ":" in name:
        module_name, _, attr = name.partition(":")
    elif "." in name:
        module_name, _, attr = name.rpartition(".")
    else:
        return None
    if not module_name or not all(part.isidentifier() for part in module_name.split(".")):
        return None
    if not _on_plugin_path(module_name.split(".")[0], roots):
        return None
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    except BaseException as exc:  # noqa: BLE001 - a plugin module must not take the worker down (SystemExit too)
        log.warning("Importing plugin module %s failed: %r", module_name, exc)
        return None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if isinstance(obj, type) else None


def _on_plugin_path(top_level: str, roots: Sequence[Path]) -> bool:
    """Whether the top-level module ``top_level`` is found in one of ``roots`` (without importing it)."""
    if not roots:
        return False
    try:
        spec = importlib.util.find_spec(top_level)
    except (ImportError, ValueError):
        return False
    if spec is None:
        return False
    locations = list(spec.submodule_search_locations or []) or ([spec.origin] if spec.origin else [])
    for location in locations:
        path = Path(location).resolve()
        if any(path == root or root in path.parents for root in roots):
            return True
    return False
