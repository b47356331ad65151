"""The check of a JDBC backfill's ``source.connection.url``, for the job spec the worker validates.

The worker must refuse a URL when the job is submitted, not when Spark starts, but it never imports
the JDBC connectors' shared code (the runtime never imports a concrete connector): it calls the
``jdbc_to_topic`` kind's ``source_url_problem`` hook (:mod:`~sluice.connectors.backfill.builtin_kinds`),
which is this function, the parser that the Spark job itself uses.
"""

from __future__ import annotations

from sluice.connectors.api import ConfigError
from sluice.connectors.jdbc_common.urls import BACKFILL_BACKENDS, BACKFILL_URL_KEY, parse_connection_url


def backfill_url_problem(value: str) -> str | None:
    """Why ``value`` cannot be a backfill's source URL, or ``None`` when it can.

    Parsed, never passed through: allow-listed parameters only, no file a driver would read (a
    backfill has no ``connector.allowed.paths`` to confine one to), PostgreSQL or MySQL only.
    """
    try:
        parse_connection_url(value, key=BACKFILL_URL_KEY, allow_files=False, backends=BACKFILL_BACKENDS)
    except ConfigError as exc:
        return str(exc).removeprefix(f"{BACKFILL_URL_KEY}: ")
    return None
