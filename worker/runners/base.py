"""What the herder drives (:class:`TaskRunner`) and the lifecycle state machine that the source and
sink runners of this process share (:class:`WorkerTask`).

The runners themselves compose their other parts (offsets, retries and tolerance, redelivery) as
collaborators; the base class here carries behaviour only: it sets every attribute it reads.
"""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import orjson
from confluent_kafka import KafkaError

from sluice.worker.observability.logcontext import connector_context, set_context
from sluice.worker.observability.outages import (
    DEFAULT_DEGRADED_AFTER_MS,
    KAFKA_STATS_INTERVAL_MS,
    KAFKA_UNREACHABLE_CODES,
    LibrdkafkaLog,
    OutageTracker,
    any_broker_up,
    kafka_reason,
    kafka_system,
)
from sluice.worker.observability.task_metrics import TaskMetrics, register
from sluice.worker.observability.tracing import BatchTracer, batch_tracer
from sluice.worker.status import ConnectorTaskId, TargetState

log = logging.getLogger(__name__)


class TaskStatusListener(Protocol):
    """Receives a task's state changes (the herder writes them to the status store)."""

    def on_startup(self, task_id: ConnectorTaskId) -> None: ...

    def on_pause(self, task_id: ConnectorTaskId) -> None: ...

    def on_resume(self, task_id: ConnectorTaskId) -> None: ...

    def on_failure(self, task_id: ConnectorTaskId, error: BaseException) -> None: ...

    def on_shutdown(self, task_id: ConnectorTaskId) -> None: ...

    def on_degraded(self, task_id: ConnectorTaskId, trace: str) -> None:
        """Still RUNNING, but a system the task needs has been out of reach too long (``trace`` says which)."""

    def on_recovered(self, task_id: ConnectorTaskId) -> None:
        """RUNNING again without the degraded trace."""


class TaskRunner(Protocol):
    """One task as the herder sees it, whichever executor runs it: a thread of this process
    (:class:`WorkerTask`) or a thread of a task host process
    (:class:`~sluice.worker.execution.process_executor.ProcessTaskRunner`).

    The herder calls everything here from its own threads (and the metrics scrape calls
    :meth:`metrics_snapshot` from the REST server's); none of it blocks on the task except
    :meth:`await_stop`.
    """

    id: ConnectorTaskId
    #: Topics the task produced to or consumed from (KIP-558); the herder reads them and resets
    #: them with :meth:`reset_active_topics`.
    active_topics: set[str]
    #: Distributed mode, set before :meth:`start`: ``False`` while this worker may have lost its
    #: place in the group, and the task must write nothing.
    fence: Callable[[], bool] | None

    def start(self) -> None:
        """Start running the task (its status listener hears how it goes)."""

    def transition_to(self, target: TargetState) -> None:
        """Pause or resume."""

    def stop(self) -> None:
        """Ask the task to stop; :meth:`await_stop` waits for it."""

    def await_stop(self, timeout: float | None) -> bool:
        """Wait up to ``timeout`` seconds for the task to end; ``True`` if it did."""

    def reset_active_topics(self) -> None:
        """Forget the topics used so far (``PUT /connectors/{c}/topics/reset``)."""

    def metrics_snapshot(self) -> dict[str, Any] | None:
        """The task's ``GET /metrics`` figures, or ``None`` once it has ended."""

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""

    @property
    def failed(self) -> bool:
        """Whether the task ended (or is ending) in failure."""


class WorkerTask(abc.ABC):
    """Runs one task on a thread of its own and owns its state machine.

    States: created → running ⇄ paused → stopped, or → failed from any of them. The herder calls
    :meth:`start`, :meth:`transition_to` and :meth:`stop` from its own thread; the runner thread
    calls :meth:`initialize`, then :meth:`execute` until stopping, then :meth:`close`. Those three
    are what a runner implements; unit tests may call them (and the runners' own single-step
    methods, such as ``iteration()``) directly, without a thread.
    """

    def __init__(
        self,
        task_id: ConnectorTaskId,
        listener: TaskStatusListener,
        initial_state: TargetState,
        *,
        kind: str = "source",
        degraded_after_ms: int = DEFAULT_DEGRADED_AFTER_MS,
    ) -> None:
        """``kind`` is the Connect metric group of the runner's counters (``source`` or ``sink``)."""
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
        #: Outages of Kafka and of the task's own system (fed on the runner thread).
        self.outages = OutageTracker(degraded_after_ms / 1000, self._report_degraded, self._report_recovered)
        self._kafka = kafka_system("?")
        self._thread = threading.Thread(target=self._run, name=f"task-{task_id}", daemon=True)
        #: Counters for ``GET /metrics``, bumped once per batch on the runner thread.
        self.metrics = TaskMetrics(kind, on_notice=self.outages.notice)
        register(task_id, self)
        #: The task's batch traces (:mod:`sluice.worker.observability.tracing`); ``None`` while tracing is off.
        self.tracer: BatchTracer | None = batch_tracer(task_id, kind)

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

    def metrics_snapshot(self) -> dict[str, Any] | None:
        """The task's metrics (:mod:`sluice.worker.observability.task_metrics`), or ``None`` once its thread has ended."""
        if not self._thread.is_alive():
            return None
        return self.metrics.snapshot(self.error_metrics())

    def error_metrics(self) -> dict[str, int] | None:
        """Connect's ``task-error-metrics`` of the task, from its retry and tolerance operator;
        ``None`` for a runner without one."""
        return None

    @property
    def failed(self) -> bool:
        return self._failed

    # -- runner thread --------------------------------------------------------------------------

    def _run(self) -> None:
        set_context(self.id.connector, self.id.task)
        try:
            self.initialize()
            if self.stopping:
                return
            if self._target is TargetState.PAUSED:
                self._listener.on_pause(self.id)
            else:
                self._listener.on_startup(self.id)
            self.execute()
        except BaseException as exc:  # the task's failure becomes its status, never a dead thread
            if self.stopping and not isinstance(exc, Exception):
                return
            self._failed = True
            log.error("Task %s failed: %s", self.id, exc, exc_info=exc)
            self._listener.on_failure(self.id, exc)
        finally:
            try:
                self.close()
            except Exception:
                log.exception("Error while closing task %s", self.id)
            if not self._failed:
                self._listener.on_shutdown(self.id)
            if self.tracer is not None:
                self.tracer.flush()

    def _unfenced(self) -> bool:
        """``False`` while the worker may have lost this task to another worker: write nothing."""
        fence = self.fence
        return fence is None or fence()

    def await_unpaused(self) -> bool:
        """Block while paused (or fenced); return ``False`` once the task should stop. Runner
        thread: :meth:`execute` calls it before each batch."""
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
        self.metrics.paused(True)
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
        self.metrics.paused(False)
        self._on_resumed()
        self._listener.on_resume(self.id)
        trace = self.outages.trace
        if trace is not None:  # degraded while paused: the status says so again
            self._listener.on_degraded(self.id, trace)
        return True

    # -- outages (runner thread: librdkafka serves its callbacks in poll/consume/flush) ---------------

    def _watch_kafka(self, config: dict[str, Any]) -> None:
        """Have the task's Kafka client (``config``, before it is created) report outages to
        :attr:`outages`; the runner's error callback hands errors to :meth:`_kafka_unreachable`."""
        self._kafka = kafka_system(config.get("bootstrap.servers", "?"))
        config["logger"] = _TaskLibrdkafkaLog(self.id)  # its connection errors: once, by the tracker
        config["stats_cb"] = self._on_kafka_stats
        try:
            interval = int(config.get("statistics.interval.ms") or 0)
        except (TypeError, ValueError):
            interval = 0
        if interval <= 0:
            config["statistics.interval.ms"] = KAFKA_STATS_INTERVAL_MS

    def _kafka_unreachable(self, err: KafkaError) -> bool:
        """Count ``err`` against Kafka's outage if it says a broker is out of reach."""
        code = err.code()
        if code not in KAFKA_UNREACHABLE_CODES:
            return False
        if code == KafkaError._ALL_BROKERS_DOWN:
            if self.outages.is_open(self._kafka):
                self.outages.confirm(self._kafka)
            else:
                self.outages.failure(self._kafka, "all brokers are down")
        else:
            # One broker connection failed: an outage only if no other broker is up (the next
            # statistics tell), so a broker restart in a cluster stays out of the log.
            self.outages.failure(self._kafka, kafka_reason(err.str()), confirmed=False)
        return True

    def _on_kafka_stats(self, stats_json: str) -> None:
        if not self.outages.is_open(self._kafka):
            self.outages.tick()  # also the clock of the task's other outages
            return
        try:
            stats = orjson.loads(stats_json)
        except orjson.JSONDecodeError:
            return
        if any_broker_up(stats):
            self.outages.reached(self._kafka)
        else:
            self.outages.confirm(self._kafka)

    def _system_unreachable(self, system: str, error: BaseException) -> None:
        """The task raised a ``RetriableError``: its own system is out of reach for now."""
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        self.outages.failure(system, reason[:300])

    def _report_degraded(self, trace: str) -> None:
        # A paused task's status stays PAUSED (resuming reports the trace); a stopping one's is
        # about to change anyway.
        if self._target is not TargetState.PAUSED and not self.stopping:
            self._listener.on_degraded(self.id, trace)

    def _report_recovered(self) -> None:
        if self._target is not TargetState.PAUSED and not self.stopping:
            self._listener.on_recovered(self.id)

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
    def initialize(self) -> None:
        """Create clients and start the task. Runner thread, first."""

    @abc.abstractmethod
    def execute(self) -> None:
        """The main loop; returns when stopping. Runner thread, after :meth:`initialize`."""

    @abc.abstractmethod
    def close(self) -> None:
        """Commit what can be committed, stop the task and close clients. Runner thread, last,
        also after a failure (then nothing is committed)."""

    def _on_stop_requested(self) -> None:  # noqa: B027 - hook
        """Unblock the task (called on the herder thread)."""


class _TaskLibrdkafkaLog(LibrdkafkaLog):
    """librdkafka's lines of one task's client, tagged with the task on whichever thread
    confluent-kafka hands them over."""

    def __init__(self, task_id: ConnectorTaskId) -> None:
        super().__init__(tracked=True)
        self._task_id = task_id

    def log(self, level: int, msg: str, *args: Any) -> None:
        with connector_context(self._task_id.connector, self._task_id.task):
            super().log(level, msg, *args)
