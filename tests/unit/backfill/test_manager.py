"""The backfill manager with a fake job runner: states, progress, cancel, no concurrent runs,
schedules and recovery from the store after a restart."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sluice.connectors.api import NotFoundError
from sluice.connectors.backfill.errors import BackfillJobError
from sluice.worker.backfill import BackfillManager, FileBackfillStore, JobState, MemoryBackfillStore, StoredJob
from sluice.worker.backfill.progress import RunTracker
from sluice.worker.herder import BadRequest, Conflict


def spec(job_id: str = "job", **extra: Any) -> dict[str, Any]:
    return {
        "id": job_id,
        "kind": "topic_to_sink",
        "source": {"topic": "events"},
        "target": {"config": {"connector.class": "JdbcSink"}},
        **extra,
    }


class FakeRunner:
    """Reports progress, then finishes, fails or waits for cancellation as told."""

    def __init__(self, outcome: str = "ok") -> None:
        self.outcome = outcome
        self.release = threading.Event()
        self.running = threading.Event()
        self.runs = 0
        self.cancelled_groups: list[str] = []

    def __call__(self, provider: Any, spec: Any, tracker: RunTracker, bootstrap: str) -> dict[str, Any]:
        self.runs += 1
        tracker.progress(rows_total=100, rows_done=0)
        tracker.record("source_position", {"lsn": "0/16B3748"})
        tracker.progress(rows_done=40, bytes_done=4000)
        self.running.set()
        if self.outcome == "fail":
            raise BackfillJobError('PSQLException: ERROR: relation "nope" does not exist')
        while not self.release.wait(0.02):
            if tracker.cancelled:
                raise BackfillJobError("Job group was cancelled")
        tracker.progress(rows_done=100)
        return {"rows": 100}

    def cancel(self, provider: Any, group: str) -> None:
        self.cancelled_groups.append(group)


def manager(runner: FakeRunner, store: Any = None) -> BackfillManager:
    m = BackfillManager(store or MemoryBackfillStore(), runner=runner, canceller=runner.cancel)
    m.start()
    return m


def test_a_run_reports_progress_and_succeeds() -> None:
    runner = FakeRunner()
    m = manager(runner)
    try:
        m.submit(spec())
        assert runner.running.wait(5)
        status = m.get("job")["status"]
        assert status["state"] == "RUNNING"
        assert status["rows_done"] == 40 and status["rows_total"] == 100 and status["percent"] == 40.0
        assert status["source_position"] == {"lsn": "0/16B3748"}
        runner.release.set()
        final = m.wait("job", 5)
        assert final.state is JobState.SUCCEEDED
        assert final.rows_done == 100 and final.percent == 100.0 and final.eta_s == 0.0
        assert final.details == {"rows": 100}
    finally:
        m.stop()


def test_a_second_submit_while_running_is_a_conflict() -> None:
    runner = FakeRunner()
    m = manager(runner)
    try:
        m.submit(spec())
        assert runner.running.wait(5)
        with pytest.raises(Conflict, match="is running"):
            m.submit(spec())
        m._scheduled_run("job")  # a schedule firing now is skipped, not a second run
        assert runner.runs == 1
    finally:
        runner.release.set()
        m.stop()


def test_cancel_cancels_the_spark_job_group_and_ends_cancelled() -> None:
    runner = FakeRunner()
    m = manager(runner)
    try:
        m.submit(spec())
        assert runner.running.wait(5)
        m.cancel("job")
        final = m.wait("job", 5)
        assert final.state is JobState.CANCELLED
        assert runner.cancelled_groups and runner.cancelled_groups[0].startswith("sluice-backfill-job-")
    finally:
        m.stop()


def test_a_failure_keeps_the_spark_message() -> None:
    m = manager(FakeRunner("fail"))
    try:
        m.submit(spec())
        final = m.wait("job", 5)
        assert final.state is JobState.FAILED
        assert final.error == 'PSQLException: ERROR: relation "nope" does not exist'
    finally:
        m.stop()


def test_bad_specs_and_unknown_jobs() -> None:
    m = manager(FakeRunner())
    try:
        with pytest.raises(BadRequest, match="source.topic"):
            m.submit({"id": "x", "kind": "topic_to_sink", "source": {}, "target": {"config": {"connector.class": "J"}}})
        with pytest.raises(NotFoundError):
            m.get("missing")
        with pytest.raises(NotFoundError):
            m.cancel("missing")
    finally:
        m.stop()


def test_scheduled_jobs_are_not_run_at_once_and_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "backfills.json"
    runner = FakeRunner()
    m = manager(runner, FileBackfillStore(path))
    try:
        info = m.submit(spec(schedule={"cron": "0 3 * * *"}))
        assert info["next_run"] is not None and "T03:00:00" in info["next_run"]
        time.sleep(0.1)
        assert runner.runs == 0
    finally:
        m.stop()
    # A run that was in progress when the worker died is FAILED after the restart.
    store = FileBackfillStore(path)
    job = store.get("job")
    assert job is not None
    store.put(StoredJob("job", job.spec, {"state": "RUNNING", "rows_done": 5}))
    restarted = manager(FakeRunner(), FileBackfillStore(path))
    try:
        info = restarted.get("job")
        assert info["schedule"]["cron"] == "0 3 * * *"
        assert info["next_run"] is not None
        assert info["status"]["state"] == "FAILED"
        assert "stopped while this run was in progress" in info["status"]["error"]
    finally:
        restarted.stop()


def test_the_last_state_is_persisted(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    runner = FakeRunner()
    runner.release.set()
    m = manager(runner, FileBackfillStore(path))
    try:
        m.submit(spec())
        m.wait("job", 5)
    finally:
        m.stop()
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    job = FileBackfillStore(path).get("job")
    assert job is not None and job.status["state"] == "SUCCEEDED" and job.status["rows_done"] == 100


def test_delete_forgets_the_job_and_its_schedule() -> None:
    m = manager(FakeRunner())
    try:
        m.submit(spec(schedule={"cron": "*/5 * * * *"}))
        m.delete("job")
        assert m.list() == []
        assert m._scheduler.get_job("job") is None
    finally:
        m.stop()
