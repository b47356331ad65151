"""The lifecycle state machine shared by source and sink task runners."""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Callable
from typing import Protocol

from worker.logcontext import set_context
from worker.status import ConnectorTaskId, TargetState

log = logging.getLogger(__name__)


class TaskStatusListener(Protocol):
    """Receives a task's state changes (the herder writes them to the status store)."""

    def on_startup(self, task_id: ConnectorTaskId) -> None: ...

    def on_pause(self, task_id: ConnectorTaskId) -> None: ...

    def on_resume(self, task_id: ConnectorTaskId) -> None: ...

    def on_failure(self, task_id: ConnectorTaskId, error: BaseException) -> None: ...

    def on_shutdown(self, task_id: ConnectorTaskId) -> None: ...


class WorkerTask(abc.ABC):
    """Runs one task on a thread of its own and owns its state machine.

    States: created → running ⇄ paused → stopped, or → failed from any of them. The herder calls
    :meth:`start`, :meth:`transition_to` and :meth:`stop` from its own thread; everything the task
    itself does happens on the runner thread.
    """

    def __init__(self, task_id: ConnectorTaskId, listener: TaskStatusListener, initial_state: TargetState) -> None:
        self.id = task_id
        self._listener = listener
        self._target = initial_state
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._failed = False
        #: Topics this task produced to or consumed from (KIP-558); the herder reads it and resets
        #: it with :meth:`reset_active_topics`.
        self.active_topics: set[str] = set()
        #: Distributed mode: ``False`` while this worker may have lost its place in the group.
        self.fence: Callable[[], bool] | None = None
        self._thread = threading.Thread(target=self._run, name=f"task-{task_id}", daemon=True)

    # -- control (herder thread) ------------------------------------------------------------------

    def reset_active_topics(self) -> None:
        """Forget the topics used so far (``PUT /connectors/{c}/topics/reset``); using one again records it again."""
        self.active_topics.clear()

    def start(self) -> None:
        self._thread.start()

    def transition_to(self, target: TargetState) -> None:
        """Pause or resume; the runner thread notices between batches."""
        with self._cond:
            self._target = target
            self._cond.notify_all()
        self._on_transition(target)

    def stop(self) -> None:
        """Ask the task to stop; :meth:`await_stop` waits for it."""
        self._stopping.set()
        with self._cond:
            self._cond.notify_all()
        try:
            self._on_stop_requested()
        except Exception:  # stop must reach every task even if one misbehaves
            log.exception("Error while asking task %s to stop", self.id)

    def await_stop(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for the runner thread; ``True`` if it ended."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def failed(self) -> bool:
        return self._failed

    # -- runner thread --------------------------------------------------------------------------

    def _run(self) -> None:
        set_context(self.id.connector, self.id.task)
        try:
            self._initialize()
            if self.stopping:
                return
            if self._target is TargetState.PAUSED:
                self._listener.on_pause(self.id)
            else:
                self._listener.on_startup(self.id)
            self._execute()
        except BaseException as exc:  # the task's failure becomes its status, never a dead thread
            if self.stopping and not isinstance(exc, Exception):
                return
            self._failed = True
            log.error("Task %s failed: %s", self.id, exc, exc_info=exc)
            self._listener.on_failure(self.id, exc)
        finally:
            try:
                self._close()
            except Exception:
                log.exception("Error while closing task %s", self.id)
            if not self._failed:
                self._listener.on_shutdown(self.id)

    def _unfenced(self) -> bool:
        """``False`` while the worker may have lost this task to another worker: write nothing."""
        fence = self.fence
        return fence is None or fence()

    def _await_unpaused(self) -> bool:
        """Block while paused (or fenced); return ``False`` once the task should stop."""
        fence = self.fence
        if fence is not None and not fence():
            # The worker lost contact with its group: its work may soon run elsewhere, so write
            # nothing more until contact returns (or the herder stops this task, which it will).
            log.warning("Task %s holds: the worker is out of contact with its group", self.id)
            while not fence():
                if self._stopping.wait(0.1):
                    return False
        if self._target is not TargetState.PAUSED:
            return not self.stopping
        self._listener.on_pause(self.id)
        self._on_paused()
        with self._cond:
            while self._target is TargetState.PAUSED and not self.stopping:
                self._cond.wait(timeout=self._paused_wait_s())
                if self._target is TargetState.PAUSED and not self.stopping:
                    self._cond.release()
                    try:
                        self._while_paused()
                    finally:
                        self._cond.acquire()
        if self.stopping:
            return False
        self._on_resumed()
        self._listener.on_resume(self.id)
        return True

    def _paused_wait_s(self) -> float:
        return 1.0

    def _while_paused(self) -> None:  # noqa: B027 - hook
        """Called about once a second while paused (a sink keeps its consumer alive here)."""

    def _on_paused(self) -> None:  # noqa: B027 - hook
        pass

    def _on_resumed(self) -> None:  # noqa: B027 - hook
        pass

    def _on_transition(self, target: TargetState) -> None:  # noqa: B027 - hook
        pass

    @abc.abstractmethod
    def _initialize(self) -> None:
        """Create clients and start the task."""

    @abc.abstractmethod
    def _execute(self) -> None:
        """The main loop; returns when stopping."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Commit what can be committed, stop the task and close clients."""

    def _on_stop_requested(self) -> None:  # noqa: B027 - hook
        """Unblock the task (called on the herder thread)."""
