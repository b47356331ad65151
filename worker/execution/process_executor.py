"""``task.executor=process``: tasks run as threads of a few task host processes, one per core.

Why: the GIL holds one Python process to about one core of Python work, and a task thread that
hangs (a driver stuck in C code, a connector that ignores ``stop()``) can only be abandoned, never
ended. Hosts use every core and can be killed; sharing a host between tasks keeps the cost of a
task near that of a thread (a process per task cost about 60 MB each).

How it fits: :class:`ProcessTaskRunner` is a :class:`~sluice.worker.runners.base.TaskRunner`, the
interface the herders drive (``start``, ``transition_to``, ``stop``, ``await_stop``, ``failed``,
``active_topics``, ``fence``, ``metrics_snapshot``), as the thread runners are, so the herders do
not know which executor runs a task. :class:`TaskHostPool` places each task on the least loaded host (starting
hosts up to ``task.host.processes``, by default one per core) and the host builds the very same
runner the thread executor would (:mod:`sluice.worker.execution.task_host`, :mod:`sluice.worker.execution.task_builder`).

Hosts are forked from a fork server (``multiprocessing``'s ``forkserver``) that imported the
host's code, every plugin and the task code of ``task.host.preload``'s connectors, and then froze
them (:mod:`sluice.worker.execution.task_host_preload`): a host starts in milliseconds and shares
those pages with the fork server and its sibling hosts. Any other task's code (and its drivers) is
imported by the host that starts the task. The
worker itself is never forked: librdkafka's threads and the REST server's do not survive ``fork``.

A hung task (still running when the graceful stop timeout ends) is ended by killing its host.
Its siblings are moved off first, in the background: each is stopped in the doomed host (it commits
its offsets as in any stop) and started again in another host from where it stopped; then the host
is SIGKILLed. A sibling that does not stop in time either goes down with the host and is reported
FAILED, so the restart policy brings it back. A host that dies without being told (SIGKILL, a
segfault in a driver) fails each of its tasks with the exit code, and the restart policy brings
them back in a new host. Hosts die with the worker: the fork server ends when the worker does, and
each host has the kernel's parent-death signal set on it.

Nothing polls while tasks are idle: each host's events and offset calls are read by threads of the
worker that block in ``recv()``; the host sends what changed in its tasks' figures at most once a
second; only in distributed mode does the worker send each host its fence twice a second (a host
that stops hearing it, its worker frozen, holds its tasks' writes).
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sluice.connectors.api import ConnectError
from sluice.offsets import OffsetStore
from sluice.worker.errors import RelayedErrorMetrics
from sluice.worker.execution import task_host
from sluice.worker.observability.log_levels import LOGGER_LEVELS
from sluice.worker.observability.tap import Tapped, next_tap_id
from sluice.worker.observability.task_metrics import register as register_task_metrics
from sluice.worker.runners.base import TaskStatusListener
from sluice.worker.status import ConnectorTaskId, TargetState

log = logging.getLogger(__name__)

_FORKSERVER = multiprocessing.get_context("forkserver")
_PRELOAD = "sluice.worker.execution.task_host_preload"

#: How often the worker re-sends the distributed fence to each host (see task_host.FENCE_SILENCE_S).
FENCE_REFRESH_S = 0.5


def default_host_processes() -> int:
    """One host per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class RemoteTaskError(ConnectError):
    """A task's failure in its host process; ``remote_trace`` is the host's full trace."""

    def __init__(self, message: str, remote_trace: str) -> None:
        super().__init__(message)
        self.remote_trace = remote_trace


class ProcessTaskRunner:
    """One task run by a host process, as the herder sees it (a
    :class:`~sluice.worker.runners.base.TaskRunner`); see the module docstring."""

    def __init__(
        self,
        task_id: ConnectorTaskId,
        pool: TaskHostPool,
        connector_config: Mapping[str, Any],
        task_config: Mapping[str, Any],
        listener: TaskStatusListener,
        initial_state: TargetState,
    ) -> None:
        self.id = task_id
        self._pool = pool
        self._connector_config = dict(connector_config)
        self._task_config = dict(task_config)
        self._listener = listener
        self._target = initial_state
        #: Topics this task produced to or consumed from (KIP-558), as its host reports them.
        self.active_topics: set[str] = set()
        #: Distributed mode: ``False`` while this worker may have lost its place in the group.
        self.fence: Callable[[], bool] | None = None
        self._failed = False
        self._killed = False  # its host was killed because this task hung
        self._stopping = threading.Event()
        self._ended = threading.Event()
        self._lock = threading.Lock()  # guards the host, the run key and a move
        self._host: TaskHostProcess | None = None
        self._key = -1
        self._move_done: threading.Event | None = None  # set while the task is being moved off its host
        self._metrics = RelayedErrorMetrics(task_id)  # what the status shows under "errors"
        self._snapshot: dict[str, Any] | None = None  # the host's last metrics snapshot of this task
        register_task_metrics(task_id, self)

    # -- the herder's interface -------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            self._start_run()
        if self.fence is not None:
            self._pool.send_fences()

    def transition_to(self, target: TargetState) -> None:
        with self._lock:
            self._target = target
            if self._host is not None:
                self._host.send(("target", self._key, target))

    def stop(self) -> None:
        with self._lock:
            self._stopping.set()
            if self._host is not None:
                self._host.send(("stop", self._key))

    def reset_active_topics(self) -> None:
        self.active_topics.clear()
        with self._lock:
            if self._host is not None:
                self._host.send(("reset_topics", self._key))

    def await_stop(self, timeout: float | None) -> bool:
        """Wait for the task to end; one still running after ``timeout`` has its host killed
        (its siblings moved off first). ``True`` if it ended on its own."""
        if self._ended.wait(timeout):
            return True
        with self._lock:
            host = self._host
        if host is None:
            return False
        if not self._killed:
            log.error("Task %s did not stop in time: killing its process %s", self.id, host.pid)
            self._killed = True
            self._pool.evict(host, self)
        return False

    def wait_ended(self, timeout: float | None) -> bool:
        return self._ended.wait(timeout)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def failed(self) -> bool:
        return self._failed

    def metrics_snapshot(self) -> dict[str, Any] | None:
        """The task's metrics as its host last sent them; ``None`` once it has ended."""
        return None if self._ended.is_set() else self._snapshot

    @property
    def pid(self) -> int | None:
        host = self._host
        return host.pid if host is not None else None

    # -- moving off a host (the pool's eviction thread) -------------------------------------------

    def begin_move(self, host: TaskHostProcess) -> bool:
        """Stop this run in ``host`` to start it again elsewhere; ``False`` if the task is ending anyway."""
        with self._lock:
            if self._stopping.is_set() or self._ended.is_set() or self._host is not host:
                return False
            self._move_done = threading.Event()
            host.send(("stop", self._key))
            return True

    def finish_move(self, timeout: float) -> None:
        """Once the run in the old host ended, start the task in another; if it does not end in
        ``timeout`` it goes down with the old host (a failure the restart policy repairs)."""
        done = self._move_done
        if done is None or not done.wait(timeout):
            return
        with self._lock:
            self._move_done = None
            if self._ended.is_set():
                return
            if self._stopping.is_set():  # the herder stopped it meanwhile: that run's end is its end
                self._listener.on_shutdown(self.id)
                self._ended.set()
                return
            old = self._host
            self._start_run()
        log.info("Task %s moved from host process %s to %s", self.id, old.pid if old else None, self.pid)

    def _start_run(self) -> None:
        self._host, self._key = self._pool.place(self)
        self._host.send(
            (
                "start",
                self._key,
                self.id,
                self._connector_config,
                self._task_config,
                self._target,
                self.fence is not None,
            )
        )

    # -- what the host says (its reader thread) ---------------------------------------------------

    def on_event(self, event: str, args: list[Any]) -> None:
        listener, task_id = self._listener, self.id
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
        elif event == "failure":
            self._failed = True
            listener.on_failure(task_id, RemoteTaskError(args[0], args[1]))
        elif event == "shutdown" and self._move_done is None:  # a move's stop is no shutdown
            listener.on_shutdown(task_id)

    def on_changes(self, changes: Mapping[str, Any]) -> None:
        self.active_topics.update(changes.get("topics", ()))
        if "errors" in changes:
            self._metrics.latest = changes["errors"]
        if "snapshot" in changes:
            self._snapshot = changes["snapshot"]

    def on_ended(self) -> None:
        done = self._move_done
        if done is not None:
            done.set()
        else:
            self._ended.set()

    def on_host_gone(self, exitcode: int | None) -> None:
        """The host died with this run in it."""
        if not self._killed and not self._ended.is_set():
            how = (
                f"was killed by signal {-exitcode}"
                if exitcode is not None and exitcode < 0
                else f"exited with code {exitcode}"
            )
            self._failed = True
            error = ConnectError(f"The process of task {self.id} {how} before the task stopped")
            log.error("%s", error)
            self._listener.on_failure(self.id, error)
        self._ended.set()
        done = self._move_done
        if done is not None:
            done.set()

    def __repr__(self) -> str:
        return f"ProcessTaskRunner({self.id}, pid={self.pid})"


class TaskHostProcess:
    """The worker's end of one task host process: its connections and the threads reading them."""

    def __init__(self, pool: TaskHostPool, number: int, levels: list[tuple[str, int]]) -> None:
        self._pool = pool
        self._control, child_control = _FORKSERVER.Pipe()
        self._offsets, child_offsets = _FORKSERVER.Pipe()
        self._send_lock = threading.Lock()
        #: The runs in this host, by run key.
        self.runs: dict[int, ProcessTaskRunner] = {}
        self.accepting = True  # False once it is to be killed
        self.process = _FORKSERVER.Process(
            target=task_host.main,
            args=(
                pool.config_class,
                pool.worker_config,
                child_control,
                child_offsets,
                logging.getLevelName(logging.getLogger().getEffectiveLevel()),
                levels,
                os.getpid(),
                list(pool.plugin_modules),
                pool.temp_root,
            ),
            name=f"sluice-task-host-{number}",
            daemon=True,
        )
        self.process.start()
        for end in (child_control, child_offsets):
            end.close()  # the host holds them now; EOF then means the host is gone
        self.pid = self.process.pid
        threading.Thread(target=self._read_events, name=f"task-host-{number}-events", daemon=True).start()
        threading.Thread(target=self._serve_offsets, name=f"task-host-{number}-offsets", daemon=True).start()
        log.info("Task host process %s started", self.pid)

    def send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock:
            try:
                self._control.send(message)
            except (OSError, ValueError):
                pass  # the host is gone; _read_events reports how it ended

    def kill(self) -> None:
        self.accepting = False
        self.process.kill()
        self.process.join(5)

    def _read_events(self) -> None:
        while True:
            try:
                kind, *args = self._control.recv()
            except (EOFError, OSError):
                break
            if kind == "event":
                run = self.runs.get(args[0])
                if run is not None:
                    run.on_event(args[1], args[2:])
            elif kind == "relay":
                for key, changes in args[0].items():
                    if (run := self.runs.get(key)) is not None:
                        run.on_changes(changes)
            elif kind == "tapped":
                self._pool.tapped(args[0], args[1])
            elif kind == "ended":
                run = self._pool.run_ended(self, args[0])
                if run is not None:
                    run.on_changes(args[1])
                    run.on_ended()
        self.accepting = False
        self.process.join(10)
        self._pool.host_gone(self)
        for run in list(self.runs.values()):
            run.on_host_gone(self.process.exitcode)
        self.runs.clear()
        self._control.close()

    def _hosted_connectors(self) -> set[str]:
        """The connectors with a task in this host now (a run is forgotten once its task ended)."""
        return {run.id.connector for run in list(self.runs.values())}

    def _serve_offsets(self) -> None:
        store = self._pool.offset_store
        # What a task may ask of the worker's store (never delete): the host's _PipeOffsetStore.
        calls: dict[str, Callable[..., Any]] = {
            "get": store.get,
            "put": store.put,
            "all": store.all,
            "read_to_end": store.read_to_end,
        }
        while True:
            try:
                op, args = self._offsets.recv()
            except (EOFError, OSError):
                break
            try:
                call = calls.get(op)
                if call is None:
                    raise ValueError(f"unknown offset store call {op!r}")
                # A host is trusted with the offsets of its own tasks' connectors only: code that
                # took a host over must not read or rewrite another connector's position.
                if op != "read_to_end" and (not args or args[0] not in self._hosted_connectors()):
                    raise PermissionError(f"connector {args[0] if args else None!r} has no task in this task host")
                reply: tuple[str, Any] = ("ok", call(*args))
            except Exception as exc:  # noqa: BLE001 - the host raises it as its own
                reply = ("error", f"{type(exc).__name__}: {exc}")
            try:
                self._offsets.send(reply)
            except (OSError, ValueError):
                break
        self._offsets.close()


class TaskHostPool:
    """The task host processes of one worker; see the module docstring."""

    def __init__(
        self,
        config_class: type,
        worker_config: Mapping[str, Any],
        offset_store: OffsetStore,
        *,
        size: int = 0,
        graceful_timeout_s: float = 5.0,
        plugin_modules: Sequence[str] = (),
        preload_modules: Sequence[str] = (),
    ) -> None:
        """``preload_modules``: what the fork server imports besides the hosts' own code, before it
        forks the first host (``task.host.preload``'s task modules)."""
        self.config_class = config_class
        #: The modules the worker imported from ``plugin.path``: a host imports exactly these (see
        #: PluginRegistry), never what appeared there since, even when a request starts it.
        self.plugin_modules: list[str] = list(plugin_modules)
        self.worker_config = {**worker_config, "task.executor": "thread"}  # a host runs its tasks on threads
        #: Each host's temporary directory is made inside this one, the only place a sandboxed host
        #: writes besides connector.allowed.paths (see task_host.confine); removed at close.
        self.temp_root = tempfile.mkdtemp(prefix="sluice-task-hosts-")
        self.offset_store = offset_store
        self.size = size or default_host_processes()
        self._graceful_s = graceful_timeout_s
        self._lock = threading.RLock()
        self._hosts: list[TaskHostProcess] = []
        self._keys = itertools.count()
        self._numbers = itertools.count(1)
        self._closed = threading.Event()
        self._fence_thread: threading.Thread | None = None
        self._taps: dict[int, Callable[[list[Tapped]], None]] = {}
        # Logger levels set over the API (PUT /admin/loggers): a new host gets them as it starts.
        self._levels, self._unsubscribe = LOGGER_LEVELS.subscribe(self._on_logger_level)
        # The task modules first: the preload module freezes what was imported before it.
        _FORKSERVER.set_forkserver_preload([*preload_modules, _PRELOAD])

    def place(self, run: ProcessTaskRunner) -> tuple[TaskHostProcess, int]:
        """The host that is to run ``run`` (the least loaded, or a new one while there are fewer
        than :attr:`size`), and the run's key there."""
        with self._lock:
            if self._closed.is_set():
                raise ConnectError("The worker is stopping: no task host takes new tasks")
            live = [h for h in self._hosts if h.accepting]
            if len(live) < self.size:
                host = TaskHostProcess(self, next(self._numbers), list(self._levels))
                self._hosts.append(host)
            else:
                host = min(live, key=lambda h: len(h.runs))
            key = next(self._keys)
            host.runs[key] = run
            return host, key

    def run_ended(self, host: TaskHostProcess, key: int) -> ProcessTaskRunner | None:
        """Forget a run that ended in ``host``; a host left without runs ends (a new one forks in
        milliseconds), so a worker without tasks has no host process."""
        with self._lock:
            run = host.runs.pop(key, None)
            if not host.runs and host.accepting:
                host.accepting = False
                host.send(("exit",))
            return run

    def host_gone(self, host: TaskHostProcess) -> None:
        with self._lock:
            if host in self._hosts:
                self._hosts.remove(host)

    def evict(self, host: TaskHostProcess, hung: ProcessTaskRunner) -> None:
        """Kill ``host``, where ``hung`` does not stop, once its other tasks moved off (in the background)."""
        with self._lock:
            if not host.accepting:
                return  # already on its way out
            host.accepting = False
        threading.Thread(target=self._evict, args=(host, hung), name=f"task-host-evict-{host.pid}", daemon=True).start()

    def _evict(self, host: TaskHostProcess, hung: ProcessTaskRunner) -> None:
        siblings = [run for run in list(host.runs.values()) if run is not hung]
        moving = [run for run in siblings if run.begin_move(host)]
        deadline = time.monotonic() + self._graceful_s
        for run in siblings:
            if run in moving:
                run.finish_move(max(0.0, deadline - time.monotonic()))
            else:
                run.wait_ended(max(0.0, deadline - time.monotonic()))  # stopping anyway: let it finish
        log.info("Killing task host process %s (%d task(s) moved to other hosts)", host.pid, len(moving))
        host.kill()

    def adopt_plugin_modules(self, modules: Sequence[str]) -> None:
        """After the worker's plugin refresh: hosts started from now on import ``modules``, and the
        running ones import those they lack before their next task starts."""
        with self._lock:
            self.plugin_modules = list(modules)
            hosts = list(self._hosts)
        for host in hosts:
            host.send(("plugins", list(modules)))

    def send_fences(self) -> None:
        """Start sending each host the fence (distributed mode), unless already started."""
        with self._lock:
            if self._fence_thread is None:
                self._fence_thread = threading.Thread(target=self._fence_loop, name="task-host-fence", daemon=True)
                self._fence_thread.start()

    def _fence_loop(self) -> None:
        # Sent again and again, not only on change: a host that stops hearing it (this process
        # frozen, say) holds its tasks' writes, as a frozen worker's threads would.
        while not self._closed.wait(FENCE_REFRESH_S):
            with self._lock:
                hosts = list(self._hosts)
            for host in hosts:
                fence = next((run.fence for run in list(host.runs.values()) if run.fence is not None), None)
                if fence is not None:  # every run of a worker has the same fence: its herder's
                    host.send(("fence", fence()))

    def tap(self, connector: str, count: int, deliver: Callable[[list[Tapped]], None]) -> int:
        """Ask every host for ``connector``'s next ``count`` records (the live tap); they arrive
        through ``deliver`` until :meth:`untap`."""
        tap_id = next_tap_id()
        with self._lock:
            self._taps[tap_id] = deliver
            for host in self._hosts:
                host.send(("tap", tap_id, connector, count))
        return tap_id

    def untap(self, tap_id: int) -> None:
        with self._lock:
            self._taps.pop(tap_id, None)
            for host in self._hosts:
                host.send(("untap", tap_id))

    def tapped(self, tap_id: int, rows: list[Tapped]) -> None:
        deliver = self._taps.get(tap_id)
        if deliver is not None:
            deliver(rows)

    def _on_logger_level(self, name: str, level: int) -> None:
        with self._lock:
            self._levels.append((name, level))
            for host in self._hosts:
                host.send(("log_level", name, level))

    def close(self) -> None:
        """End every host (their tasks should have been stopped)."""
        self._closed.set()
        self._unsubscribe()
        with self._lock:
            hosts, self._hosts = list(self._hosts), []
        for host in hosts:
            host.send(("exit",))
        for host in hosts:
            host.process.join(self._graceful_s)
            if host.process.is_alive():
                host.kill()
        shutil.rmtree(self.temp_root, ignore_errors=True)
