"""Logger levels set at runtime (``PUT /admin/loggers/{name}``), and every process that must follow them.

Python's logging is per process, so a level set in the worker reaches task threads but not task
processes (``task.executor=process``). :data:`LOGGER_LEVELS` remembers each level set in this
process, in order, and tells its subscribers: the process executor subscribes for each task
process, hands it the levels set so far when it starts, and sends it every later change over its
control pipe, where the child replays it with :func:`set_logger_level`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

#: The name Connect (and Sluice's REST API) gives the root logger.
ROOT = "root"

#: Connect's (log4j's) level names and the Python level each stands for.
LOG4J_LEVELS = {
    "OFF": logging.CRITICAL + 10,
    "FATAL": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARN": logging.WARNING,
    "INFO": logging.INFO,
    "DEBUG": logging.DEBUG,
    "TRACE": 5,
}


def python_level(name: object) -> int | None:
    """The Python level of a log4j level name (any case), or ``None`` when it names none."""
    return LOG4J_LEVELS.get(name.strip().upper()) if isinstance(name, str) else None

LevelListener = Callable[[str, int], None]


def set_logger_level(name: str, level: int) -> list[str]:
    """Set ``name`` and every existing logger below it to ``level``; the loggers set, ``name`` first.

    Loggers created later inherit the level from ``name`` (they start at NOTSET), as log4j's children do.
    """
    logger = logging.getLogger() if name == ROOT else logging.getLogger(name)
    logger.setLevel(level)
    prefix = f"{name}."
    affected = [name]
    for other, child in list(logging.root.manager.loggerDict.items()):
        if isinstance(child, logging.Logger) and other != name and (name == ROOT or other.startswith(prefix)):
            child.setLevel(level)
            affected.append(other)
    return affected


def apply_logger_levels(levels: Iterable[tuple[str, int]]) -> None:
    """Replay levels set elsewhere (the worker's, in a task process), oldest first."""
    for name, level in levels:
        set_logger_level(name, level)


class LoggerLevelOverrides:
    """The levels set over the API in this process, in the order set, with who to tell about changes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._levels: dict[str, int] = {}  # insertion order is the order set: replaying it rebuilds the state
        self._listeners: list[LevelListener] = []
        self._modified: dict[str, int] = {}  # logger → when a level set here last changed it (ms)

    def set(self, name: str, level: int) -> list[str]:
        """Set ``name`` and its descendants here, remember it, and tell every subscriber."""
        with self._lock:
            affected = set_logger_level(name, level)
            self._levels.pop(name, None)
            self._levels[name] = level
            now = int(time.time() * 1000)
            for logger_name in affected:
                self._modified[logger_name] = now
            # Told under the lock, so every subscriber sees the changes in the order they were made.
            for listener in self._listeners:
                try:
                    listener(name, level)
                except Exception:  # one task process that cannot be told must not fail the request
                    log.exception("Could not pass the level of logger %s on", name)
        return affected

    def last_modified(self, name: str) -> int | None:
        """When a level set here last changed ``name`` (ms since the epoch), or ``None``."""
        with self._lock:
            return self._modified.get(name)

    def current(self) -> list[tuple[str, int]]:
        """Every level set so far, oldest first."""
        with self._lock:
            return list(self._levels.items())

    def subscribe(self, listener: LevelListener) -> tuple[list[tuple[str, int]], Callable[[], None]]:
        """Call ``listener(name, level)`` on each later change; returns the levels set so far (taken
        atomically with the subscription, so nothing falls between them) and the unsubscribe call."""
        with self._lock:
            self._listeners.append(listener)
            levels = list(self._levels.items())

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return levels, unsubscribe


#: This process's overrides (logging itself is per process).
LOGGER_LEVELS = LoggerLevelOverrides()


def apply_cluster_logger_level(name: str, level: str) -> None:
    """A ``logger-cluster-<name>`` record read from the config topic (KIP-976): set it in this
    worker and its task processes. A level that is not a log4j name is logged and skipped."""
    value = python_level(level)
    if value is None:
        log.error("Ignoring the cluster-wide level %r of logger %s: not a log level", level, name)
        return
    log.info("Setting logger %s to %s, as asked for the whole cluster", name, level)
    LOGGER_LEVELS.set(name, value)
