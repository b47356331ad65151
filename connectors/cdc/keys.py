"""The event key of a row, as every database source builds it: a struct of the key columns."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


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
