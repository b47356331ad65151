"""The captured tables as the task knows them: described from ``information_schema`` when a table
map event first names them, again when a table map shows other columns (see :mod:`.tables`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from sluice.connectors.api import Schema
from sluice.connectors.source.binlog_cdc.config import BinlogCdcConfig
from sluice.connectors.source.binlog_cdc.tables import Table, collection_filter, describe, same_columns
from sluice.connectors.source.binlog_cdc.types import TypeModes

log = logging.getLogger(__name__)


def type_modes(config: BinlogCdcConfig) -> TypeModes:
    return TypeModes(
        decimal_handling_mode=config.decimal_handling_mode,
        time_precision_mode=config.time_precision_mode,
        bigint_unsigned_handling_mode=config.bigint_unsigned_handling_mode,
        binary_handling_mode=config.binary_handling_mode,
    )


class CapturedTables:
    """The task's tables by ``(database, table)``. ``cursor`` gives a cursor of the task's SQL
    connection (opened on demand). Thread: the task thread."""

    def __init__(self, config: BinlogCdcConfig, source_schema: Schema, cursor: Callable[[], Any]) -> None:
        self.config = config
        self.source_schema = source_schema
        self.cursor = cursor
        self.filter = collection_filter(
            config.database_include_list,
            config.database_exclude_list,
            config.table_include_list,
            config.table_exclude_list,
            config.column_include_list,
            config.column_exclude_list,
        )
        self.modes = type_modes(config)
        self.tables: dict[tuple[str, str], Table] = {}

    def lookup(self, database: str, name: str, columns: Sequence[str | None]) -> Table | None:
        """The captured table a table map event names (``None``: not captured, or gone)."""
        if not self.filter.captures(database, name):
            return None
        known = self.tables.get((database, name))
        if known is not None and (None in columns or same_columns(known, columns)):
            return known
        with self.cursor() as cur:
            table = describe(
                cur,
                database,
                name,
                topic_prefix=self.config.topic_prefix,
                source_schema=self.source_schema,
                modes=self.modes,
                table_filter=self.filter,
                name_mode=self.config.schema_name_adjustment_mode,
                message_key_columns=self.config.message_key_columns,
            )
        if table is None:
            log.warning("Table %s.%s is in the binlog but no longer exists: its changes are skipped", database, name)
            return None
        if known is not None:
            log.info("Table %s.%s changed; its schemas follow (%d columns)", database, name, len(table.columns))
        if None not in columns and not same_columns(table, columns):
            log.warning(
                "Table %s.%s has other columns now than its binlog rows (%s): rows are read by name, DDL tracking "
                "comes with the schema history",
                database,
                name,
                ", ".join(str(c) for c in columns),
            )
        self.tables[(database, name)] = table
        return table
