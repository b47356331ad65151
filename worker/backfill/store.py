"""Where backfill jobs live between restarts: each job's spec (schedule included) and last state.

The interface is deliberately small — list, get, put, delete of one :class:`StoredJob` — so the
distributed worker can back it with its config topic. :class:`FileBackfillStore` serves standalone
workers (one JSON file, replaced atomically on every write); :class:`MemoryBackfillStore` is for
workers without a file and for tests.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass
class StoredJob:
    """A job as persisted: the spec as submitted (dotted keys) and the status of its latest run.

    ``cancel_run`` asks the worker running that run to cancel it: in a cluster, the worker that
    takes ``DELETE /backfills/{id}`` may not be the one running the job.
    """

    id: str
    spec: dict[str, Any]
    status: dict[str, Any] = field(default_factory=dict)
    cancel_run: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "spec": self.spec, "status": self.status}
        if self.cancel_run is not None:
            out["cancel_run"] = self.cancel_run
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StoredJob:
        cancel = data.get("cancel_run")
        return cls(
            id=str(data["id"]),
            spec=dict(data.get("spec") or {}),
            status=dict(data.get("status") or {}),
            cancel_run=str(cancel) if cancel else None,
        )


class BackfillStore(Protocol):
    """Persistence of backfill jobs. Implementations are thread-safe."""

    def start(self) -> None:
        """Load what is stored (a topic is read to its end); called by the manager's start."""
        ...

    def stop(self) -> None:
        """Let go of what :meth:`start` opened; called by the manager's stop after a start."""
        ...

    def list(self) -> list[StoredJob]:
        """Every stored job, ordered by id."""
        ...

    def get(self, job_id: str) -> StoredJob | None:
        """The job, or ``None``."""
        ...

    def put(self, job: StoredJob) -> None:
        """Create or replace the job."""
        ...

    def delete(self, job_id: str) -> None:
        """Forget the job (no error if it is unknown)."""
        ...


class JobMapReads:
    """Reads of a store that keeps its jobs in ``self._jobs`` under ``self._lock``: copies, so a
    caller never changes the store by changing what it got."""

    _jobs: dict[str, StoredJob]
    _lock: threading.Lock

    def list(self) -> list[StoredJob]:
        with self._lock:
            return [StoredJob.from_json(self._jobs[k].to_json()) for k in sorted(self._jobs)]

    def get(self, job_id: str) -> StoredJob | None:
        with self._lock:
            job = self._jobs.get(job_id)
            return StoredJob.from_json(job.to_json()) if job else None


class MemoryBackfillStore(JobMapReads):
    """Jobs in a dict: nothing survives the process."""

    def __init__(self) -> None:
        self._jobs: dict[str, StoredJob] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        """Nothing to open: the jobs are in memory (a file store read its file when built)."""

    def stop(self) -> None:
        """Nothing to close: a file store wrote its file on every change."""

    def put(self, job: StoredJob) -> None:
        with self._lock:
            self._jobs[job.id] = StoredJob.from_json(json.loads(json.dumps(job.to_json())))

    def delete(self, job_id: str) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)


class FileBackfillStore(MemoryBackfillStore):
    """Jobs in one JSON file (``backfill.storage.file.filename``), rewritten atomically on each change.

    The file holds connection settings in clear, like Connect's standalone offset and config files;
    it is created with mode 0600.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__()
        self._save_lock = threading.Lock()  # the last writer always writes the newest snapshot
        self.path = Path(path)
        if self.path.is_file():
            data = json.loads(self.path.read_text(encoding="utf-8") or "{}")
            for item in data.get("jobs", []):
                job = StoredJob.from_json(item)
                self._jobs[job.id] = job

    def put(self, job: StoredJob) -> None:
        super().put(job)
        self._save()

    def delete(self, job_id: str) -> None:
        super().delete(job_id)
        self._save()

    def _save(self) -> None:
        with self._save_lock:
            self._write()

    def _write(self) -> None:
        with self._lock:
            data = {"version": 1, "jobs": [self._jobs[k].to_json() for k in sorted(self._jobs)]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, sort_keys=True, default=str)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
