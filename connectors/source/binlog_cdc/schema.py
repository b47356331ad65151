"""The captured tables as the task knows them: from the schema history's shapes (:mod:`.history`)
in force at the stream's position first; described from ``information_schema`` when the history
holds no shape for a table (or none is kept), and when a table map names other columns than the
shape (a warning says so) (see :mod:`.tables`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from sluice.connectors.api import Schema
from sluice.connectors.cdc import keys as cdc_keys
from sluice.connectors.source.binlog_cdc.config import BinlogCdcConfig
from sluice.connectors.source.binlog_cdc.shapes import TableShape
from sluice.connectors.source.binlog_cdc.tables import Column, Table, collection_filter, describe, same_columns
from sluice.connectors.source.binlog_cdc.types import TypeModes, column_type

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
        #: The schema history's shape of a table at the stream's position (set by the task).
        self.shapes: Callable[[str, str], TableShape | None] | None = None
        self._built: dict[tuple[str, str], tuple[TableShape, Table]] = {}

    def lookup(self, database: str, name: str, columns: Sequence[str | None]) -> Table | None:
        """The captured table a table map event names (``None``: not captured, or gone)."""
        if not self.filter.captures(database, name):
            return None
        shape = self.shapes(database, name) if self.shapes is not None else None
        if shape is not None:
            built = self._built.get((database, name))
            if built is None or built[0] is not shape:
                built = (shape, self._from_shape(shape))
                self._built[(database, name)] = built
            if None in columns or same_columns(built[1], columns):
                return built[1]
            if not (known := self.tables.get((database, name))) or not same_columns(known, columns):
                log.warning(
                    "Table %s.%s: its binlog rows have other columns (%s) than the schema history's shape (%s): "
                    "described from information_schema",
                    database, name, ", ".join(str(c) for c in columns), ", ".join(built[1].all_columns),
                )  # fmt: skip
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
                "Table %s.%s has other columns now than its binlog rows (%s): rows are read by name",
                database,
                name,
                ", ".join(str(c) for c in columns),
            )
        self.tables[(database, name)] = table
        return table

    def _from_shape(self, shape: TableShape) -> Table:
        """The captured table of a shape (as :func:`~.tables.describe` builds one from ``information_schema``)."""
        database, name = shape.id
        columns = []
        for col in shape.columns:
            info = col.info()
            ctype = column_type(info, self.modes)
            if ctype is None or (col.name not in shape.primary_key and not self.filter.column_included(database, name, col.name)):
                continue
            columns.append(Column(col.name, ctype, info.nullable))
        names = [c.name for c in shape.columns]
        return Table(
            database,
            name,
            columns,
            list(shape.primary_key),
            self.config.topic_prefix,
            self.source_schema,
            tuple(names),
            name_mode=self.config.schema_name_adjustment_mode,
            key_columns=cdc_keys.message_key_columns(self.config.message_key_columns, f"{database}.{name}", names),
        )
