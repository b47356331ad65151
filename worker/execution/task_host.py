"""A task host process: runs several tasks of one worker, each on a thread, as the worker tells it.

The worker side is :mod:`sluice.worker.execution.process_executor`; this module is what runs in the host.
One control connection carries, down: ``start``/``target``/``stop``/``reset_topics`` for a task
(each names the task's *run key*, unique within the worker), logger levels and the distributed
fence; and up: each task's state changes (as a :class:`TaskStatusListener` would get them),
``relay`` batches (topics used, error counters and the ``GET /metrics`` snapshot of every task
whose figures changed, once a second), and ``ended`` when a task's runner thread has finished. A
second connection carries the calls to the worker's offset store, one at a time.

Nothing here polls: the control loop blocks in ``recv()``, each task's life is a thread that
blocks in ``join``, and the relay thread wakes once a second.
"""

from __future__ import annotations

import logging
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from sluice.connectors.api import ConnectError
from sluice.plugins import PluginRegistry
from sluice.worker.config.local_paths import PathGrant, default_data_dir
from sluice.worker.config.masking import mask_text
from sluice.worker.config.models import WorkerConfig
from sluice.worker.execution.sandbox import SandboxError, restrict, task_host_grants
from sluice.worker.execution.task_builder import TaskBuilder
from sluice.worker.observability.log_levels import apply_logger_levels, set_logger_level
from sluice.worker.observability.logcontext import configure_logging, set_context
from sluice.worker.observability.tap import TAPS
from sluice.worker.runners.base import WorkerTask
from sluice.worker.runtime import parent_death_signal, tune_gc
from sluice.worker.status import ConnectorTaskId, TargetState, format_trace

log = logging.getLogger(__name__)

#: How long a host that stops hearing the worker's distributed fence (its worker frozen or stuck)
#: lets its tasks keep writing.
FENCE_SILENCE_S = 3.0
#: How often a host sends what changed in its tasks' topics and figures up.
METRICS_RELAY_S = 1.0
#: The exit code of a host that could not apply its sandbox (its tasks' traces show it).
SANDBOX_FAILED_EXIT = 70


class _PipeOffsetStore:
    """The worker's offset store, called over a pipe (one call at a time for all the host's tasks)."""

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

    def read_to_end(self, timeout: float = 30.0) -> None:
        self._call("read_to_end", timeout)


class _PipeListener:
    """Sends one task's state changes up (``send`` adds which task)."""

    def __init__(self, send: Callable[[tuple[Any, ...]], None]) -> None:
        self._send = send

    def on_startup(self, task_id: ConnectorTaskId) -> None:
        self._send(("startup",))

    def on_pause(self, task_id: ConnectorTaskId) -> None:
        self._send(("pause",))

    def on_resume(self, task_id: ConnectorTaskId) -> None:
        self._send(("resume",))

    def on_failure(self, task_id: ConnectorTaskId, error: BaseException) -> None:
        # Masked here too: this process resolved the task's placeholders, the worker may not have.
        connector = task_id.connector
        self._send(("failure", mask_text(str(error), connector), mask_text(format_trace(error), connector)))

    def on_shutdown(self, task_id: ConnectorTaskId) -> None:
        self._send(("shutdown",))

    def on_degraded(self, task_id: ConnectorTaskId, trace: str) -> None:
        self._send(("degraded", mask_text(trace, task_id.connector)))

    def on_recovered(self, task_id: ConnectorTaskId) -> None:
        self._send(("recovered",))


@dataclass
class _HostedTask:
    """One task run in this host; ``runner`` is ``None`` until built. Guarded by ``lock``."""

    task_id: ConnectorTaskId
    target: TargetState
    lock: threading.Lock = field(default_factory=threading.Lock)
    runner: WorkerTask | None = None
    stop_requested: bool = False
    reported_topics: set[str] = field(default_factory=set)
    reported_errors: dict[str, int] | None = None
    reported_snapshot: dict[str, Any] | None = None


class TaskHostServer:
    """The host side: builds, runs and relays the tasks the worker assigns to this process."""

    def __init__(self, builder: TaskBuilder, control: Connection) -> None:
        self._builder = builder
        self._control = control
        self._send_lock = threading.Lock()
        self._tasks: dict[int, _HostedTask] = {}
        self._tasks_lock = threading.Lock()
        self._fence_open = True
        self._fence_heard: float | None = None  # when the worker last sent the fence (distributed only)
        self._taps: dict[int, str] = {}  # live taps: the worker's id → this process's subscription

    # -- the control loop (main thread) ----------------------------------------------------------

    def serve(self) -> int:
        """Answer the worker until it says ``exit`` (0) or closes the control connection (1): the
        process's exit code. Either way the host ends at once, without committing anything more."""
        threading.Thread(target=self._relay_loop, name="task-host-relay", daemon=True).start()
        handlers: dict[str, Callable[..., object]] = {
            "start": self._start,
            "target": self._target,
            "stop": self._stop,
            "reset_topics": self._reset_topics,
            "log_level": set_logger_level,
            "fence": self._fence,
            "plugins": self._adopt_plugins,
            "tap": self._tap,
            "untap": self._untap,
        }
        while True:
            try:
                command, *args = self._control.recv()
            except (EOFError, OSError):
                # The worker is gone (where the parent-death signal does not exist): end as it
                # did; what was not committed is delivered again.
                log.error("Task host %s lost its worker process; exiting", os.getpid())
                return 1
            if command == "exit":  # the worker is stopping; its tasks here have ended
                return 0
            handlers[command](*args)

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._send_lock:
            try:
                self._control.send(message)
            except (OSError, ValueError):
                pass  # the worker is gone; serve() notices

    def _start(
        self,
        key: int,
        task_id: ConnectorTaskId,
        connector: dict[str, Any],
        config: dict[str, Any],
        target: TargetState,
        fenced: bool,
    ) -> None:
        hosted = _HostedTask(task_id, target)
        with self._tasks_lock:
            self._tasks[key] = hosted
        # Built on the task's own thread: a connector slow to build holds up no other task.
        life = threading.Thread(
            target=self._run_task,
            args=(key, hosted, connector, config, fenced),
            name=f"task-{task_id}-host",
            daemon=True,
        )
        life.start()

    def _target(self, key: int, target: TargetState) -> None:
        hosted = self._tasks.get(key)
        if hosted is not None:
            with hosted.lock:
                hosted.target = target
                runner = hosted.runner
            if runner is not None:
                runner.transition_to(target)

    def _stop(self, key: int) -> None:
        hosted = self._tasks.get(key)
        if hosted is not None:
            with hosted.lock:
                hosted.stop_requested = True
                runner = hosted.runner
            if runner is not None:
                runner.stop()

    def _reset_topics(self, key: int) -> None:
        hosted = self._tasks.get(key)
        if hosted is not None and hosted.runner is not None:
            hosted.runner.reset_active_topics()
            hosted.reported_topics.clear()

    def _adopt_plugins(self, modules: list[str]) -> None:
        # After the worker's plugin refresh (SIGHUP): before the next "start", which may name them.
        self._builder.plugins.adopt(modules)

    def _tap(self, tap_id: int, connector: str, count: int) -> None:
        # The live tap: this host's tasks of the connector hand their next records up the pipe.
        self._taps[tap_id] = TAPS.subscribe(connector, count, lambda rows: self._send(("tapped", tap_id, rows)))

    def _untap(self, tap_id: int) -> None:
        token = self._taps.pop(tap_id, None)
        if token is not None:
            TAPS.unsubscribe(token)

    def _fence(self, open_: bool) -> None:
        self._fence_heard, self._fence_open = time.monotonic(), open_

    def _unfenced(self) -> bool:
        """Distributed mode: write only while the worker says so, and has said so recently."""
        heard = self._fence_heard
        return self._fence_open and (heard is None or time.monotonic() - heard < FENCE_SILENCE_S)

    # -- a task's life (its own thread) ----------------------------------------------------------

    def _run_task(
        self, key: int, hosted: _HostedTask, connector: dict[str, Any], config: dict[str, Any], fenced: bool
    ) -> None:
        set_context(hosted.task_id.connector, hosted.task_id.task)
        listener = _PipeListener(lambda event: self._send(("event", key, *event)))
        try:
            with hosted.lock:
                initial = hosted.target
            validated = self._builder.validate(connector)
            runner = self._builder.build(hosted.task_id, validated, config, listener, initial)
        except Exception as exc:  # noqa: BLE001 - a task that cannot be built fails, not the host
            listener.on_failure(hosted.task_id, exc)
            self._end(key, hosted)
            return
        if fenced:
            runner.fence = self._unfenced
        with hosted.lock:
            hosted.runner = runner
            if hosted.target is not initial:
                runner.transition_to(hosted.target)
            if hosted.stop_requested:
                runner.stop()  # it still runs its start-up and shutdown, as a thread runner stopped early does
        runner.start()
        runner.await_stop(None)
        self._end(key, hosted)

    def _end(self, key: int, hosted: _HostedTask) -> None:
        with self._tasks_lock:
            self._tasks.pop(key, None)
        changes = self._changes(hosted)
        self._send(("ended", key, changes))

    # -- relaying figures (its own thread) -------------------------------------------------------

    def _relay_loop(self) -> None:
        while True:
            time.sleep(METRICS_RELAY_S)
            with self._tasks_lock:
                hosted = list(self._tasks.items())
            batch = {key: changes for key, task in hosted if (changes := self._changes(task))}
            if batch:
                self._send(("relay", batch))

    @staticmethod
    def _changes(hosted: _HostedTask) -> dict[str, Any]:
        """What changed in a task's topics, error counters and snapshot since last sent."""
        runner = hosted.runner
        if runner is None:
            return {}
        changes: dict[str, Any] = {}
        if runner.active_topics - hosted.reported_topics:
            hosted.reported_topics |= runner.active_topics
            changes["topics"] = sorted(hosted.reported_topics)
        errors = runner.error_metrics() or {}
        if errors != hosted.reported_errors:
            hosted.reported_errors = changes["errors"] = errors
        snapshot = runner.metrics_snapshot()
        if snapshot is not None and snapshot != hosted.reported_snapshot:
            hosted.reported_snapshot = changes["snapshot"] = snapshot
        return changes


def main(
    config_class: Any,
    worker_config: dict[str, Any],
    control: Connection,
    offsets: Connection,
    log_level: str,
    log_levels: list[tuple[str, int]],
    worker_pid: int,
    plugin_modules: list[str],
    temp_root: str,
) -> None:
    """Entry point of a task host process (forked from the fork server; see process_executor)."""
    _die_with_parent(worker_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the worker's to handle, then it stops us
    configure_logging(log_level)
    apply_logger_levels(log_levels)  # what PUT /admin/loggers set in the worker before this host started
    config = config_class.from_mapping(worker_config)
    # The worker's discovered plugin.path modules, not a scan: a host starts when a task does.
    plugin_path = [p.strip() for p in config.plugin_path.split(",") if p.strip()]
    registry = PluginRegistry(plugin_path, path_modules=plugin_modules)
    builder = TaskBuilder(config, registry, _PipeOffsetStore(offsets))  # type: ignore[arg-type]
    confine(config, builder.path_grant, temp_root)  # before serve() starts the first thread
    tune_gc()  # the worker's process-wide settings, in this process too
    os._exit(TaskHostServer(builder, control).serve())  # no interpreter teardown: nothing is left to flush


def confine(config: WorkerConfig, grant: PathGrant, temp_root: str) -> None:
    """Apply the sandbox (``task.host.sandbox=landlock``, see :mod:`sluice.worker.execution.sandbox`) while
    this process has one thread. Where Landlock is unavailable the host runs unconfined (the worker
    has said so in its log and ``/health``); where it is available but cannot be applied, the host
    exits rather than run tasks unconfined, and its tasks fail with the exit code."""
    if config.task_host_sandbox == "none":
        return
    temp_dir = tempfile.mkdtemp(prefix=f"host-{os.getpid()}-", dir=temp_root)
    grants = task_host_grants(
        grant,
        plugin_paths=[p.strip() for p in config.plugin_path.split(",") if p.strip()],
        temp_dir=temp_dir,
        data_dir=default_data_dir(config) if grant.anywhere else None,
        worker_settings=config.raw,
    )
    try:
        abi = restrict(grants)
    except SandboxError as exc:
        log.error("Task host %s cannot apply its sandbox, so it runs no task: %s", os.getpid(), exc.strerror)
        os._exit(SANDBOX_FAILED_EXIT)
    except OSError:
        return  # unavailable: the worker reported it once
    # Libraries that write temporary files (tempfile, pyarrow, boto3) write them where the host may.
    os.environ["TMPDIR"] = tempfile.tempdir = temp_dir
    log.debug("Task host %s confined by Landlock ABI %d", os.getpid(), abi)


def _die_with_parent(worker_pid: int) -> None:
    """Be SIGKILLed when the fork server (which ends with the worker) ends, and not start at all
    if the worker is already gone: a SIGKILLed worker leaves no task writing on."""
    arm = parent_death_signal()
    if arm is not None:
        arm(signal.SIGKILL, os.getppid())
    try:
        os.kill(worker_pid, 0)
    except ProcessLookupError:
        os._exit(1)
