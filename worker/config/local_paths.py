"""Confinement of the local files and directories a connector names (``connector.allowed.paths``).

Whoever may create a connector decides which file a FileStreamSource copies into a topic and which
file a FileStreamSink appends to, so the worker grants connectors a few directories and nothing
else (:class:`PathGrant`):

* **Deny by default.** ``connector.allowed.paths`` unset means ``<state.dir>/data`` (``state.dir``
  defaults to ``$XDG_STATE_HOME/sluice``, else ``~/.local/state/sluice``); "anywhere" must be
  written out as ``connector.allowed.paths=*``.
* **Never the worker's own files.** An allowed path may neither contain nor lie inside a
  :func:`protected place <protected_places>`: ``plugin.path``, the installation (``sys.prefix``,
  site-packages, the ``sluice`` package), every ``sys.path`` entry, the worker's config file, its
  offset file and other files its keys name, a config provider's ``allowed.paths``; nor contain
  ``state.dir``. :func:`check_no_overlap` refuses such a worker at start, naming both paths. With
  ``*`` the protected places are still refused, at validation and at every open.
* **Checked when validated and when opened.** Keys typed :data:`~connectors.api.LocalPath` (and
  the files a config reports through ``PluginConfig.local_paths()``) are checked when a config is
  validated, resolved with :func:`os.path.realpath` so neither ``..`` nor a symlink leads out. The
  file system may change afterwards, so tasks open files through :meth:`PathGrant.open` (the SPI's
  :class:`~connectors.api.LocalFiles`, handed to every task as ``context.local_files``), which
  resolves the path again, opens the last component relative to a verified directory descriptor
  without following a symlink out of the grant, and checks what the descriptor really is through
  ``/proc/self/fd``. Config providers (``${file:}``, ``${dir:}``) open files the same way.

What this does not cover: a hard link inside an allowed directory to a file outside it is the same
file (the kernel's ``fs.protected_hardlinks`` keeps users from linking files they do not own), and
only files a connector declares as :data:`~connectors.api.LocalPath` or reports are checked at
validation; a connector that calls :func:`open` itself is confined only by the task host's sandbox.
"""

from __future__ import annotations

import errno
import logging
import multiprocessing
import os
import site
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NamedTuple

import sluice
from sluice.connectors.api import ConfigError
from sluice.worker.config.models import WorkerConfig

log = logging.getLogger(__name__)

ALLOWED_PATHS_KEY = "connector.allowed.paths"
STATE_DIR_KEY = "state.dir"
#: The ``connector.allowed.paths`` value that grants every path but the protected places.
ANYWHERE = "*"
#: The directory below ``state.dir`` that connectors get when ``connector.allowed.paths`` is unset.
DATA_DIR_NAME = "data"
#: Worker keys whose names end so name one of the worker's own files (a TLS key, the users file,
#: an offset file): never a connector's to read or write.
_FILE_KEY_SUFFIXES = ("file", ".filename", ".location", ".keytab", ".dir")
_PROVIDER_PATHS_SUFFIX = ".param.allowed.paths"
#: Symlinks followed inside the grant before an open gives up (Linux's own limit is 40).
_MAX_SYMLINKS = 16
# O_PATH opens a directory that is searchable but not readable, and reads nothing from it.
_DIR_FLAGS = (os.O_PATH if sys.platform == "linux" else os.O_RDONLY) | os.O_DIRECTORY | os.O_CLOEXEC


def default_state_dir() -> str:
    """Where a worker keeps its state without ``state.dir``: ``$XDG_STATE_HOME/sluice``, else
    ``~/.local/state/sluice`` (the XDG base-directory default)."""
    base = os.environ.get("XDG_STATE_HOME", "").strip()
    if not base or not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "sluice")


def state_dir(config: WorkerConfig) -> Path:
    """The worker's ``state.dir`` (absolute: a relative one is refused)."""
    value = (config.state_dir or "").strip() or default_state_dir()
    if not os.path.isabs(value):
        raise ConfigError(f"{STATE_DIR_KEY} must be an absolute path, got {value!r}", key=STATE_DIR_KEY)
    return Path(value)


def default_data_dir(config: WorkerConfig) -> Path:
    """``<state.dir>/data``: what connectors may use when ``connector.allowed.paths`` is unset."""
    return state_dir(config) / DATA_DIR_NAME


def allowed_roots(setting: str) -> tuple[Path, ...]:
    """The directories (or files) of an explicit ``connector.allowed.paths`` value, each resolved.

    Raises :class:`ConfigError` for the worker key when an entry is not absolute — a relative one
    would mean something different for every working directory the worker is started from — or
    when ``*`` is mixed with paths.
    """
    roots = []
    for entry in (p.strip() for p in setting.split(",")):
        if not entry:
            continue
        if entry == ANYWHERE:
            raise ConfigError(f"{ALLOWED_PATHS_KEY}: '*' means anywhere and stands alone", key=ALLOWED_PATHS_KEY)
        if not os.path.isabs(entry):
            raise ConfigError(f"{ALLOWED_PATHS_KEY} must list absolute paths, got {entry!r}", key=ALLOWED_PATHS_KEY)
        roots.append(Path(os.path.realpath(entry)))
    return tuple(roots)


class ProtectedPlace(NamedTuple):
    """A path no connector may reach, and what it is (for the error that names it)."""

    what: str
    path: Path
    #: Allowed paths may lie inside it (``state.dir``, whose ``data`` folder is the default grant),
    #: but never contain it.
    inside_ok: bool = False


def protected_places(config: WorkerConfig, config_file: str | None = None) -> tuple[ProtectedPlace, ...]:
    """Everything a connector must never read or write: code the worker may import, and its own files.

    ``plugin.path`` entries, the installation (``sys.prefix``, ``sys.exec_prefix``, the
    interpreter's library and site-packages directories, the ``sluice`` package), every
    ``sys.path`` entry (a module written there is imported by the next ``import`` of its name), the
    worker's config file, the files and directories its keys name (``offset.storage.file.filename``,
    ``listeners.https.ssl.keyfile``, ``rest.auth.basic.users.file``, client ``*.location`` files, …),
    each config provider's ``allowed.paths`` (the operator's secrets) and ``state.dir`` (allowed
    paths may lie inside it, not contain it). All resolved; places that do not exist yet count too.
    """
    places: list[ProtectedPlace] = []

    def add(what: str, value: str | os.PathLike[str] | None, inside_ok: bool = False) -> None:
        if value is None or not str(value).strip():
            return
        places.append(
            ProtectedPlace(what, Path(os.path.realpath(os.path.join(os.getcwd(), str(value).strip()))), inside_ok)
        )

    for entry in config.plugin_path.split(","):
        add("plugin.path", entry)
    add("the installation (sys.prefix)", sys.prefix)
    add("the installation (sys.exec_prefix)", sys.exec_prefix)
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        add(f"the installation ({name})", sysconfig.get_paths().get(name))
    for entry in site.getsitepackages():
        add("the installation (site-packages)", entry)
    add("the installation (user site-packages)", site.getusersitepackages())
    for entry in sluice.__path__:
        add("the installation (the sluice package)", entry)
        # A development install links the subpackages in from elsewhere; protect where they really are.
        with os.scandir(entry) as children:
            for child in children:
                if child.is_dir():
                    add("the installation (the sluice package)", child.path)
    for entry in sys.path:
        add("the Python path (sys.path)", entry or os.getcwd())
    add("the worker's config file", config_file or config.worker_config_file)
    for key, value in sorted(config.raw.items()):
        if not isinstance(value, str) or key == STATE_DIR_KEY:
            continue
        if key.endswith(_PROVIDER_PATHS_SUFFIX):
            for entry in value.split(","):
                add(key, entry)
        elif key.endswith(_FILE_KEY_SUFFIXES) and not key.startswith("connector."):
            add(key, value)
    add(STATE_DIR_KEY, state_dir(config), inside_ok=True)
    # One entry per path and reason, in a stable order.
    return tuple(dict.fromkeys(places))


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


@dataclass(frozen=True)
class PathGrant:
    """The local paths connectors may use: :class:`~connectors.api.LocalFiles` for the worker.

    ``roots`` are resolved directories (or files); ``anywhere`` grants every path instead. Either
    way nothing inside or containing a ``protected`` place is granted (except inside a place marked
    ``inside_ok``). An empty grant (no roots, not anywhere) refuses everything.
    """

    roots: tuple[Path, ...] = ()
    anywhere: bool = False
    protected: tuple[ProtectedPlace, ...] = ()
    #: What a refusal says the path is outside of.
    granted_by: str = f"the directories this worker lets connectors use (the worker's {ALLOWED_PATHS_KEY})"

    @classmethod
    def from_worker_config(cls, config: WorkerConfig, config_file: str | None = None) -> PathGrant:
        """The grant of ``connector.allowed.paths`` (unset: ``<state.dir>/data``; ``*``: anywhere).

        Raises :class:`ConfigError` naming the worker key when an entry is relative, or when an
        allowed path overlaps a protected place (see :func:`check_no_overlap`).
        """
        setting = (config.connector_allowed_paths or "").strip()
        protected = protected_places(config, config_file)
        if setting == ANYWHERE:
            return cls((), True, protected)
        roots = allowed_roots(setting) if setting else (Path(os.path.realpath(default_data_dir(config))),)
        check_no_overlap(roots, protected, explicit=bool(setting))
        return cls(roots, False, protected)

    def permits(self, real: Path) -> bool:
        """Whether the resolved path ``real`` is granted."""
        for place in self.protected:
            if place.path.is_relative_to(real) or (_inside(real, place.path) and not place.inside_ok):
                return False
        return self.anywhere or any(_inside(real, root) for root in self.roots)

    def check(self, config: Mapping[str, Any], path_keys: Iterable[str]) -> None:
        """Refuse a connector config whose local-path keys lead outside the grant.

        ``config`` holds resolved values. Raises :class:`ConfigError` naming the first offending
        key. The message quotes the value as given, never what it resolves to: a symlink's target
        says something about the worker's file system that the caller did not write.
        """
        for key in sorted(path_keys):
            value = config.get(key)
            if not isinstance(value, str) or not value.strip():
                continue  # unset or empty: not a path (the file connectors use stdin/stdout then)
            if "\0" in value:
                raise ConfigError(f"{key}: a path cannot contain a NUL character", key=key)
            # Relative paths are opened from the worker's working directory, so they are checked from there.
            if not self.permits(Path(os.path.realpath(os.path.join(os.getcwd(), value)))):
                raise self._refused(key, value)

    def open(
        self,
        path: str,
        mode: str = "rb",
        *,
        key: str,
        encoding: str | None = None,
        errors: str | None = None,
        newline: str | None = None,
        buffering: int = -1,
    ) -> IO[Any]:
        """Open ``path`` if it is granted now (see :class:`~connectors.api.LocalFiles`).

        The directory is resolved, opened and its descriptor's real path checked; the last
        component is then opened relative to that descriptor with ``O_NOFOLLOW``. A symlink there
        is read and its target checked and opened the same way, so a link leading out of the grant
        is refused before anything outside is opened or created. The opened descriptor's real path
        is checked last, then it becomes a file object as :func:`open` would return it.
        """
        if "\0" in path:
            raise ConfigError(f"{key}: a path cannot contain a NUL character", key=key)
        flags = _open_flags(mode)
        target = os.path.join(os.getcwd(), path)
        for _ in range(_MAX_SYMLINKS):
            fd, link = self._open_once(target, flags, key, path)
            if fd is None:
                target = link
                continue
            os.set_blocking(fd, True)  # opened non-blocking only so that a FIFO cannot hang the open
            try:
                return os.fdopen(fd, mode, buffering=buffering, encoding=encoding, errors=errors, newline=newline)
            except BaseException:
                os.close(fd)
                raise
        raise ConfigError(f"{key}: {path!r} leads through too many symbolic links", key=key)

    def _open_once(self, target: str, flags: int, key: str, given: str) -> tuple[int | None, str]:
        """Open ``target`` once: ``(fd, "")``, or ``(None, next target)`` when it is a symlink."""
        parent, name = os.path.split(target)
        if name in ("", ".", ".."):
            # A path naming a directory: resolve it whole; opening it as a file then fails as open() does.
            parent, name = os.path.split(os.path.realpath(target))
        real_parent = Path(os.path.realpath(parent or "/"))
        candidate = real_parent / name
        if not self.permits(candidate):
            raise self._refused(key, given)
        dir_fd = os.open(real_parent, _DIR_FLAGS)
        try:
            # A directory swapped for a symlink between realpath and open shows here.
            if _descriptor_path(dir_fd) not in (None, real_parent):
                raise self._refused(key, given)
            try:
                fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o666, dir_fd=dir_fd)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                # The last component is a symlink: follow it only through the checks above again.
                return None, os.path.join(real_parent, os.readlink(name, dir_fd=dir_fd))
        finally:
            os.close(dir_fd)
        real = _descriptor_path(fd)
        if real is not None and not self.permits(real):
            os.close(fd)
            raise self._refused(key, given)
        return fd, ""

    def _refused(self, key: str, value: str) -> ConfigError:
        return ConfigError(f"{key}: {value!r} is outside {self.granted_by}", key=key)


#: A grant of nothing: what a task gets from a runtime that was given no grant.
NO_LOCAL_FILES = PathGrant()


def check_no_overlap(roots: Sequence[Path], protected: Sequence[ProtectedPlace], *, explicit: bool = True) -> None:
    """Refuse allowed paths that contain or lie inside a protected place, naming both paths.

    ``explicit`` says whether ``roots`` came from ``connector.allowed.paths`` or are the default
    (``<state.dir>/data``); the message says which, so the operator knows what to change.
    """
    source = ALLOWED_PATHS_KEY if explicit else f"{ALLOWED_PATHS_KEY} (unset: <{STATE_DIR_KEY}>/{DATA_DIR_NAME})"
    for root in roots:
        for place in protected:
            if root.is_relative_to(place.path) and not (place.inside_ok and root != place.path):
                relation = "is" if root == place.path else "lies inside"
            elif place.path.is_relative_to(root):
                relation = "contains"
            else:
                continue
            raise ConfigError(
                f"{source}: the allowed path {root} {relation} {place.what} {place.path}; connectors must not "
                "reach the worker's code, configuration or state, so an allowed path may neither contain nor "
                "lie inside them",
                key=ALLOWED_PATHS_KEY,
            )


def check_local_paths(config: Mapping[str, Any], path_keys: Iterable[str], grant: PathGrant) -> None:
    """Refuse a connector config whose local-path keys lead outside ``grant`` (:meth:`PathGrant.check`)."""
    grant.check(config, path_keys)


def create_data_dir(config: WorkerConfig) -> None:
    """Create ``<state.dir>/data`` (owner-only) when it is the grant, so a file sink can write there
    from the start; a worker started by the ``sluice`` command calls this once."""
    if (config.connector_allowed_paths or "").strip():
        return
    data = default_data_dir(config)
    try:
        data.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"Cannot create {data} ({STATE_DIR_KEY}/{DATA_DIR_NAME}): {exc.strerror or exc}", key=STATE_DIR_KEY
        ) from None


def warn_if_unconfined(config: WorkerConfig, grant: PathGrant) -> None:
    """Log a WARNING when any REST caller could point connectors at (almost) any local file.

    Only in the worker process itself: task processes build a worker of their own from the same
    config, and one warning per task restart would bury it.
    """
    if not grant.anywhere or config.listener_is_loopback or multiprocessing.parent_process() is not None:
        return
    log.warning(
        "%s=* and the REST listener %s is reachable from other hosts: anyone who may create connectors can "
        "make this worker read or write any file its user can (a FileStreamSource with file=/etc/passwd) "
        "except the worker's own code and files. Set %s to the directories connectors may use.",
        ALLOWED_PATHS_KEY,
        config.listeners.split(",")[0].strip(),
        ALLOWED_PATHS_KEY,
    )


def _open_flags(mode: str) -> int:
    """The :func:`os.open` flags of a :func:`open` mode (``r``, ``w``, ``a``, ``x``, ``+``, ``b``, ``t``)."""
    kinds = [c for c in mode if c in "rwax"]
    if len(kinds) != 1 or set(mode) - set("rwaxbt+") or len(set(mode)) != len(mode):
        raise ValueError(f"invalid mode: {mode!r}")
    access = os.O_RDWR if "+" in mode else (os.O_RDONLY if kinds[0] == "r" else os.O_WRONLY)
    return (
        access
        | {"r": 0, "w": os.O_CREAT | os.O_TRUNC, "a": os.O_CREAT | os.O_APPEND, "x": os.O_CREAT | os.O_EXCL}[kinds[0]]
    )


def _descriptor_path(fd: int) -> Path | None:
    """What ``fd`` really is, from ``/proc/self/fd`` (``None`` where there is no /proc)."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None
