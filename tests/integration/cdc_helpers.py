"""Helpers for the PostgreSQL CDC integration tests: connector files, a worker, topic reading."""

from __future__ import annotations

import abc
import random
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import psycopg

from tests.integration.kafka_helpers import ConsumedRecord, consume_all
from tests.integration.worker_process import WorkerProcess

JSON = "org.apache.kafka.connect.json.JsonConverter"
DEBEZIUM_CLASS = "io.debezium.connector.postgresql.PostgresConnector"


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


def run_sql(url: str, *statements: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run the statements in one transaction; return the last one's rows."""
    with psycopg.connect(libpq(url)) as conn:
        rows: list[tuple[Any, ...]] = []
        for statement in statements:
            cur = conn.execute(statement, params)
            rows = cur.fetchall() if cur.description else []
        return rows


def cdc_config(pg_port: int | None, database: str, prefix: str, **extra: str) -> dict[str, str]:
    """A Debezium-style connector config, with a slot and publication of its own."""
    assert pg_port is not None, "the PostgreSQL server is not started"
    tag = uuid.uuid4().hex[:8]
    return {
        "connector.class": DEBEZIUM_CLASS,
        "database.hostname": "127.0.0.1",
        "database.port": str(pg_port),
        "database.user": "postgres",
        "database.dbname": database,
        "topic.prefix": prefix,
        "plugin.name": "pgoutput",
        "slot.name": f"slot_{tag}",
        "publication.name": f"pub_{tag}",
        "publication.autocreate.mode": "filtered",
        "poll.interval.ms": "200",
        "key.converter": JSON,
        "value.converter": JSON,
        **extra,
    }


def write_connector(path: Path, name: str, config: dict[str, str]) -> Path:
    path.write_bytes(orjson.dumps({"name": name, "config": config}))
    return path


def worker(tmp_path: Path, bootstrap: str, **settings: str) -> WorkerProcess:
    worker_settings: dict[str, Any] = {"offset.flush.interval.ms": "500", **settings}
    return WorkerProcess(tmp_path, bootstrap, **worker_settings)


def read_events(bootstrap: str, topic: str, count: int, *, timeout: float = 90, settle: float = 1.0) -> list[ConsumedRecord]:
    """``count`` records of ``topic`` (waiting for the connector to create it first)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consume_all(bootstrap, topic, count, timeout=max(1.0, deadline - time.monotonic()), settle=settle)
        except TimeoutError as exc:
            if "is not available" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def read_until(
    bootstrap: str, topic: str, done: Callable[[list[ConsumedRecord]], bool], *, timeout: float = 90, what: str = ""
) -> list[ConsumedRecord]:
    """All records of ``topic`` once ``done`` holds for them. Unlike :func:`read_events` it does
    not stop at a count, which a redelivered record (at least once, after an outage) would reach
    before the awaited one arrives."""
    deadline = time.monotonic() + timeout
    records: list[ConsumedRecord] = []
    while time.monotonic() < deadline:
        records = read_events(bootstrap, topic, 1, timeout=max(1.0, deadline - time.monotonic()))
        if done(records):
            return records
        time.sleep(0.5)
    raise AssertionError(f"{topic}: {what or 'the awaited records'} not there after {timeout:.0f}s ({len(records)} records)")


def value(record: ConsumedRecord) -> Any:
    """The payload of a JsonConverter message (``None`` for a tombstone)."""
    if record.value is None:
        return None
    doc = orjson.loads(record.value)
    return doc["payload"] if isinstance(doc, dict) and "payload" in doc and "schema" in doc else doc


def key(record: ConsumedRecord) -> Any:
    if record.key is None:
        return None
    doc = orjson.loads(record.key)
    return doc["payload"] if isinstance(doc, dict) and "payload" in doc and "schema" in doc else doc


def confirmed_flush_lsn(url: str, slot: str) -> int:
    rows = run_sql(url, "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = %s", params=(slot,))
    return int(rows[0][0]) if rows and rows[0][0] is not None else 0


def dbname(url: str) -> str:
    return url.rsplit("/", 1)[-1]


class BackgroundWriter(threading.Thread, abc.ABC):
    """Changes a table on its own connection until :meth:`stop`, one :meth:`step` at a time, so a
    test can backfill, snapshot or stream while rows keep moving; an error is raised by stop()."""

    def __init__(self, url: str, *, name: str, seed: int, pause_s: float) -> None:
        super().__init__(name=name, daemon=True)
        self._url = libpq(url)
        self._rnd = random.Random(seed)
        self._pause_s = pause_s
        self._stop_event = threading.Event()
        self.commits = 0
        self.error: BaseException | None = None

    @abc.abstractmethod
    def step(self, conn: psycopg.Connection[Any], rnd: random.Random) -> None:
        """One change (or one transaction of several)."""

    def run(self) -> None:
        try:
            with psycopg.connect(self._url, autocommit=True) as conn:
                while not self._stop_event.is_set():
                    self.step(conn, self._rnd)
                    self.commits += 1
                    time.sleep(self._pause_s)
        except BaseException as exc:  # noqa: BLE001 - surfaced by stop()
            self.error = exc

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=30)
        if self.error is not None:
            raise AssertionError(f"the writer failed: {self.error!r}")
