"""Helpers shared by the JDBC integration tests: SQL against the test database, JSON envelopes."""

from __future__ import annotations

import time
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, TypeVar

import orjson
import psycopg

T = TypeVar("T")

JSON_CONVERTER = "org.apache.kafka.connect.json.JsonConverter"
_REPO_ROOT = Path(__file__).resolve().parents[2]
_INSTALLED = {ep.name for ep in entry_points(group="sluice.connectors")}
# Users name the connectors by Confluent's class names. Until the distribution declares the JDBC
# entry points, the worker finds them by Python path, which it imports only from plugin.path.
JDBC_SOURCE = (
    "io.confluent.connect.jdbc.JdbcSourceConnector"
    if "JdbcSource" in _INSTALLED
    else "connectors.source.jdbc.connector.JdbcSourceConnector"
)
JDBC_SINK = (
    "io.confluent.connect.jdbc.JdbcSinkConnector"
    if "JdbcSink" in _INSTALLED
    else "connectors.sink.jdbc.connector.JdbcSinkConnector"
)
#: Worker settings every JDBC integration test's worker needs.
WORKER_SETTINGS: dict[str, str] = {} if {"JdbcSource", "JdbcSink"} <= _INSTALLED else {"plugin.path": str(_REPO_ROOT)}


def libpq_url(sqlalchemy_url: str) -> str:
    """``postgresql+psycopg://…`` → ``postgresql://…`` for psycopg."""
    return sqlalchemy_url.replace("postgresql+psycopg://", "postgresql://", 1)


def sql(url: str, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement in its own committed transaction; return its rows (if any)."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []


def wait_for(probe: Callable[[], T], done: Callable[[T], bool], *, timeout: float = 60, what: str = "") -> T:
    """Poll ``probe`` until ``done(result)``; raise with the last result after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = probe()
    while not done(last):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: last saw {last!r}")
        time.sleep(0.2)
        last = probe()
    return last


def envelope(schema: dict[str, Any] | None, payload: Any) -> bytes:
    """A JsonConverter message with ``schemas.enable=true``."""
    return orjson.dumps({"schema": schema, "payload": payload})


def struct_schema(name: str, *fields: tuple[str, str, bool]) -> dict[str, Any]:
    """A Connect struct schema in JSON form from ``(field, type, optional)`` triples."""
    return {
        "type": "struct",
        "name": name,
        "optional": False,
        "fields": [{"field": f, "type": t, "optional": o} for f, t, o in fields],
    }
