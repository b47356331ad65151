"""Sorting database exceptions into what the runtime should do with them.

Every DB-API driver (psycopg, sqlite3, PyMySQL) raises the exception classes PEP 249 names, and
SQLAlchemy wraps them in classes with the same names, so the class names are a driver-neutral
way to tell a dropped connection from a rejected row.
"""

from __future__ import annotations

import enum


class Failure(enum.Enum):
    """What a database exception means for the task."""

    TRANSIENT = "transient"  # the connection dropped or the server is unavailable: retry later
    ROW = "row"  # the database rejected a row's data: find the row, report it
    OTHER = "other"  # schema or SQL problems: fail the task with the database's message


_TRANSIENT = {"OperationalError", "InterfaceError", "DisconnectionError", "TimeoutError", "PoolTimeoutError"}
_ROW = {"IntegrityError", "DataError"}
# Operational errors that are really about the data or the schema, not the connection.
_NOT_TRANSIENT_SQLSTATES = {"22", "23", "28", "3D", "42"}


def classify(exc: BaseException) -> Failure:
    """Classify ``exc`` (a driver or SQLAlchemy exception) by its PEP 249 class names."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    orig = getattr(exc, "orig", None)
    if orig is not None:
        names |= {cls.__name__ for cls in type(orig).__mro__}
    if getattr(exc, "connection_invalidated", False):
        return Failure.TRANSIENT
    sqlstate = getattr(orig if orig is not None else exc, "sqlstate", None)
    if names & _ROW:
        return Failure.ROW
    if names & _TRANSIENT:
        if isinstance(sqlstate, str) and sqlstate[:2] in _NOT_TRANSIENT_SQLSTATES:
            return Failure.ROW if sqlstate[:2] in ("22", "23") else Failure.OTHER
        return Failure.TRANSIENT
    if isinstance(exc, (ConnectionError, OSError)):
        return Failure.TRANSIENT
    return Failure.OTHER


def describe(exc: BaseException) -> str:
    """The database's message without SQLAlchemy's statement dump and background link."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip()
    return " ".join(line.strip() for line in text.splitlines() if line.strip()) or type(exc).__name__
