"""The herder's ``TaskStatusListener``: statuses from runner threads, and automatic restarts."""

from __future__ import annotations

from collections.abc import Callable

from sluice.worker.herder.stores.status_store import StatusStore
from sluice.worker.observability.outages import DegradedNotice
from sluice.worker.observability.task_metrics import StartupCounters
from sluice.worker.restarts import TaskRestarter
from sluice.worker.runners import TaskRunner
from sluice.worker.status import ConnectorTaskId, State, Status


class StatusReporter:
    """Writes what runners report to the status store, and schedules restarts of failed tasks.

    Called on runner threads, so nothing here takes the herder's lock: the herder may hold it
    while it waits for this very runner to stop. What it needs of the herder comes as callables:
    ``trace`` (an error's status trace, secrets blanked out), ``live_runner`` (the runner the
    herder has for a task, read without the lock), ``restarts_allowed`` (``False`` while the
    herder stops, or the task's connector is gone), ``auto_restart`` (restart the task if the
    failed run is still its current one) and ``may_report`` (whether this worker's view of a task
    is current enough to report it stopped).
    """

    def __init__(
        self,
        *,
        worker_id: str,
        status: StatusStore,
        restarter: TaskRestarter,
        startups: StartupCounters,
        trace: Callable[[str, BaseException], str],
        live_runner: Callable[[ConnectorTaskId], TaskRunner | None],
        restarts_allowed: Callable[[ConnectorTaskId], bool],
        auto_restart: Callable[[ConnectorTaskId, TaskRunner | None], None],
        may_report: Callable[[], bool] = lambda: True,
    ) -> None:
        self.worker_id = worker_id
        self.status = status
        self.restarter = restarter
        self._startups = startups
        self._trace = trace
        self._live_runner = live_runner
        self._restarts_allowed = restarts_allowed
        self._auto_restart = auto_restart
        self._may_report = may_report

    def on_startup(self, task_id: ConnectorTaskId) -> None:
        self.restarter.on_started(task_id)
        self._startups.task_started(task_id)
        self.status.put_task(task_id, Status(State.RUNNING, self.worker_id))

    def on_pause(self, task_id: ConnectorTaskId) -> None:
        self._startups.task_started(task_id)
        self.status.put_task(task_id, Status(State.PAUSED, self.worker_id))

    def on_resume(self, task_id: ConnectorTaskId) -> None:
        self.status.put_task(task_id, Status(State.RUNNING, self.worker_id))

    def on_failure(self, task_id: ConnectorTaskId, error: BaseException) -> None:
        trace = self._trace(task_id.connector, error)
        self._startups.task_failed(task_id)
        failed = self._live_runner(task_id)
        scheduled = None
        if self._restarts_allowed(task_id) and not (failed is not None and failed.stopping):
            scheduled = self.restarter.on_failed(task_id, lambda: self._auto_restart(task_id, failed), error)
        if scheduled is None:
            self.status.put_task(task_id, Status(State.FAILED, self.worker_id, trace=trace))
            return
        attempt, _ = scheduled
        self.status.put_task(
            task_id,
            Status(
                State.RESTARTING,
                self.worker_id,
                trace=trace,
                restart_attempt=attempt,
                restart_attempts_max=self.restarter.policy.max_attempts,
            ),
        )

    def on_shutdown(self, task_id: ConnectorTaskId) -> None:
        if self._may_report():
            self.status.put_task(task_id, Status(State.UNASSIGNED, self.worker_id))

    def on_degraded(self, task_id: ConnectorTaskId, trace: str) -> None:
        # RUNNING, as Connect clients expect of a task that retries; the trace says what is wrong.
        if self._may_report():
            trace = self._trace(task_id.connector, DegradedNotice(trace))
            self.status.put_task(task_id, Status(State.RUNNING, self.worker_id, trace=trace))

    def on_recovered(self, task_id: ConnectorTaskId) -> None:
        if self._may_report():
            self.status.put_task(task_id, Status(State.RUNNING, self.worker_id))
