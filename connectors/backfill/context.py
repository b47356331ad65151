"""What a running backfill job sees of its runner: progress reporting, cancellation, its Spark job group."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class JobContext(Protocol):
    """Handed to a job kind by the runner (``sluice.worker.backfill``). Methods may be called from any thread."""

    @property
    def job_group(self) -> str:
        """The Spark job group of this run; cancelling it stops the run's Spark jobs."""
        ...

    @property
    def cancelled(self) -> bool:
        """True once the run was asked to stop."""
        ...

    def progress(
        self, *, rows_done: int | None = None, bytes_done: int | None = None, rows_total: int | None = None
    ) -> None:
        """Report progress; ``None`` leaves a figure as it was."""
        ...

    def record(self, key: str, value: Any) -> None:
        """Record a detail of the run in its status (``source_position`` for CDC hand-off, …)."""
        ...


class DefaultSettings(Protocol):
    """Worker-level defaults a job falls back to."""

    @property
    def bootstrap_servers(self) -> str: ...

    @property
    def producer(self) -> Mapping[str, str]: ...
