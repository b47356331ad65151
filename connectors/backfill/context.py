"""What a running backfill job sees of its runner: progress reporting, cancellation, its Spark job group."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
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


#: The worker's converter lookup: ``{"key.converter": class, "key": config, ...}`` → configured
#: ``(key, value, header)`` converters.
ConverterLoader = Callable[[Mapping[str, Any]], tuple[Any, Any, Any]]


@dataclass(frozen=True)
class BackfillRuntime:
    """What the worker lends the jobs, which may not import it (DESIGN's layers): the plugin registry's
    converter lookup. ``load_converters`` is shipped to Spark's executors, so it must pickle (a
    module-level function): ``{"key.converter": class, "key": config, ...}`` → the configured
    ``(key, value, header)`` converters. ``None`` outside a worker (a kind that needs it refuses to run)."""

    load_converters: ConverterLoader | None = None
