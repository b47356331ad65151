"""Backfill jobs as a worker resource: specs, runs, progress, cancellation, schedules, storage.

PySpark is never imported here; :mod:`sluice.connectors.backfill` does the Spark work when a run starts.
"""

from __future__ import annotations

from sluice.worker.backfill.manager import BackfillManager
from sluice.worker.backfill.models import JobState, RunStatus, parse_spec
from sluice.worker.backfill.store import BackfillStore, FileBackfillStore, MemoryBackfillStore, StoredJob

__all__ = [
    "BackfillManager",
    "BackfillStore",
    "FileBackfillStore",
    "JobState",
    "MemoryBackfillStore",
    "RunStatus",
    "StoredJob",
    "parse_spec",
]
