"""``task.executor=process``: each task runs in a child process of its own.

Why: the GIL holds one Python process to about one core of Python work, and a task thread that
hangs (a driver stuck in C code, a connector that ignores ``stop()``) can only be abandoned, never
ended. A task process uses a core of its own and can be killed.

How it fits: :class:`ProcessTaskRunner` has the interface the herders use on a
:class:`~worker.runners.base.WorkerTask` (``start``, ``transition_to``, ``stop``, ``await_stop``,
``failed``, ``active_topics``, ``fence``), so the herders do not know which executor runs a task.
The child (a *spawned* interpreter: librdkafka's threads do not survive ``fork``) builds the very
same runner with a :class:`~worker.worker.Worker` of its own and runs it on a thread, exactly as
the thread executor does. Two pipes connect it to the worker:

* **control**: target states, stop, logger levels set over the API (``PUT /admin/loggers``; the
  levels set before the child started are handed to it as it spawns), and the distributed fence
  go down (the fence every half second: a task process that stops hearing it, its worker frozen,
  holds its writes); the task's state changes
  (startup, pause, resume, degraded with its trace, recovered, failure with its trace, shutdown)
  and the topics it used come up and reach the herder's listener as if the task ran in-process;
  so do its error counters (when they change) and its ``GET /metrics`` snapshot (once a
  second, :data:`METRICS_RELAY_S`), which a scrape of the worker then reads.
* **offsets**: the worker's offset store stays single-writer in the worker process (the file
  store's file, the distributed store's producer); the child reads and writes it through calls
  answered by a thread of the runner.

A child that dies without saying why (SIGKILL, a segfault in a driver) is a task failure with the
exit code, so the restart policy brings it back; a child still running when the graceful stop
timeout ends is killed. A child dies with its worker (the kernel's parent-death signal), so a
SIGKILLed worker leaves no task writing on, exactly as with task threads.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from multiprocessing.connection import Connection
from typing import Any

from sluice.connectors.api import ConnectError
from sluice.offsets import OffsetStore
from sluice.worker.errors import RelayedErrorMetrics
from sluice.worker.log_levels import LOGGER_LEVELS, apply_logger_levels, set_logger_level
from sluice.worker.runners.base import TaskStatusListener
from sluice.worker.runtime import parent_death_signal
from sluice.worker.status import ConnectorTaskId, TargetState
from sluice.worker.task_metrics import register as register_task_metrics

log = logging.getLogger(__name__)

_SPAWN = multiprocessing.get_context("spawn")

#: How often the worker re-sends the distributed fence to a task process, and how long a task
#: process that stops hearing it (its worker frozen or stuck) keeps writing.
FENCE_REFRESH_S = 0.5
FENCE_SILENCE_S = 3.0
#: How often a task process sends its metrics snapshot (:mod:`sluice.worker.task_metrics`) up.
METRICS_RELAY_S = 1.0


class RemoteTaskError(ConnectError):
    """A task's failure in its child process; ``remote_trace`` is the child's full trace."""

    def __init__(self, message: str, remote_trace: str) -> None:
        super().__init__(message)
        self.remote_trace = remote_trace


class ProcessTaskRunner:
    """Runs one task in a child process; see the module docstring."""

    def __init__(
        self,
        task_id: ConnectorTaskId,
        *,
        worker_config_class: type,
        worker_config: Mapping[str, Any],
        connector_config: Mapping[str, Any],
        task_config: Mapping[str, Any],
        listener: TaskStatusListener,
        initial_state: TargetState,
        offset_store: OffsetStore,
    ) -> None:
        self.id = task_id
        self._listener = listener
        self._offset_store = offset_store
        #: Topics this task produced to or consumed from (KIP-558), as the child reports them.
        self.active_topics: set[str] = set()
        #: Distributed mode: ``False`` while this worker may have lost its place in the group.
        self.fence: Callable[[], bool] | None = None
        self._failed = False
        self._stopping = threading.Event()
        self._killed = False
        self._metrics = RelayedErrorMetrics(task_id)  # what the status shows under "errors"
        self._snapshot: dict[str, Any] | None = None  # the child's last metrics snapshot
        register_task_metrics(task_id, self)
        self._send_lock = threading.Lock()
        # Logger levels set over the API so far, filled in by start() (the child gets them as it spawns).
        self._log_levels: list[tuple[str, int]] = []
        self._unsubscribe_levels: Callable[[], None] | None = None
        self._control, child_control = _SPAWN.Pipe()
        self._offsets, child_offsets = _SPAWN.Pipe()
        settings = {**worker_config, "task.executor": "thread"}  # the child runs its one task on a thread
        self._process = _SPAWN.Process(
            target=_child_main,
            args=(
                task_id,
                worker_config_class,
                settings,
                dict(connector_config),
                dict(task_config),
                initial_state,
                child_control,
                child_offsets,
                logging.getLevelName(logging.getLogger().getEffectiveLevel()),
                self._log_levels,
                os.getpid(),
            ),
            name=f"sluice-task-{task_id}",
            daemon=True,
        )
        self._child_ends = (child_control, child_offsets)
        self._events = threading.Thread(target=self._read_events, name=f"task-{task_id}-events", daemon=True)
        self._offset_calls = threading.Thread(target=self._serve_offsets, name=f"task-{task_id}-offsets", daemon=True)

    # -- the herder's interface -------------------------------------------------------------------

    def start(self) -> None:
        # Subscribed before the snapshot is taken, so a level set while the child starts still reaches it.
        levels, self._unsubscribe_levels = LOGGER_LEVELS.subscribe(self._on_logger_level)
        self._log_levels[:] = levels
        try:
            _spawn(self._process)
        except BaseException:
            self._unsubscribe_levels()
            raise
        for end in self._child_ends:
            end.close()  # the child holds them now; EOF then means the child is gone
        self._events.start()
        self._offset_calls.start()
        log.info("Task %s runs in process %s", self.id, self._process.pid)

    def transition_to(self, target: TargetState) -> None:
        self._send(("target", target))

    def stop(self) -> None:
        self._stopping.set()
        self._send(("stop",))

    def reset_active_topics(self) -> None:
        self.active_topics.clear()
        self._send(("reset_topics",))

    def await_stop(self, timeout: float | None) -> bool:
        """Wait for the child; one still alive after ``timeout`` is killed (a thread could only be
        abandoned). ``True`` if it ended on its own."""
        self._process.join(timeout)
        if self._process.is_alive():
            log.error("Task %s did not stop in time: killing its process %s", self.id, self._process.pid)
            self._killed = True
            self._process.kill()
            self._process.join(5)
            return False
        if threading.current_thread() is not self._events:  # a listener callback may be the caller
            self._events.join(5)
        return True

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def failed(self) -> bool:
        return self._failed

    def metrics_snapshot(self) -> dict[str, Any] | None:
        """The task's metrics as its process last sent them; ``None`` once it has ended."""
        if self._process.exitcode is not None:
            return None
        return self._snapshot

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def _on_logger_level(self, name: str, level: int) -> None:
        """A logger level set in the worker (``PUT /admin/loggers/{name}``): the child sets it too."""
        self._send(("log_level", name, level))

    # -- worker side threads ----------------------------------------------------------------------

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock:
            try:
                self._control.send(message)
            except (OSError, ValueError):
                pass  # the child is gone; _read_events reports how it ended

    def _read_events(self) -> None:
        listener, task_id = self._listener, self.id
        ended = False
        last_fence = 0.0
        while True:
            fence = self.fence
            now = time.monotonic()
            if fence is not None and now - last_fence >= FENCE_REFRESH_S:
                # Sent again and again, not only on change: a child that stops hearing it (this
                # process frozen, say) holds its task's writes, as a frozen worker's threads would.
                last_fence = now
                self._send(("fence", fence()))
            try:
                if not self._control.poll(0.1):
                    continue
                event, *args = self._control.recv()
            except (EOFError, OSError):
                break
            if event == "startup":
                listener.on_startup(task_id)
            elif event == "pause":
                listener.on_pause(task_id)
            elif event == "resume":
                listener.on_resume(task_id)
            elif event == "degraded":
                listener.on_degraded(task_id, args[0])
            elif event == "recovered":
                listener.on_recovered(task_id)
            elif event == "topics":
                self.active_topics.update(args[0])
            elif event == "metrics":
                self._metrics.latest = args[0]
            elif event == "task_metrics":
                self._snapshot = args[0]
            elif event == "failure":
                ended = self._failed = True
                listener.on_failure(task_id, RemoteTaskError(args[0], args[1]))
            elif event == "shutdown":
                ended = True
                listener.on_shutdown(task_id)
        if self._unsubscribe_levels is not None:
            self._unsubscribe_levels()
        self._process.join(10)
        if not ended and not self._killed:
            code = self._process.exitcode
            how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
            self._failed = True
            error = ConnectError(f"The process of task {task_id} {how} before the task stopped")
            log.error("%s", error)
            listener.on_failure(task_id, error)
        self._control.close()

    def _serve_offsets(self) -> None:
        store = self._offset_store
        while True:
            try:
                op, args = self._offsets.recv()
            except (EOFError, OSError):
                break
            try:
                if op not in ("get", "put", "all"):
                    raise ValueError(f"unknown offset store call {op!r}")
                reply: tuple[str, Any] = ("ok", getattr(store, op)(*args))
            except Exception as exc:  # the child raises it as its own
                reply = ("error", f"{type(exc).__name__}: {exc}")
            try:
                self._offsets.send(reply)
            except (OSError, ValueError):
                break
        self._offsets.close()

    def __repr__(self) -> str:
        return f"ProcessTaskRunner({self.id}, pid={self._process.pid})"


# -- spawning ---------------------------------------------------------------------------------------

_spawn_lock = threading.Lock()
_spawn_requests: queue.Queue[tuple[Any, threading.Event, list[BaseException]]] = queue.Queue()
_spawner: threading.Thread | None = None


def _spawn(process: Any) -> None:
    """Start ``process`` from one long-lived thread of this process.

    The child asks Linux to kill it when the thread that created it ends (``PR_SET_PDEATHSIG``,
    which follows the creating *thread*): created from a REST or herder thread, a task process
    could die with that thread; created here, it dies exactly when the worker process does, like
    a task thread would — a SIGKILLed worker leaves no task writing on.
    """
    global _spawner
    with _spawn_lock:
        if _spawner is None or not _spawner.is_alive():
            _spawner = threading.Thread(target=_serve_spawns, name="task-process-spawner", daemon=True)
            _spawner.start()
    done, errors = threading.Event(), list[BaseException]()
    _spawn_requests.put((process, done, errors))
    done.wait()
    if errors:
        raise errors[0]


def _serve_spawns() -> None:
    while True:
        process, done, errors = _spawn_requests.get()
        try:
            process.start()
        except BaseException as exc:  # handed to the caller
            errors.append(exc)
        finally:
            done.set()


def _die_with_worker(worker_pid: int) -> None:
    """In the child: be SIGKILLed when the worker's spawning thread (so the worker) ends."""
    arm = parent_death_signal()
    if arm is not None:
        arm(signal.SIGKILL, worker_pid)


# -- the child process ----------------------------------------------------------------------------


class _PipeOffsetStore:
    """The worker's offset store, called over a pipe (one call at a time)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def _call(self, op: str, *args: Any) -> Any:
        with self._lock:
            try:
                self._conn.send((op, args))
                status, result = self._conn.recv()
            except (EOFError, OSError) as exc:
                raise ConnectError("The worker process is gone: its offset store cannot be reached") from exc
        if status != "ok":
            raise ConnectError(f"Offset store call {op} failed in the worker: {result}")
        return result

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def get(self, connector: str, partitions: Sequence[Mapping[str, Any]]) -> list[Any]:
        return self._call("get", connector, [dict(p) for p in partitions])  # type: ignore[no-any-return]

    def put(self, connector: str, offsets: Sequence[tuple[Mapping[str, Any], Mapping[str, Any] | None]]) -> None:
        self._call("put", connector, [(dict(p), None if o is None else dict(o)) for p, o in offsets])

    def all(self, connector: str) -> list[Any]:
        return self._call("all", connector)  # type: ignore[no-any-return]

    def delete(self, connector: str) -> None:
        raise ConnectError("A task cannot delete its connector's offsets")


class _PipeListener:
    """Sends the task's state changes up the control pipe."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None]) -> None:
        self._send = send

    def on_startup(self, task_id: ConnectorTaskId) -> None:
        self._send(("startup",))

    def on_pause(self, task_id: ConnectorTaskId) -> None:
        self._send(("pause",))

    def on_resume(self, task_id: ConnectorTaskId) -> None:
        self._send(("resume",))

    def on_failure(self, task_id: ConnectorTaskId, error: BaseException) -> None:
        from sluice.worker.status import format_trace

        self._send(("failure", str(error), format_trace(error)))

    def on_shutdown(self, task_id: ConnectorTaskId) -> None:
        self._send(("shutdown",))

    def on_degraded(self, task_id: ConnectorTaskId, trace: str) -> None:
        self._send(("degraded", trace))

    def on_recovered(self, task_id: ConnectorTaskId) -> None:
        self._send(("recovered",))


def _child_main(
    task_id: ConnectorTaskId,
    config_class: Any,
    worker_config: dict[str, Any],
    connector_config: dict[str, Any],
    task_config: dict[str, Any],
    initial_state: TargetState,
    control: Connection,
    offsets: Connection,
    log_level: str,
    log_levels: list[tuple[str, int]],
    worker_pid: int,
) -> None:
    """Entry point of a task process: build the task's runner as the worker would, run it, and
    relay between it and the worker until it ends."""
    from sluice.plugins import PluginRegistry
    from sluice.worker.logcontext import configure_logging, set_context
    from sluice.worker.runtime import tune_gc
    from sluice.worker.worker import Worker

    _die_with_worker(worker_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the worker's to handle, then it stops us
    configure_logging(log_level)
    apply_logger_levels(log_levels)  # what PUT /admin/loggers set in the worker before this task started
    set_context(task_id.connector, task_id.task)
    lock = threading.Lock()

    def send(message: tuple[Any, ...]) -> None:
        with lock:
            try:
                control.send(message)
            except (OSError, ValueError):
                pass

    listener = _PipeListener(send)
    try:
        config = config_class.from_mapping(worker_config)
        registry = PluginRegistry([p.strip() for p in config.plugin_path.split(",") if p.strip()])
        worker = Worker(config, registry, _PipeOffsetStore(offsets))  # type: ignore[arg-type]
        validated = worker.validate(connector_config)
        runner = worker.build_task(task_id, validated, task_config, listener, initial_state)
    except Exception as exc:
        listener.on_failure(task_id, exc)
        return
    fence_open = threading.Event()
    fence_open.set()
    heard = [time.monotonic(), False]  # when the worker last sent its fence; whether it ever did

    def unfenced() -> bool:
        # Distributed mode: only while the worker says so, and has said it recently.
        return fence_open.is_set() and (not heard[1] or time.monotonic() - heard[0] < FENCE_SILENCE_S)

    runner.fence = unfenced
    runner.start()
    tune_gc()  # the worker's process-wide settings, in this process too
    reported: set[str] = set()
    last_metrics: dict[str, int] = {}
    next_snapshot = 0.0
    while not runner.await_stop(0):
        try:
            if control.poll(0.2):
                command, *args = control.recv()
                if command == "target":
                    runner.transition_to(args[0])
                elif command == "stop":
                    runner.stop()
                elif command == "reset_topics":
                    runner.reset_active_topics()
                    reported.clear()
                elif command == "log_level":
                    set_logger_level(args[0], args[1])
                elif command == "fence":
                    heard[0], heard[1] = time.monotonic(), True
                    (fence_open.set if args[0] else fence_open.clear)()
        except (EOFError, OSError):
            # The worker is gone (where the parent-death signal does not exist): end as it did,
            # without committing anything more; what was not committed is delivered again.
            log.error("Task %s lost its worker process; exiting", task_id)
            os._exit(1)
        if runner.active_topics - reported:
            reported |= runner.active_topics
            send(("topics", sorted(reported)))
        last_metrics = _relay_metrics(runner, last_metrics, send)
        if time.monotonic() >= next_snapshot:
            next_snapshot = time.monotonic() + METRICS_RELAY_S
            send(("task_metrics", runner.metrics_snapshot()))
    if runner.active_topics - reported:
        send(("topics", sorted(runner.active_topics)))
    _relay_metrics(runner, last_metrics, send)


def _relay_metrics(runner: Any, last: dict[str, int], send: Callable[[tuple[Any, ...]], None]) -> dict[str, int]:
    """Send the task's error counters up when they changed; the ones sent."""
    retry = getattr(runner, "retry", None)
    metrics = retry.metrics() if retry is not None else {}
    if metrics != last:
        send(("metrics", metrics))
    return metrics
