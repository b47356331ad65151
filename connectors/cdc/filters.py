"""Debezium's include/exclude lists of captured tables and columns, for every database source.

A database source names its tables ``<namespace>.<table>``: PostgreSQL's namespace is the schema
(``schema.include.list``), MySQL's and MariaDB's the database (``database.include.list``). The
lists are anchored regular expressions over ``<namespace>``, ``<namespace>.<table>`` and
``<namespace>.<table>.<column>``; an include list wins over its exclude list, as in Debezium.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence


def _compile_all(patterns: Sequence[str]) -> list[re.Pattern[str]]:
    return [re.compile(p) for p in patterns]


def _any(patterns: list[re.Pattern[str]], text: str) -> bool:
    return any(p.fullmatch(text) for p in patterns)


class CollectionFilter:
    """Which tables (and columns) a source captures. ``system`` says which namespaces are the
    database's own (never captured, whatever the lists say)."""

    def __init__(
        self,
        *,
        namespace_include: Sequence[str] = (),
        namespace_exclude: Sequence[str] = (),
        table_include: Sequence[str] = (),
        table_exclude: Sequence[str] = (),
        column_include: Sequence[str] = (),
        column_exclude: Sequence[str] = (),
        system: Callable[[str], bool] = lambda namespace: False,
    ) -> None:
        self.namespace_include = _compile_all(namespace_include)
        self.namespace_exclude = _compile_all(namespace_exclude)
        self.table_include = _compile_all(table_include)
        self.table_exclude = _compile_all(table_exclude)
        self.column_include = _compile_all(column_include)
        self.column_exclude = _compile_all(column_exclude)
        self.system = system

    def captures_namespace(self, namespace: str) -> bool:
        """Whether tables of ``namespace`` may be captured (the namespace lists alone)."""
        if self.system(namespace):
            return False
        if self.namespace_include:
            return _any(self.namespace_include, namespace)
        return not _any(self.namespace_exclude, namespace)

    def captures(self, namespace: str, table: str) -> bool:
        """Whether ``<namespace>.<table>`` is captured."""
        if not self.captures_namespace(namespace):
            return False
        qualified = f"{namespace}.{table}"
        if self.table_include:
            return _any(self.table_include, qualified)
        return not _any(self.table_exclude, qualified)

    def order(self, namespace: str, table: str) -> int:
        """Where the table comes in a snapshot: the position of the first ``table.include.list``
        pattern it matches (Debezium snapshots tables in that order), 0 without the list."""
        qualified = f"{namespace}.{table}"
        return next((i for i, p in enumerate(self.table_include) if p.fullmatch(qualified)), 0)

    def column_included(self, namespace: str, table: str, column: str) -> bool:
        """Whether the column is kept in the events (``column.include.list``/``column.exclude.list``)."""
        qualified = f"{namespace}.{table}.{column}"
        if self.column_include:
            return _any(self.column_include, qualified)
        return not _any(self.column_exclude, qualified)
