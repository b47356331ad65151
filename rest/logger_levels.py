"""Runtime log levels of this worker's loggers (Connect's ``/admin/loggers``, KIP-495).

Levels are spelled as Connect (log4j) spells them; Python's levels map onto them.
"""

from __future__ import annotations

import logging
import threading
import time

from connectors.api import NotFoundError
from worker.herder import BadRequest

_TO_PYTHON = {
    "OFF": logging.CRITICAL + 10,
    "FATAL": logging.CRITICAL,
    "ERROR": logging.ERROR,
    "WARN": logging.WARNING,
    "INFO": logging.INFO,
    "DEBUG": logging.DEBUG,
    "TRACE": 5,
}
_FROM_PYTHON = {v: k for k, v in _TO_PYTHON.items()}

ROOT = "root"


def connect_level(level: int) -> str:
    """The log4j name of a Python level (levels between two names round down to the finer one)."""
    for value in sorted(_FROM_PYTHON, reverse=True):
        if level >= value:
            return _FROM_PYTHON[value]
    return "TRACE"


class LoggerLevels:
    """Reads and sets logger levels, remembering when each was set over the API."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._modified: dict[str, int] = {}

    @staticmethod
    def _logger(name: str) -> logging.Logger:
        return logging.getLogger() if name == ROOT else logging.getLogger(name)

    def all(self) -> dict[str, dict[str, object]]:
        """The root logger and every logger with an explicit level: ``{name: {level, last_modified}}``."""
        result: dict[str, dict[str, object]] = {ROOT: self.level(ROOT)}
        for name, logger in sorted(logging.root.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET:
                result[name] = self.level(name)
        return result

    def level(self, name: str) -> dict[str, object]:
        """The effective level of ``name``; unknown loggers are a 404 as in Connect."""
        if name != ROOT and name not in logging.root.manager.loggerDict:
            raise NotFoundError(f"Logger {name} not found.")
        logger = self._logger(name)
        with self._lock:
            modified = self._modified.get(name)
        return {"level": connect_level(logger.getEffectiveLevel()), "last_modified": modified}

    def set_level(self, name: str, level: str) -> list[str]:
        """Set ``name`` and its descendants to ``level``; returns the loggers affected, sorted."""
        value = _TO_PYTHON.get(level.strip().upper()) if isinstance(level, str) else None
        if value is None:
            raise BadRequest(f"Invalid log level '{level}'.")
        prefix = "" if name == ROOT else f"{name}."
        affected = [name]
        self._logger(name).setLevel(value)
        for other, logger in list(logging.root.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger) and (name == ROOT or other.startswith(prefix)) and other != name:
                logger.setLevel(value)
                affected.append(other)
        now = int(time.time() * 1000)
        with self._lock:
            for logger_name in affected:
                self._modified[logger_name] = now
        return sorted(affected)
