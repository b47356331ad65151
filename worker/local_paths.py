"""Confinement of the local files and directories a connector config names (``connector.allowed.paths``).

Whoever may create a connector decides which file a FileStreamSource copies into a topic and which
file a FileStreamSink appends to. Connector keys typed :data:`sluice.connectors.api.LocalPath` (listed by
``PluginConfig.path_keys()``) are therefore checked when a config is validated: once made absolute
against the worker's working directory and resolved with :func:`os.path.realpath` — so neither
``..`` nor a symlink leads out — the path must be one of the worker's ``connector.allowed.paths``
or lie below one. Empty ``connector.allowed.paths`` allows any path, as before this setting existed;
:func:`warn_if_unconfined` says so at startup when the REST listener is reachable from other hosts.

What this does not cover: a symlink created inside an allowed directory *after* validation is
followed when the task opens the file (the check is not repeated at every open), and it confines
only keys that a connector declares as :data:`~connectors.api.LocalPath`.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sluice.connectors.api import ConfigError
from sluice.worker.config import WorkerConfig

log = logging.getLogger(__name__)

ALLOWED_PATHS_KEY = "connector.allowed.paths"


def allowed_roots(setting: str) -> tuple[Path, ...]:
    """The directories (or files) of a ``connector.allowed.paths`` value, each resolved.

    Raises :class:`ConfigError` for the worker key when an entry is not absolute: a relative one
    would mean something different for every working directory the worker is started from.
    """
    roots = []
    for entry in (p.strip() for p in setting.split(",")):
        if not entry:
            continue
        if not os.path.isabs(entry):
            raise ConfigError(f"{ALLOWED_PATHS_KEY} must list absolute paths, got {entry!r}", key=ALLOWED_PATHS_KEY)
        roots.append(Path(os.path.realpath(entry)))
    return tuple(roots)


def check_local_paths(config: Mapping[str, Any], path_keys: Iterable[str], allowed: Sequence[Path]) -> None:
    """Refuse a connector config whose local-path keys lead outside ``allowed`` (no roots: no limit).

    ``config`` holds resolved values. Raises :class:`ConfigError` naming the first offending key. The
    message quotes the value as given, never what it resolves to: a symlink's target says something
    about the worker's file system that the caller did not write.
    """
    if not allowed:
        return
    for key in sorted(path_keys):
        value = config.get(key)
        if not isinstance(value, str) or not value.strip():
            continue  # unset or empty: not a path (the file connectors use stdin/stdout then)
        if "\0" in value:
            raise ConfigError(f"{key}: a path cannot contain a NUL character", key=key)
        # Relative paths are opened from the worker's working directory, so they are checked from there.
        real = Path(os.path.realpath(os.path.join(os.getcwd(), value)))
        if not any(real == root or root in real.parents for root in allowed):
            raise ConfigError(
                f"{key}: {value!r} is outside the directories this worker lets connectors use "
                f"(the worker's {ALLOWED_PATHS_KEY})",
                key=key,
            )


def warn_if_unconfined(config: WorkerConfig, allowed: Sequence[Path]) -> None:
    """Log a WARNING when any REST caller could point connectors at any local file.

    Only in the worker process itself: task processes build a worker of their own from the same
    config, and one warning per task restart would bury it.
    """
    if allowed or config.listener_is_loopback or multiprocessing.parent_process() is not None:
        return
    log.warning(
        "%s is not set and the REST listener %s is reachable from other hosts: anyone who may create "
        "connectors can make this worker read or write any file its user can (a FileStreamSource with "
        "file=/etc/passwd). Set %s to the directories connectors may use.",
        ALLOWED_PATHS_KEY,
        config.listeners.split(",")[0].strip(),
        ALLOWED_PATHS_KEY,
    )
