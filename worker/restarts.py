"""Automatic restarts of failed tasks, with exponential backoff up to a budget.

Kafka Connect leaves a FAILED task failed until someone calls the restart endpoint, so a broker
blip at 3 a.m. stops a pipeline until morning. Sluice restarts a failed task by itself after
``task.restart.backoff.initial.ms``, doubling the wait (with ±20 % jitter so a cluster's tasks do
not retry in lockstep) up to ``task.restart.backoff.max.ms``, at most
``task.restart.max.attempts`` times in a row. While it waits, the task's status is
``RESTARTING`` with the failure's trace and the attempt number; once the budget is spent the
task stays ``FAILED``. A task that ran for longer than the maximum backoff before failing starts
a fresh budget, and so does a restart requested over REST or a new configuration.

A failure for lack of file descriptors (``EMFILE``/``ENFILE`` anywhere in the error's chain) is
the process's condition, not the task's: during a flood of connections every task that opens a
file or socket fails at once, and within the budget's few attempts. Such a restart spends none of
the budget and is retried, with the same backoff, until descriptors are back, so the worker
recovers by itself; an automatic restart that itself fails that way is scheduled again.
"""

from __future__ import annotations

import errno
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sluice.worker.status import ConnectorTaskId

log = logging.getLogger(__name__)

#: errno values meaning the process (EMFILE) or the system (ENFILE) has no file descriptor left.
_NO_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})
#: How those errors read once an error crossed a process boundary or was re-raised as text
#: (a task host's trace, a driver's message): "[Errno 24] Too many open files".
_NO_DESCRIPTORS_TEXT = ("Too many open files", f"[Errno {errno.EMFILE}]", f"[Errno {errno.ENFILE}]")


def lacks_descriptors(error: BaseException | None) -> bool:
    """Whether ``error``, its causes or contexts (or an exception group's members) ran out of file descriptors."""
    seen: set[int] = set()
    pending = [error] if error is not None else []
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _NO_DESCRIPTORS:
            return True
        if any(text in str(current) for text in _NO_DESCRIPTORS_TEXT):
            return True
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
    return False


@dataclass(frozen=True)
class RestartPolicy:
    """How failed tasks are restarted (worker keys ``task.restart.*``); ``max_attempts=0`` turns it off."""

    max_attempts: int = 3
    initial_backoff_ms: int = 1_000
    max_backoff_ms: int = 60_000

    def backoff_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """Wait before restart ``attempt`` (1-based), jittered by ±20 %."""
        base = min(self.max_backoff_ms, self.initial_backoff_ms * 2 ** max(0, attempt - 1))
        jitter = (rng or random).uniform(0.8, 1.2)
        return min(self.max_backoff_ms, base * jitter) / 1000


@dataclass
class _Attempts:
    count: int = 0
    #: Restarts in a row after a lack of descriptors: they set the backoff, not the budget.
    shortages: int = 0
    started: float | None = None
    timer: threading.Timer | None = None


class TaskRestarter:
    """Schedules restarts of failed tasks; thread-safe.

    ``on_started`` marks a run's start; ``on_failed`` returns the attempt number scheduled
    (``None`` when the budget is spent or restarts are off) and calls ``restart`` after the
    backoff on a timer thread; ``reset`` forgets a task's attempts (manual restart, new config,
    deletion) and cancels a pending restart. A failure for lack of descriptors (``error``, see
    :func:`lacks_descriptors`) is scheduled without spending an attempt: the number returned is
    the attempts spent so far.
    """

    def __init__(self, policy: RestartPolicy, clock: Callable[[], float] = time.monotonic) -> None:
        self.policy = policy
        self._clock = clock
        self._lock = threading.Lock()
        self._tasks: dict[ConnectorTaskId, _Attempts] = {}

    def on_started(self, task_id: ConnectorTaskId) -> None:
        with self._lock:
            self._tasks.setdefault(task_id, _Attempts()).started = self._clock()

    def on_failed(
        self, task_id: ConnectorTaskId, restart: Callable[[], None], error: BaseException | None = None
    ) -> tuple[int, float] | None:
        """Schedule ``restart``; returns ``(attempt, delay_s)`` or ``None`` if no restart is due."""
        if self.policy.max_attempts <= 0:
            return None
        shortage = lacks_descriptors(error)
        with self._lock:
            entry = self._tasks.setdefault(task_id, _Attempts())
            ran_for = self._clock() - entry.started if entry.started is not None else 0.0
            if ran_for * 1000 > self.policy.max_backoff_ms:
                entry.count = 0  # it ran long enough: this is a new problem, with a new budget
                entry.shortages = 0
            if shortage:
                entry.shortages += 1
                attempt = entry.count
                delay = self.policy.backoff_s(entry.shortages)
            else:
                if entry.count >= self.policy.max_attempts:
                    return None
                entry.count += 1
                entry.shortages = 0
                attempt = entry.count
                delay = self.policy.backoff_s(attempt)
            if entry.timer is not None:
                entry.timer.cancel()
            timer = self._schedule(task_id, restart, delay)
            entry.timer = timer
        timer.start()
        if shortage:
            log.info(
                "Task %s failed for lack of file descriptors; restarting it in %.1fs (spends no attempt)",
                task_id,
                delay,
            )
        else:
            log.info(
                "Task %s failed; restarting it in %.1fs (attempt %d of %d)",
                task_id,
                delay,
                attempt,
                self.policy.max_attempts,
            )
        return attempt, delay

    def _schedule(self, task_id: ConnectorTaskId, restart: Callable[[], None], delay: float) -> threading.Timer:
        """A timer (not started) that calls ``restart`` after ``delay`` unless reset or rescheduled meanwhile."""

        def fire() -> None:
            with self._lock:
                current = self._tasks.get(task_id)
                if current is None or current.timer is not timer:
                    return  # reset or rescheduled meanwhile
                current.timer = None
            try:
                restart()
            except Exception as exc:
                if lacks_descriptors(exc):
                    # Starting the task needed descriptors too (a client, a pipe): try again later.
                    log.warning("Automatic restart of task %s failed for lack of file descriptors: %s", task_id, exc)
                    self.on_failed(task_id, restart, exc)
                else:
                    log.exception("Automatic restart of task %s failed", task_id)

        timer = threading.Timer(delay, fire)
        timer.daemon = True
        timer.name = f"restart-{task_id}"
        return timer

    def attempts(self, task_id: ConnectorTaskId) -> int:
        with self._lock:
            entry = self._tasks.get(task_id)
            return entry.count if entry else 0

    def reset(self, task_id: ConnectorTaskId) -> None:
        with self._lock:
            entry = self._tasks.pop(task_id, None)
        if entry is not None and entry.timer is not None:
            entry.timer.cancel()

    def reset_connector(self, connector: str) -> None:
        with self._lock:
            ids = [t for t in self._tasks if t.connector == connector]
        for task_id in ids:
            self.reset(task_id)

    def close(self) -> None:
        with self._lock:
            entries = list(self._tasks.values())
            self._tasks.clear()
        for entry in entries:
            if entry.timer is not None:
                entry.timer.cancel()
