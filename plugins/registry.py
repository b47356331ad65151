"""The plugin registry.

Every plugin is discovered when the registry is built, never while a request is answered:

- through Python entry points in the groups of :data:`ENTRY_POINT_GROUPS` (built-ins included, and
  packages installed with ``pip install --target`` into a ``plugin.path`` directory);
- by a scan of the ``plugin.path`` directories, which imports every module the operator put there
  and registers the plugin classes they define.

A plugin can then be named by its entry-point name (``FileStreamSource``), by any of its ``aliases``
(Kafka Connect class names such as ``org.apache.kafka.connect.json.JsonConverter``), by its Python
path (``package.module.Class`` or ``package.module:Class``), or by its class name with or without
the ``Connector`` suffix, as Connect accepts. A name that is none of these is unknown: a REST client
naming a module makes the worker import nothing, so a file that appears in ``plugin.path`` later
runs no code until the operator asks for a :meth:`PluginRegistry.refresh` (``kill -HUP``).
"""

from __future__ import annotations

import difflib
import enum
import importlib
import inspect
import logging
import pkgutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import distributions, entry_points
from pathlib import Path
from types import ModuleType

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


def kinds_of(cls: type) -> list[PluginKind]:
    """Every plugin kind a class implements, judged by its base classes (in :class:`PluginKind` order).

    A class may implement several, as Connect's ``JsonConverter`` is both a converter and a header
    converter: it is then registered, listed and found under each.
    """
    kinds = [kind for base, kind in _BASES if isinstance(cls, type) and issubclass(cls, base)]
    if not kinds and hasattr(cls, "get") and hasattr(cls, "Config") and getattr(cls, "is_config_provider", False):
        kinds.append(PluginKind.CONFIG_PROVIDER)
    return kinds


def kind_of(cls: type) -> PluginKind | None:
    """The first plugin kind a class implements, judged by its base class."""
    kinds = kinds_of(cls)
    return kinds[0] if kinds else None


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
    """All plugins visible to this worker, discovered once when it is built.

    ``path_modules`` replaces the scan of ``plugin_path`` with the import of exactly these modules:
    a task host process gets the list its worker discovered, so a module that appeared in
    ``plugin.path`` since the worker's last scan is not imported when a task starts.
    """

    plugin_path: Sequence[str] = ()
    path_modules: Sequence[str] | None = None
    _plugins: list[PluginInfo] = field(default_factory=list)
    _by_name: dict[tuple[PluginKind, str], PluginInfo] = field(default_factory=dict)
    _roots: list[_PluginRoot] = field(default_factory=list)
    _imported: dict[str, ModuleType] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._roots = [_plugin_root(Path(d)) for d in self.plugin_path if d]
        for root in self._roots:
            if str(root.search_path) not in sys.path:
                sys.path.insert(0, str(root.search_path))
        self._discover()
        if self.path_modules is None:
            self._scan_plugin_path()
        else:
            self.adopt(self.path_modules)

    def _discover(self) -> None:
        for group, kinds in ENTRY_POINT_GROUPS.items():
            for ep in entry_points(group=group):
                try:
                    cls = ep.load()
                except Exception as exc:  # noqa: BLE001 - a broken third-party plugin must not stop the worker
                    log.error("Cannot load plugin %s from entry point %s: %s", ep.name, ep.value, exc)
                    continue
                implemented = kinds_of(cls)
                # The group names the kind: a converter class that is a header converter too (as
                # Connect's JsonConverter) is listed in both groups and registered under each.
                kind = next((k for k in kinds if k in implemented), None if implemented else kinds[0])
                if kind is None:
                    log.error(
                        "Entry point %s in group %s is a %s, not a %s; ignored",
                        ep.name,
                        group,
                        implemented[0].value,
                        kinds[0].value,
                    )
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

    def _register(self, info: PluginInfo, extra_names: Iterable[str] = ()) -> bool:
        """Add ``info`` (``False`` when its class was registered already: only ``extra_names`` are added)."""
        known = next((p for p in self._plugins if p.cls is info.cls and p.kind is info.kind), None)
        added = known is None
        if known is None:
            self._plugins.append(info)
            known = info
        for name in (*info.names(), *extra_names) if added else extra_names:
            self._by_name.setdefault((known.kind, name), known)
        return added

    # -- plugin.path --------------------------------------------------------------------------

    @property
    def imported_path_modules(self) -> list[str]:
        """The modules imported from ``plugin.path`` so far, in import order (for task hosts)."""
        return list(self._imported)

    def refresh(self) -> list[PluginInfo]:
        """Scan ``plugin.path`` again and register the plugins of modules not imported before.

        The operator's explicit act (``kill -HUP`` on the worker): nothing a REST client sends
        leads here. A module imported before is not imported again, so a changed module needs a
        restart; a module that failed before is tried again. Returns (and logs) what was added.
        """
        added = self._scan_plugin_path()
        for info in added:
            log.info("Plugin refresh: added %s %s (%s)", info.kind.value, info.name, info.class_name)
        log.info(
            "Plugin refresh of %s: %d plugin(s) added", ", ".join(self.plugin_path) or "(no plugin.path)", len(added)
        )
        return added

    def adopt(self, modules: Iterable[str]) -> list[PluginInfo]:
        """Import exactly ``modules`` (names another registry's scan found in ``plugin.path``), no scan."""
        importlib.invalidate_caches()
        added: list[PluginInfo] = []
        for name in modules:
            for root in self._roots:
                if root.owns_name(name):
                    added += self._import_and_register(name, root)
                    break
            else:
                log.warning("Plugin module %s is not under plugin.path here; not imported", name)
        return added

    def _scan_plugin_path(self) -> list[PluginInfo]:
        # A file created a moment ago may be missing from the import system's cached listings.
        importlib.invalidate_caches()
        added: list[PluginInfo] = []
        for root in self._roots:
            for name in root.module_names():
                added += self._import_and_register(name, root)
        return added

    def _import_and_register(self, name: str, root: _PluginRoot) -> list[PluginInfo]:
        if name in self._imported:
            return []
        try:
            module = importlib.import_module(name)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - an operator's broken module must not take the worker down
            log.error("Cannot import plugin module %s from %s: %r", name, root.directory, exc)
            return []
        if not root.owns_file(getattr(module, "__file__", None)):
            # Already imported from elsewhere (a same-named standard or installed module): not ours.
            log.warning("Module %s in plugin.path %s is shadowed by %s; ignored", name, root.directory, module)
            return []
        self._imported[name] = module
        added: list[PluginInfo] = []
        for attr, obj in sorted(vars(module).items()):
            if not isinstance(obj, type) or inspect.isabstract(obj) or not self._from_plugin_path(obj):
                continue  # imported from elsewhere (the SPI's own bases), or not concrete
            for kind in kinds_of(obj):
                info = PluginInfo(name=obj.__name__, kind=kind, cls=obj, aliases=tuple(getattr(obj, "aliases", ())))
                # Re-exported by a package (pkg.Class for pkg.module.Class): both paths name it.
                if self._register(info, extra_names=(f"{name}.{attr}", f"{name}:{attr}")):
                    added.append(info)
        return added

    def _from_plugin_path(self, cls: type) -> bool:
        """Whether ``cls`` is defined in a module of a ``plugin.path`` directory."""
        module = sys.modules.get(cls.__module__)
        location = getattr(module, "__file__", None)
        return any(root.owns_file(location) for root in self._roots)

    # -- queries --------------------------------------------------------------------------------

    def plugins(self, kinds: Iterable[PluginKind] | None = None) -> list[PluginInfo]:
        """Discovered plugins of the given kinds (all kinds by default), sorted by kind then name."""
        wanted = set(kinds) if kinds is not None else set(PluginKind)
        order = list(PluginKind)
        return sorted((p for p in self._plugins if p.kind in wanted), key=lambda p: (order.index(p.kind), p.class_name))

    def find(self, name: str, kinds: Iterable[PluginKind]) -> PluginInfo | None:
        """The discovered plugin of one of ``kinds`` known by ``name``; never imports anything."""
        for kind in kinds:
            info = self._by_name.get((kind, name))
            if info is not None:
                return info
        return None

    def resolve(self, name: str, kinds: Iterable[PluginKind], key: str) -> PluginInfo:
        """Like :meth:`find`, but raise a :class:`ConfigError` for ``key`` listing the known plugins."""
        kinds = tuple(kinds)
        if not name:
            raise ConfigError(f'Missing required configuration "{key}"', key=key)
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


@dataclass(frozen=True)
class _PluginRoot:
    """One ``plugin.path`` entry: a directory of plugin modules and packages, or a package directory.

    A package directory (one with ``__init__.py``) is scanned as that package, named as its
    ancestors that are packages too name it: ``/repo/tests/plugins`` is ``tests.plugins`` and
    ``/repo`` goes on ``sys.path``. A plain directory goes on ``sys.path`` itself and every module
    and package in it is scanned.
    """

    directory: Path
    search_path: Path
    package: str | None

    def module_names(self) -> list[str]:
        """Every module under this entry, packages before their modules, ``__main__`` left out
        (it runs a program, it defines no plugin). What ``pip install --target`` put in the
        directory is left out too: such a distribution declares its plugins as entry points, and
        its dependencies define none (walking them would import whole libraries)."""
        if self.package is not None:
            return [self.package, *_walk([str(self.directory)], f"{self.package}.")]
        installed = _installed_top_levels(self.directory)
        return [name for name in _walk([str(self.directory)], "") if name.split(".")[0] not in installed]

    def owns_name(self, name: str) -> bool:
        """Whether ``name`` is a module this entry's scan can yield."""
        if self.package is not None:
            return name == self.package or name.startswith(f"{self.package}.")
        top = self.directory / name.split(".")[0]
        return top.with_suffix(".py").is_file() or (top / "__init__.py").is_file()

    def owns_file(self, location: str | None) -> bool:
        """Whether a module's ``__file__`` lies in this entry."""
        if not location:
            return False
        path = Path(location).resolve()
        return self.directory in path.parents


def _plugin_root(directory: Path) -> _PluginRoot:
    directory = directory.resolve()
    if not (directory / "__init__.py").is_file():
        return _PluginRoot(directory, directory, None)
    parts = [directory.name]
    search_path = directory.parent
    while (search_path / "__init__.py").is_file():
        parts.insert(0, search_path.name)
        search_path = search_path.parent
    return _PluginRoot(directory, search_path, ".".join(parts))


def _walk(path: list[str], prefix: str) -> list[str]:
    """Module names under ``path`` (recursively, without importing anything), sorted per level."""
    names: list[str] = []
    for found in sorted(pkgutil.iter_modules(path, prefix), key=lambda m: m.name):
        if found.name.rsplit(".", 1)[-1] == "__main__" or not all(p.isidentifier() for p in found.name.split(".")):
            continue
        names.append(found.name)
        if found.ispkg:
            names += _walk([str(Path(path[0]) / found.name.rsplit(".", 1)[-1])], f"{found.name}.")
    return names


def _installed_top_levels(directory: Path) -> set[str]:
    """Top-level module names of the distributions installed into ``directory`` (their dist-info)."""
    names: set[str] = set()
    for dist in distributions(path=[str(directory)]):
        listed = dist.read_text("top_level.txt")
        if listed:
            names.update(line.strip() for line in listed.splitlines() if line.strip())
            continue
        for file in dist.files or ():
            top = file.parts[0] if file.parts else ""
            if top and not top.endswith((".dist-info", ".egg-info", ".data")) and top != "..":
                names.add(top.removesuffix(".py"))
    return names
