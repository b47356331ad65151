"""Where the binlog stream stands, in Debezium's offset keys, and how a restart skips what was delivered.

An offset (``io.debezium.connector.binlog.BinlogOffsetContext``) names the position to reconnect
at and what to skip after it:

* ``file``, ``pos``: the binlog file and the position of the current transaction's first event
  (its GTID event; ``BEGIN`` without GTIDs), or the end of the last committed one between
  transactions;
* ``event``: how many events after ``pos`` were handled completely, ``row``: how many rows of the
  next event were delivered (both left out when 0);
* ``gtids``: the GTID state (MariaDB: ``domain-server-sequence`` per domain; MySQL: the executed
  set) of the transactions completed before the current one;
* ``ts_sec``, ``server_id``: the last event's time and originating server.

A restarted task reconnects at ``file``/``pos`` and skips ``event`` events, then ``row`` rows of the
next (:meth:`BinlogPosition.resume`): no change is emitted twice and none is lost, whatever
point of a transaction the last delivered batch ended at. Reconnecting by GTID (to follow a
failover to another server) is a later step; the GTID state is recorded for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_MYSQL_GTID = re.compile(r"([0-9a-fA-F-]{36}(?::[A-Za-z0-9_]+)?):(\d+)")


def merge_gtid(state: str | None, gtid: str) -> str:
    """The GTID state ``state`` after the transaction ``gtid`` completed.

    MariaDB (``0-1-141``): one ``domain-server-sequence`` per domain, the last one wins. MySQL
    (``3e11fa47-…:23``): the set of executed ``uuid:interval`` ranges, the number added."""
    if _MYSQL_GTID.fullmatch(gtid):
        return _merge_mysql(state or "", gtid)
    domain = gtid.split("-", 1)[0]
    kept = [g for g in (state or "").split(",") if g.strip() and g.strip().split("-", 1)[0] != domain]
    return ",".join(sorted([*(g.strip() for g in kept), gtid], key=lambda g: int(g.split("-", 1)[0])))


def _merge_mysql(state: str, gtid: str) -> str:
    match = _MYSQL_GTID.fullmatch(gtid)
    assert match is not None
    source, number = match.group(1), int(match.group(2))
    sets: dict[str, list[list[int]]] = {}
    for part in state.replace("\n", "").split(","):
        part = part.strip()
        if not part:
            continue
        name, *written = part.split(":")
        intervals = sets.setdefault(name, [])
        for r in written:
            low, _, high = r.partition("-")
            intervals.append([int(low), int(high or low)])
    intervals = sets.setdefault(source, [])
    intervals.append([number, number])
    out = []
    for name, ranges in sets.items():
        ranges.sort()
        merged: list[list[int]] = []
        for first, last in ranges:
            if merged and first <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], last)
            else:
                merged.append([first, last])
        text = ":".join(f"{a}" if a == b else f"{a}-{b}" for a, b in merged)
        out.append(f"{name}:{text}")
    return ",".join(out)


@dataclass
class BinlogPosition:
    """The stream's position and the restart rules (see the module docstring). Thread: the task thread."""

    file: str = ""
    #: Where a restart reconnects: the current transaction's first event, or after the last commit.
    restart_pos: int = 4
    #: The GTID state before the current transaction (after the last commit between transactions).
    restart_gtids: str | None = None
    #: The GTID state including the current transaction, once it commits.
    gtids: str | None = None
    #: Events after :attr:`restart_pos` handled completely.
    events: int = 0
    ts_sec: int = 0
    server_id: int = 0
    in_transaction: bool = False
    #: The current transaction's GTID (``None`` without GTIDs).
    gtid: str | None = None
    #: After a restart: events still to skip, then rows of the next row event.
    skip_events: int = 0
    skip_rows: int = 0

    # -- offsets -----------------------------------------------------------------------------------

    def offset(self) -> dict[str, Any]:
        """Debezium's offset of the position reached (keys with a zero value left out, as Debezium does)."""
        offset: dict[str, Any] = {}
        if self.server_id:
            offset["server_id"] = self.server_id
        if self.restart_gtids:
            offset["gtids"] = self.restart_gtids
        offset["file"] = self.file
        offset["pos"] = self.restart_pos
        if self.events:
            offset["event"] = self.events
        if self.ts_sec:
            offset["ts_sec"] = self.ts_sec
        return offset

    @classmethod
    def resume(cls, offset: dict[str, Any]) -> BinlogPosition:
        """The position a restart reconnects at, skipping what ``offset`` says was delivered."""
        gtids = offset.get("gtids") or None
        return cls(
            file=str(offset["file"]),
            restart_pos=int(offset["pos"]),
            restart_gtids=gtids,
            gtids=gtids,
            ts_sec=int(offset.get("ts_sec") or 0),
            server_id=int(offset.get("server_id") or 0),
            skip_events=int(offset.get("event") or 0),
            skip_rows=int(offset.get("row") or 0),
        )

    # -- the stream --------------------------------------------------------------------------------

    def rotate(self, file: str, position: int) -> None:
        """The stream continues in ``file`` at ``position`` (a rotation, or the first event of a connection)."""
        self.file = file
        if not self.in_transaction:
            self.restart_pos = position

    def begin(self, start: int, gtid: str | None) -> None:
        """A transaction starts with the event at ``start`` (its GTID event, or ``BEGIN``)."""
        self.in_transaction = True
        self.restart_pos = start
        self.restart_gtids = self.gtids
        self.events = 0
        self.gtid = gtid

    def event_done(self) -> None:
        """An event of the current transaction was handled completely."""
        if self.in_transaction:
            self.events += 1
            if self.skip_events:
                self.skip_events -= 1

    @property
    def skipping(self) -> bool:
        """Whether the current event was delivered before the restart (its rows are not emitted)."""
        return self.skip_events > 0

    def rows_to_skip(self) -> int:
        """How many rows of the current row event were delivered before the restart (asked once per event)."""
        if self.skip_events or not self.skip_rows:
            return 0
        rows, self.skip_rows = self.skip_rows, 0
        return rows

    def commit(self, end: int) -> None:
        """The current transaction committed; its last event ends at ``end``."""
        if self.gtid is not None:
            self.gtids = merge_gtid(self.gtids, self.gtid)
        self.in_transaction = False
        self.restart_pos = end
        self.restart_gtids = self.gtids
        self.events = 0
        self.skip_events = 0
        self.skip_rows = 0
