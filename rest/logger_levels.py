"""Runtime log levels of this worker's loggers (Connect's ``/admin/loggers``, KIP-495).

Levels are spelled as Connect (log4j) spells them; Python's levels map onto them.
"""

from __future__ import annotations

import logging

from sluice.connectors.api import NotFoundError
from sluice.worker.herder import BadRequest
from sluice.worker.observability.log_levels import LOG4J_LEVELS, LOGGER_LEVELS, ROOT, python_level

_FROM_PYTHON = {v: k for k, v in LOG4J_LEVELS.items()}


def connect_level(level: int) -> str:
    """The log4j name of a Python level (levels between two names round down to the finer one)."""
    for value in sorted(_FROM_PYTHON, reverse=True):
        if level >= value:
            return _FROM_PYTHON[value]
    return "TRACE"


class LoggerLevels:
    """Reads and sets logger levels; when each was set over the API is kept with the levels
    themselves (:data:`sluice.worker.observability.log_levels.LOGGER_LEVELS`), so cluster-wide changes show it too."""

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
        return {"level": connect_level(logger.getEffectiveLevel()), "last_modified": LOGGER_LEVELS.last_modified(name)}

    def set_level(self, name: str, level: str) -> list[str]:
        """Set ``name`` and its descendants to ``level`` in this worker and its task processes;
        returns the loggers affected here, sorted."""
        value = self.parse_level(level)
        # Through the process-wide record, so task processes (task.executor=process) follow it too.
        return sorted(LOGGER_LEVELS.set(name, value))

    @staticmethod
    def parse_level(level: object) -> int:
        """The Python level of a log4j level name; :class:`BadRequest` for anything else."""
        value = python_level(level)
        if value is None:
            raise BadRequest(f"Invalid log level '{level}'.")
        return value
