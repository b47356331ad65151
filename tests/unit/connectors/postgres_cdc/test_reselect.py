"""The reselector post processor: which events it fills, with what, and the one query per table."""

from __future__ import annotations

from typing import Any

from sluice.connectors.api import SourceRecord
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.reselect import Reselector
from sluice.connectors.source.postgres_cdc.tables import Column, Table
from sluice.connectors.source.postgres_cdc.types import (
    BYTEA,
    INT4,
    TEXT,
    TIMESTAMP,
    UNAVAILABLE,
    TypeModes,
    column_type,
)

MODES = TypeModes()
ON = {
    "post.processors": "reselector",
    "reselector.type": "io.debezium.processors.reselect.ReselectColumnsPostProcessor",
}


class FakeConnection:
    """Answers the type lookup and the reselect query; records what was asked."""

    def __init__(self, rows: list[tuple[Any, ...]]) -> None:
        self.rows = rows
        self.queries: list[tuple[str, Any]] = []

    def execute(self, query: Any, params: Any = None) -> FakeConnection:
        text = query if isinstance(query, str) else query.as_string(None)
        self.queries.append((text, params))
        return self

    def fetchone(self) -> tuple[Any, ...]:
        return ("integer",)

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


def table(key_oid: int = INT4) -> Table:
    columns = [
        Column("id", key_oid, -1, False, column_type(key_oid, -1, MODES)),
        Column("body", TEXT, -1, True, column_type(TEXT, -1, MODES)),
        Column("blob", BYTEA, -1, True, column_type(BYTEA, -1, MODES)),
        Column("note", TEXT, -1, True, column_type(TEXT, -1, MODES)),
    ]
    return Table(42, "public", "docs", columns, ["id"], "d", "srv", [True] * 4)


def event(op: str, after: dict[str, Any], topic: str = "srv.public.docs") -> SourceRecord:
    return SourceRecord(topic, {"op": op, "after": after, "before": None}, key={"id": after["id"]})


def reselector(conn: FakeConnection, t: Table, **keys: str) -> Reselector:
    config = PostgresCdcConfig.parse({"database.dbname": "db", "topic.prefix": "srv", **keys})
    return Reselector(config, lambda: conn, {t.qualified: t})  # type: ignore[arg-type,return-value]


def test_fills_placeholders_and_nulls_with_one_query_per_poll() -> None:
    t = table()
    conn = FakeConnection([(0, "long text", "\\x00ff", None), (1, "other", None, "n")])
    first = {"id": 1, "body": UNAVAILABLE, "blob": UNAVAILABLE.encode(), "note": "kept"}
    second = {"id": 2, "body": UNAVAILABLE, "blob": None, "note": None}
    untouched = {"id": 3, "body": "x", "blob": b"y", "note": "z"}
    r = reselector(conn, t, **ON)
    r.fill([[event("u", first), event("c", untouched)], [event("u", second)]])
    assert first == {"id": 1, "body": "long text", "blob": b"\x00\xff", "note": "kept"}
    assert second == {"id": 2, "body": "other", "blob": None, "note": "n"}
    assert untouched == {"id": 3, "body": "x", "blob": b"y", "note": "z"}
    selects = [(q, p) for q, p in conn.queries if q.startswith("SELECT v.n")]
    assert len(selects) == 1
    query, params = selects[0]
    assert '(VALUES (%s::int, %s::integer), (%s::int, %s::integer)) AS v(n, "id")' in query
    assert 'FROM "public"."docs" AS t' in query and 't."id" = v."id"' in query
    assert params == [0, 1, 1, 2]


def test_switches_and_column_lists() -> None:
    t = table()
    keys = {**ON, "reselector.reselect.null.values": "false", "reselector.reselect.columns.exclude.list": r".*\.blob"}
    conn = FakeConnection([(0, "long text", "\\x00ff", "n")])
    after = {"id": 1, "body": UNAVAILABLE, "blob": UNAVAILABLE.encode(), "note": None}
    reselector(conn, t, **keys).fill([[event("u", after)]])
    assert after == {"id": 1, "body": "long text", "blob": UNAVAILABLE.encode(), "note": None}
    nothing = FakeConnection([])
    after = {"id": 1, "body": None, "blob": None, "note": None}
    reselector(nothing, t, **{**keys, "reselector.reselect.unavailable.values": "false"}).fill([[event("u", after)]])
    assert not [q for q, _ in nothing.queries if q.startswith("SELECT v.n")]


def test_off_deletes_other_topics_and_unusable_keys_are_left_alone() -> None:
    conn = FakeConnection([])
    after = {"id": 1, "body": UNAVAILABLE, "blob": None, "note": None}
    reselector(conn, table()).fill([[event("u", after)]])  # post.processors not set
    reselector(conn, table(), **ON).fill([[event("d", after), event("u", after, topic="srv.public.other")]])
    reselector(conn, table(TIMESTAMP), **ON).fill([[event("u", after)]])
    assert conn.queries == [] and after["body"] == UNAVAILABLE
