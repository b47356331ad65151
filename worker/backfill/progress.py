"""The live status of one run: progress figures, rate and ETA, cancellation, recorded details.

A :class:`RunTracker` is the :class:`~connectors.backfill.context.JobContext` a job kind reports
to; the manager reads :meth:`snapshot` for ``GET /backfills/{id}`` and persists it when the run ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from sluice.worker.backfill.models import JobState, RunStatus


class RunTracker:
    """Progress of one run. Thread-safe: the job thread reports, REST threads read."""

    def __init__(self, run_id: str, on_change: Callable[[RunStatus], None] | None = None, *, worker_id: str | None = None) -> None:
        self.run_id = run_id
        self._lock = threading.Lock()
        self._cancel = threading.Event()
        self._status = RunStatus.model_validate({"run_id": run_id, "state": JobState.PENDING, "worker_id": worker_id})
        self._first_progress: tuple[float, int] | None = None
        self._on_change = on_change

    @property
    def job_group(self) -> str:
        return f"sluice-backfill-{self.run_id}"

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def request_cancel(self) -> None:
        self._cancel.set()

    def progress(self, *, rows_done: int | None = None, bytes_done: int | None = None, rows_total: int | None = None) -> None:
        now = time.time()
        with self._lock:
            s = self._status
            if rows_total is not None:
                s.rows_total = rows_total
            if bytes_done is not None:
                s.bytes_done = bytes_done
            if rows_done is not None:
                s.rows_done = rows_done
                if self._first_progress is None:
                    self._first_progress = (now, rows_done)
            self._derive(now)

    def _derive(self, now: float) -> None:
        s = self._status
        if self._first_progress is not None:
            t0, r0 = self._first_progress
            elapsed = now - t0
            if elapsed > 0.5 and s.rows_done > r0:
                s.rows_per_s = round((s.rows_done - r0) / elapsed, 1)
        if s.rows_total:
            s.percent = round(min(100.0, 100.0 * s.rows_done / s.rows_total), 1)
            if s.rows_per_s and s.rows_done < s.rows_total:
                s.eta_s = round((s.rows_total - s.rows_done) / s.rows_per_s, 1)
            elif s.rows_done >= s.rows_total:
                s.eta_s = 0.0
        elif s.rows_total == 0:
            s.percent = 100.0

    def record(self, key: str, value: Any) -> None:
        with self._lock:
            if key == "source_position":
                self._status.source_position = dict(value)
            else:
                self._status.details[key] = value

    def set_state(self, state: JobState, *, error: str | None = None, details: dict[str, Any] | None = None) -> RunStatus:
        now = time.time()
        with self._lock:
            s = self._status
            s.state = state
            if state is JobState.RUNNING and s.started_at is None:
                s.started_at = now
            if state.finished:
                s.finished_at = now
                if state is JobState.SUCCEEDED and s.rows_done:
                    # Measured from the first progress report (the data phase), not from a JVM start.
                    t0, r0 = self._first_progress or (s.started_at or now, 0)
                    s.rows_per_s = round((s.rows_done - r0) / max(1e-6, now - t0), 1)
                    s.eta_s = 0.0
            if error is not None:
                s.error = error
            if details:
                s.details.update(details)
            snapshot = s.model_copy(deep=True)
        if self._on_change is not None:
            self._on_change(snapshot)
        return snapshot

    def snapshot(self) -> RunStatus:
        with self._lock:
            return self._status.model_copy(deep=True)
