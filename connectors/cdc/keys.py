"""The event key of a row, as every database source builds it: a struct of the key columns."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from sluice.connectors.api import ConfigError
from sluice.connectors.cdc.config import parse_message_key_columns


def key_builder(columns: Sequence[str]) -> Callable[[dict[str, Any]], dict[str, Any] | None]:
    """A function from a row (a dict by column name) to its key struct, ``None`` for a table
    without key columns. Generated straight-line code: one dict display per row, no loop (the
    names enter the source only through ``repr``)."""
    if not columns:
        return lambda row: None
    body = ", ".join(f"{k!r}: row.get({k!r})" for k in columns)
    env: dict[str, Any] = {}
    exec(compile(f"def key_of(row):\n    return {{{body}}}", "<key builder>", "exec"), env)  # noqa: S102
    return env["key_of"]  # type: ignore[no-any-return]


def message_key_columns(text: str, qualified: str, columns: Sequence[str]) -> list[str] | None:
    """The event key's columns of table ``qualified`` (``schema.table`` or ``database.table``) per
    ``message.key.columns`` ``text`` (``None``: the primary key).

    As in Debezium, every entry whose table regex matches ``qualified`` adds, column regex by
    column regex, the columns it matches (case-insensitive, in table order). A column regex that
    matches none of the table's columns is a configuration error (Debezium would silently fall
    back to the primary key)."""
    if not text:
        return None
    chosen: list[str] = []
    for pattern, _, column_patterns in parse_message_key_columns(text):
        if not pattern.fullmatch(qualified):
            continue
        for column_pattern in column_patterns:
            regex = re.compile(column_pattern, re.IGNORECASE)
            found = [c for c in columns if regex.fullmatch(c) and c not in chosen]
            if not found and not any(regex.fullmatch(c) for c in columns):
                raise ConfigError(
                    f"message.key.columns names column {column_pattern!r} of table {qualified}, which has no such "
                    f"column (its columns: {', '.join(columns)})",
                    key="message.key.columns",
                )
            chosen.extend(found)
    return chosen or None
