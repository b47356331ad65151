"""Debezium's ``ReselectColumnsPostProcessor``: fill what the WAL did not carry from the table.

Under ``REPLICA IDENTITY DEFAULT`` an update that leaves a TOASTed value unchanged does not send it,
and the event's ``after`` holds ``unavailable.value.placeholder`` instead. With
``post.processors=reselector`` and ``reselector.type=io.debezium.processors.reselect.ReselectColumnsPostProcessor``
the task reads the row's current values of such columns (and, with
``reselector.reselect.null.values``, of null ones) and puts them in the event, as Debezium does.
Like Debezium's, what it reads is the row as it is *now*, which a later transaction may have changed.

The columns are chosen by ``reselector.reselect.columns.include.list`` /
``reselector.reselect.columns.exclude.list`` (regular expressions matching
``<schema>.<table>.<column>``); the row is found by its primary key, or by the event key with
``reselector.reselect.use.event.key``. One query per table per poll fetches every row the poll's
events need (a join with a ``VALUES`` list cast to the key columns' types, so the key's index serves
it). Key columns must be of a type whose event value PostgreSQL reads back as the column's value
(integers, text, uuid, enums, booleans); a table keyed otherwise is not reselected (logged once).

Thread: the task thread (from ``poll``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql

from sluice.connectors.api import SourceRecord, SourceRecordBatch, Type
from sluice.connectors.source.postgres_cdc.tables import Table

if TYPE_CHECKING:
    from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig

log = logging.getLogger(__name__)

#: Key column types whose Connect value, sent as a query parameter, reads back as the column's value.
_PLAIN_KEY_TYPES = {Type.INT8, Type.INT16, Type.INT32, Type.INT64, Type.STRING, Type.BOOLEAN}
_PLAIN_KEY_NAMES = {None, "io.debezium.data.Uuid", "io.debezium.data.Enum"}


class _TablePlan:
    """What the reselector does for one table: the columns it may fill and how to find the row."""

    def __init__(self, table: Table, key: list[str], key_types: list[str], columns: list[tuple[str, Any, Any]]) -> None:
        self.table = table
        self.key = key
        self.key_types = key_types
        #: (column, its conversion from PostgreSQL's text, its placeholder value)
        self.columns = columns


class Reselector:
    """Fills placeholder and null values of ``c``/``u`` events from the current rows."""

    def __init__(
        self,
        config: PostgresCdcConfig,
        connect: Callable[[], psycopg.Connection[Any]],
        tables: Mapping[str, Table],
    ) -> None:
        self.enabled = "reselector" in config.post_processors
        self.connect = connect
        self.tables = tables  # the task's qualified name → Table, kept current by the task
        self.include = [re.compile(p) for p in config.reselector_reselect_columns_include_list]
        self.exclude = [re.compile(p) for p in config.reselector_reselect_columns_exclude_list]
        self.unavailable = config.reselector_reselect_unavailable_values
        self.nulls = config.reselector_reselect_null_values
        self.use_event_key = config.reselector_reselect_use_event_key
        self._plans: dict[int, tuple[Table, _TablePlan | None]] = {}
        self._by_topic: dict[str, Table] = {}

    def fill(self, batches: Sequence[list[SourceRecord] | SourceRecordBatch]) -> None:
        """Fill the events of these poll results in place (snapshot batches are complete already)."""
        if not self.enabled:
            return
        wanted: dict[int, tuple[_TablePlan, list[tuple[dict[str, Any], list[Any], list[str]]]]] = {}
        for batch in batches:
            if not isinstance(batch, list):
                continue
            for record in batch:
                self._collect(record, wanted)
        for plan, rows in wanted.values():
            try:
                self._reselect(plan, rows)
            except psycopg.Error as exc:
                log.warning("Reselecting columns of %s failed; events keep their values: %s", plan.table.qualified, exc)

    def _collect(self, record: SourceRecord, wanted: dict[int, Any]) -> None:
        value = record.value
        if not isinstance(value, dict) or value.get("op") not in ("c", "u"):
            return
        after = value.get("after")
        if after is None:
            return
        plan = self._plan(record.topic)
        if plan is None:
            return
        missing = [
            name
            for name, _, placeholder in plan.columns
            if (self.nulls and after.get(name) is None)
            or (self.unavailable and placeholder is not None and after.get(name) == placeholder)
        ]
        if not missing:
            return
        source = record.key if self.use_event_key else after
        if not isinstance(source, dict) or any(source.get(k) is None for k in plan.key):
            return
        entry = wanted.setdefault(id(plan), (plan, []))
        entry[1].append((after, [source[k] for k in plan.key], missing))

    def _plan(self, topic: str) -> _TablePlan | None:
        table = self._by_topic.get(topic)
        if table is None or self.tables.get(table.qualified) is not table:
            self._by_topic = {t.topic: t for t in self.tables.values()}
            table = self._by_topic.get(topic)
            if table is None:
                return None
        cached = self._plans.get(id(table))
        if cached is not None and cached[0] is table:
            return cached[1]
        plan = self._make_plan(table)
        self._plans[id(table)] = (table, plan)
        return plan

    def _make_plan(self, table: Table) -> _TablePlan | None:
        key = table.key if self.use_event_key else table.primary_key
        by_name = {c.name: c for c in table.columns}
        if not key or any(k not in by_name for k in key):
            log.info("Table %s has no key to reselect columns by; its events are not reselected", table.qualified)
            return None
        schemas = [by_name[k].ctype.schema for k in key]
        if any(s.type not in _PLAIN_KEY_TYPES or s.name not in _PLAIN_KEY_NAMES for s in schemas):
            log.warning("Table %s: key columns %s cannot be reselected by (not plain values)", table.qualified, key)
            return None
        columns = []
        for column, keep in zip(table.columns, table.included):
            qualified = f"{table.qualified}.{column.name}"
            if not keep or column.name in key:
                continue
            if self.include and not any(p.fullmatch(qualified) for p in self.include):
                continue
            if any(p.fullmatch(qualified) for p in self.exclude):
                continue
            columns.append((column.name, column.ctype.fn, column.ctype.unavailable_as(table.placeholder)))
        if not columns:
            return None
        query = "SELECT format_type(%s, NULLIF(%s, -1))"
        conn = self.connect()
        key_types = [conn.execute(query, (by_name[k].type_oid, by_name[k].typmod)).fetchone()[0] for k in key]  # type: ignore[index]
        return _TablePlan(table, key, key_types, columns)

    def _reselect(self, plan: _TablePlan, rows: list[tuple[dict[str, Any], list[Any], list[str]]]) -> None:
        """One query for every row of ``rows``; each ``after`` gets the values it misses."""
        names = [name for name, _, _ in plan.columns]
        key_ids = [sql.Identifier(k) for k in plan.key]
        row_sql = sql.SQL("({})").format(
            sql.SQL(", ").join([sql.SQL("%s::int")] + [sql.SQL("%s::" + t) for t in plan.key_types])
        )
        query = sql.SQL("SELECT v.n, {cols} FROM {table} AS t JOIN (VALUES {rows}) AS v(n, {keys}) ON {match}").format(
            cols=sql.SQL(", ").join(sql.SQL("t.{}::text").format(sql.Identifier(n)) for n in names),
            table=sql.Identifier(plan.table.schema_name, plan.table.name),
            rows=sql.SQL(", ").join([row_sql] * len(rows)),
            keys=sql.SQL(", ").join(key_ids),
            match=sql.SQL(" AND ").join(sql.SQL("t.{0} = v.{0}").format(k) for k in key_ids),
        )
        params: list[Any] = []
        for n, (_, key, _) in enumerate(rows):
            params.append(n)
            params.extend(key)
        found = self.connect().execute(query, params).fetchall()
        convert = {name: fn for name, fn, _ in plan.columns}
        for n, *texts in found:
            after, _, missing = rows[n]
            current = dict(zip(names, texts))
            for name in missing:
                text = current[name]
                after[name] = None if text is None else convert[name](text.encode())
