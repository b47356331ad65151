"""The captured tables as the task knows them (Debezium's ``PostgresSchema``): described from the
catalog when a snapshot needs one or a Relation message arrives, kept while their shape holds."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import psycopg

from sluice.connectors.source.postgres_cdc import catalog
from sluice.connectors.source.postgres_cdc.config import PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.decoder import Relation
from sluice.connectors.source.postgres_cdc.tables import Table

log = logging.getLogger(__name__)


class CapturedTables:
    """The task's tables by ``schema.table``, shared by the stream, the snapshot and the reselector.
    ``connect`` gives the task's (autocommit) catalog connection. Thread: the task thread."""

    def __init__(self, cfg: PostgresCdcConfig, connect: Callable[[], psycopg.Connection[Any]]) -> None:
        self.cfg = cfg
        self.connect = connect
        self.filter = catalog.TableFilter(cfg)
        self.tables: dict[str, Table] = {}

    def describe(self, qualified: str) -> Table | None:
        """The current description of a captured table (catalog), shared with the stream's."""
        table = self.tables.get(qualified)
        if table is not None:
            return table
        schema, name = qualified.split(".", 1)
        conn = self.connect()
        oid = catalog.table_oid(conn, schema, name)
        if oid is None:
            return None
        table = catalog.load_table(conn, oid, self.cfg, self.filter)
        if table is not None:
            self.tables[qualified] = table
        return table

    def load_relation(self, relid: int, relation: Relation, is_signal: bool) -> tuple[Table | None, bool]:
        """A Relation message arrived: (re)describe the table; keep the old object (and its schemas)
        when nothing changed, so converters keep their caches. Also says whether it is captured."""
        schema, name = relation[0], relation[1]
        captured = self.filter.captures(schema, name)
        if not captured and not is_signal:
            return None, False
        table = catalog.load_table(self.connect(), relid, self.cfg, self.filter, relation)
        if table is None:
            return None, False
        known = self.tables.get(table.qualified)
        if known is not None and known.same_shape(table):
            return known, captured
        if known is not None:
            log.info("Table %s changed; its schemas follow (%d columns)", table.qualified, len(table.columns))
        self.tables[table.qualified] = table
        return table, captured

    def captured_names(self) -> list[str]:
        """``schema.table`` of the captured tables: what a snapshot signal's data-collections match."""
        return [f"{s}.{t}" for _, s, t in catalog.list_tables(self.connect(), self.filter)]
