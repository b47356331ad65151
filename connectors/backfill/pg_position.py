"""A PostgreSQL read position that a CDC connector can continue from with no gap.

Why not ``pg_current_wal_lsn()`` next to the read: an LSN read in one statement and a snapshot
taken in another (or by every Spark partition on its own connection) do not describe the same
point. A transaction whose commit record is already in the WAL below the LSN may not yet be
visible to a snapshot (the commit is written, then waits — for a synchronous standby, for the
scheduler — before it leaves the proc array): it is then in neither the read nor the stream. And a
logical slot created *after* the LSN cannot replay what committed in between.

What this module does instead is what Debezium's initial snapshot does: it creates a logical
replication slot over a replication connection with ``EXPORT_SNAPSHOT``. PostgreSQL returns the
slot's *consistent point* C and the name of a snapshot built by the decoder itself, which sees
exactly the transactions whose commit record starts before C; decoding the slot emits exactly
those whose commit record starts at or after C. Every Spark partition (and the row count)
imports that snapshot (``SET TRANSACTION SNAPSHOT`` in a REPEATABLE READ transaction), so the
whole read is one point in time and C is the hand-off position. The snapshot stays importable
while the replication connection stays open and idle, so it is held for the whole run.

* With ``cdc.slot.name`` naming a slot that does not exist yet, that slot is created this way and
  kept: the CDC connector later streams it from exactly C.
* Otherwise a temporary slot gives the consistent point (it vanishes with the connection); a
  named slot that already exists must be at or before C, or the changes between would be lost.

The CDC connector's ``streaming.start.lsn`` streams transactions committed strictly *after* the
LSN it is given, and a commit record may start exactly at C (the next record after the slot's
consistent point), so the recorded ``streaming.start.lsn`` is C − 1: WAL records start on 8-byte
boundaries, so no record starts there and the set streamed is exactly "commit at or after C".
"""

from __future__ import annotations

import datetime as _dt
import logging
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sluice.connectors.api import ConfigError
from sluice.connectors.api.connectivity import host_port
from sluice.connectors.jdbc_common.connect_failures import classify_database_error, classify_postgres
from sluice.connectors.jdbc_common.urls import check_params, forced_connect_args

log = logging.getLogger(__name__)

_SNAPSHOT_NAME = re.compile(r"^[0-9A-Fa-f-]+$")


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    high, _, low = text.partition("/")
    return (int(high, 16) << 32) | int(low, 16)


@dataclass(frozen=True)
class ConsistentPoint:
    """A snapshot and the WAL position it is consistent with."""

    lsn: int  # C: commits starting before it are in the snapshot, the others are decoded from it
    snapshot: str  # the exported snapshot's name, for SET TRANSACTION SNAPSHOT
    slot: str  # the slot that produced it
    slot_created: bool  # the CDC slot (cdc.slot.name) was created here, positioned exactly at C
    cdc_slot: str | None  # the CDC connector's slot, when the spec names one

    def import_statements(self) -> list[str]:
        """What a fresh transaction runs first to read in this snapshot."""
        return ["SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", f"SET TRANSACTION SNAPSHOT '{self.snapshot}'"]

    def session_init_statement(self) -> str:
        """Spark's ``sessionInitStatement``: each partition's connection imports the snapshot.

        Spark's PostgreSQL dialect turns autocommit off before it (a ``fetchsize`` is always set),
        so both statements open the transaction the partition's query then runs in.
        """
        return "; ".join(self.import_statements())

    def position(self) -> dict[str, Any]:
        """The run's ``source_position``: the LSN and a ready CDC connector config fragment."""
        cdc: dict[str, str] = {"snapshot.mode": "no_data", "streaming.start.lsn": format_lsn(max(0, self.lsn - 1))}
        if self.cdc_slot:
            cdc["slot.name"] = self.cdc_slot
        return {
            "database": "postgresql",
            "lsn": format_lsn(self.lsn),
            "slot": self.cdc_slot,
            "slot_created": self.slot_created,
            "captured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds"),
            "cdc": cdc,
            "note": (
                "the read saw exactly the transactions committed before lsn (an exported snapshot of a "
                "logical slot); start the CDC connector with the cdc settings to stream every later one"
            ),
        }


def libpq_params(url: Any) -> dict[str, Any]:
    """psycopg connection parameters from a SQLAlchemy URL of the source."""
    params: dict[str, Any] = {"dbname": url.database or "postgres"}
    if url.host:
        params["host"] = url.host
    if url.port:
        params["port"] = url.port
    if url.username:
        params["user"] = url.username
    if url.password:
        params["password"] = url.password
    # The URL came through to_sqlalchemy_url's allow-list; checked again, then libpq's default
    # credential files (~/.pgpass, ~/.postgresql/*) are switched off.
    check_params("postgresql", url.query or {}, "source.connection.url")
    params.update(url.query or {})
    params.update(forced_connect_args("postgresql", url.query or {}))
    return params


def _valid_slot_name(name: str) -> str:
    if not re.fullmatch(r"[a-z0-9_]{1,63}", name):
        raise ConfigError(
            f"source.cdc.slot.name: {name!r} is not a valid slot name (lower-case letters, digits, underscores)",
            key="source.cdc.slot.name",
        )
    return name


def _slot_state(params: dict[str, Any], slot: str) -> tuple[str, str | None, int | None] | None:
    import psycopg

    with psycopg.connect(**params, autocommit=True) as conn:
        row = conn.execute(
            "SELECT plugin, database, (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots WHERE slot_name = %s",
            (slot,),
        ).fetchone()
    return None if row is None else (str(row[0]), row[1], None if row[2] is None else int(row[2]))


def logical_decoding_available(params: dict[str, Any]) -> str | None:
    """``None`` when a logical slot can be created here, else why not."""
    import psycopg

    try:
        with psycopg.connect(**params, autocommit=True) as conn:
            level = conn.execute("SHOW wal_level").fetchone()
            role = conn.execute(
                "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
            ).fetchone()
    except psycopg.Error as exc:
        # The category only: libpq's text may quote what a port that is no PostgreSQL sent.
        found = classify_database_error(exc, "postgresql")
        return f"cannot connect to {host_port(params.get('host'), params.get('port'))}: {found.failure.describe()}"
    if not level or level[0] != "logical":
        return f"wal_level is {level[0] if level else '?'}, not logical"
    if not role or not role[0]:
        return "the user has neither the REPLICATION attribute nor superuser"
    return None


@contextmanager
def consistent_point(params: dict[str, Any], cdc_slot: str | None) -> Iterator[ConsistentPoint]:
    """Hold an exported snapshot and its consistent point for the body of the ``with``."""
    import psycopg
    from psycopg import pq

    existing = None
    if cdc_slot is not None:
        _valid_slot_name(cdc_slot)
        existing = _slot_state(params, cdc_slot)
        if existing is not None:
            plugin, database, _ = existing
            if plugin != "pgoutput" or (database is not None and database != params["dbname"]):
                raise ConfigError(
                    f"source.cdc.slot.name: slot {cdc_slot!r} uses plugin {plugin!r} on database {database!r}; "
                    f"the CDC connector needs pgoutput on {params['dbname']!r}",
                    key="source.cdc.slot.name",
                )
    create_named = cdc_slot is not None and existing is None
    slot = cdc_slot if create_named and cdc_slot else f"sluice_backfill_{uuid.uuid4().hex[:16]}"
    command = f'CREATE_REPLICATION_SLOT "{slot}" {"" if create_named else "TEMPORARY "}LOGICAL pgoutput EXPORT_SNAPSHOT'
    try:
        conn = psycopg.connect(**params, replication="database", autocommit=True)
    except psycopg.Error as exc:
        raise ConfigError(
            f"source.connection.url: cannot open a replication connection: {classify_postgres(exc).failure.describe()}",
            key="source.connection.url",
        ) from None
    try:
        # The simple query protocol: a walsender does not take the extended one for its commands.
        result = conn.pgconn.exec_(command.encode())
        if result.status != pq.ExecStatus.TUPLES_OK:
            message = (result.error_message or b"").decode(errors="replace").strip()
            raise ConfigError(f"source.table: cannot create a logical replication slot for the read position: {message}", key="source.table")
        lsn_text = (result.get_value(0, 1) or b"").decode()
        snapshot = (result.get_value(0, 2) or b"").decode()
        if not snapshot or not _SNAPSHOT_NAME.match(snapshot):
            raise ConfigError(f"source.table: PostgreSQL exported no usable snapshot ({snapshot!r})", key="source.table")
        point = ConsistentPoint(parse_lsn(lsn_text), snapshot, slot, create_named, cdc_slot)
        if existing is not None and cdc_slot is not None:
            # A named slot already there must not be past the read, or what committed between its
            # position and the read's would be in neither.
            now = _slot_state(params, cdc_slot)
            confirmed = now[2] if now else None
            if now is None or (confirmed is not None and confirmed > point.lsn):
                raise ConfigError(
                    f"source.cdc.slot.name: slot {cdc_slot!r} is at {format_lsn(confirmed or 0)}, after the read's "
                    f"consistent point {format_lsn(point.lsn)}: a CDC connector on it would miss the changes between "
                    "(drop the slot or name a new one)",
                    key="source.cdc.slot.name",
                )
        log.info(
            "Reading in snapshot %s, consistent with LSN %s (slot %s%s)",
            snapshot,
            format_lsn(point.lsn),
            slot,
            ", created for the CDC connector" if create_named else ", temporary",
        )
        yield point
    finally:
        conn.close()


def drop_slot(params: dict[str, Any], slot: str) -> None:
    """Drop a slot this run created for a hand-off that did not happen (a failed or cancelled read)."""
    import psycopg

    try:
        with psycopg.connect(**params, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            )
        log.info("Dropped replication slot %s: the backfill did not complete", slot)
    except psycopg.Error as exc:
        log.warning("Cannot drop replication slot %s (drop it by hand, it retains WAL): %s", slot, exc)
