"""The worker's backfill jobs: submit, run on a thread each, report, cancel, and run on schedules.

:class:`BackfillManager` is the façade the REST routes and the CLI reach. The herder builds it,
starts it once its stores are up and stops it before they stop; the REST app is handed it. It owns:

* the :class:`~worker.backfill.store.BackfillStore` (specs, schedules, last state);
* one runner thread per active run, calling :func:`sluice.connectors.backfill.run_job` with the job
  kind the spec names, found through its entry point (:mod:`~worker.backfill.kind_registry`);
  PySpark is imported only when a run starts, so a worker that never backfills never imports it;
* an apscheduler ``BackgroundScheduler`` with one cron trigger per scheduled job. Schedules come
  back from the store when the worker restarts; a run whose worker died is marked FAILED;
* the guarantee that a job never has two runs at once (a second start is refused, a scheduled
  start that finds the job running is skipped and logged).

In a distributed cluster (:meth:`BackfillManager.for_cluster`) the store is the config topic
(:mod:`sluice.worker.backfill.kafka_store`) and every worker keeps every schedule, but a schedule fires
only on the current leader (``is_leader``), so each firing runs once in the cluster and moves with
leadership when a worker fails. A run records the worker it runs on; another worker refuses to
start the job while that run is in progress, and a restarted worker marks only its own cut-off
runs FAILED.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sluice.connectors.api import AlreadyExistsError, ConfigError, NotFoundError
from sluice.connectors.backfill import cancel_job, run_job
from sluice.connectors.backfill.errors import BackfillCancelled
from sluice.connectors.backfill.session import SparkSessionProvider
from sluice.worker.backfill.handoff_guard import HandoffGuard
from sluice.worker.backfill.kafka_store import KafkaBackfillStore
from sluice.worker.backfill.kind_registry import installed_kinds
from sluice.worker.backfill.models import (
    AnySpec,
    JobState,
    RunStatus,
    SpecProblem,
    check_spec,
    masked_spec,
    parse_spec,
    spec_error,
    spec_to_json,
)
from sluice.worker.backfill.progress import RunTracker
from sluice.worker.backfill.references import Resolver, reference_problems, resolved_spec
from sluice.worker.backfill.runtime import RUNTIME
from sluice.worker.backfill.spec_form import describe_kinds
from sluice.worker.backfill.store import BackfillStore, FileBackfillStore, MemoryBackfillStore, StoredJob
from sluice.worker.herder import BadRequest, Conflict

log = logging.getLogger(__name__)

# Module-level names: in the class body ``BackfillManager.list`` hides the builtin.
Problems = list[SpecProblem]
KindForms = list[dict[str, Any]]

#: Job ids a new spec may not take: ``GET /backfills/<id>`` of them is another route.
RESERVED_IDS = frozenset({"kinds"})

#: What runs a spec; tests swap it for a fake. Signature of :func:`sluice.connectors.backfill.run_job`.
JobRunner = Callable[[Any, Any, RunTracker, str], dict[str, Any]]


def spark_runner(provider: Any, spec: Any, tracker: RunTracker, bootstrap: str) -> dict[str, Any]:
    kind = installed_kinds().get(spec.kind)
    return run_job(provider, spec, tracker, kind=kind, bootstrap_servers=bootstrap, runtime=RUNTIME)


def spark_canceller(provider: Any, job_group: str) -> None:
    if provider is None:
        return
    cancel_job(provider, job_group)


class BackfillManager:
    """Backfill jobs of one worker process. Thread-safe."""

    def __init__(
        self,
        store: BackfillStore | None = None,
        *,
        bootstrap_servers: str = "localhost:9092",
        spark_confs: Mapping[str, str] | None = None,
        runner: JobRunner = spark_runner,
        canceller: Callable[[Any, str], None] = spark_canceller,
        provider: Any = None,
        is_leader: Callable[[], bool] | None = None,
        worker_id: str | None = None,
    ) -> None:
        self.store: BackfillStore = store if store is not None else MemoryBackfillStore()
        self._is_leader = is_leader
        self.worker_id = worker_id
        self._schedules: dict[str, str] = {}  # job → the schedule its apscheduler job was built from
        self.bootstrap_servers = bootstrap_servers
        self._spark_confs = dict(spark_confs or {})
        self._runner = runner
        self._canceller = canceller
        self._provider = provider
        self._lock = threading.RLock()
        self._active: dict[str, tuple[RunTracker, threading.Thread]] = {}
        self._scheduler: Any = None
        self._started = False
        #: Refuses specs that write a CDC connector's topic without ``target.cdc``; set by the herder
        #: that owns the manager (a manager without one, e.g. the local CLI's, checks nothing).
        self.handoff_guard: HandoffGuard | None = None
        #: Resolves ``${provider:...}`` references with the worker's config providers; set by the
        #: herder (:mod:`~sluice.worker.backfill.references`). Without one, specs run as written.
        self.resolve_references: Resolver | None = None

    @classmethod
    def from_worker_settings(cls, settings: Mapping[str, Any]) -> BackfillManager:
        """Build from worker keys: ``bootstrap.servers``, ``backfill.storage.file.filename``
        (default: ``backfills.json`` beside ``offset.storage.file.filename``, memory without one)
        and ``backfill.spark.*`` (Spark confs, e.g. ``backfill.spark.master=local[4]``)."""
        from pathlib import Path

        path = settings.get("backfill.storage.file.filename")
        if not path and settings.get("offset.storage.file.filename"):
            path = str(Path(str(settings["offset.storage.file.filename"])).with_name("backfills.json"))
        store: BackfillStore = FileBackfillStore(path) if path else MemoryBackfillStore()
        confs = {
            "spark." + k.removeprefix("backfill.spark."): str(v)
            for k, v in settings.items()
            if k.startswith("backfill.spark.")
        }
        bootstrap = str(
            settings.get("backfill.bootstrap.servers") or settings.get("bootstrap.servers") or "localhost:9092"
        )
        return cls(store, bootstrap_servers=bootstrap, spark_confs=confs)

    @classmethod
    def for_cluster(
        cls,
        settings: Mapping[str, Any],
        *,
        topic: str,
        bootstrap_servers: str,
        client_id: str,
        worker_id: str,
        is_leader: Callable[[], bool],
        producer_overrides: Mapping[str, Any] | None = None,
        consumer_overrides: Mapping[str, Any] | None = None,
        legacy_topic: str | None = None,
    ) -> BackfillManager:
        """A member of a distributed cluster: jobs in ``topic`` (its ``sluice.storage.topic``; an
        earlier Sluice's in ``legacy_topic``, the config topic, are read too), schedules fired by the leader."""
        store = KafkaBackfillStore(
            topic,
            bootstrap_servers,
            client_id=client_id,
            producer_overrides=producer_overrides,
            consumer_overrides=consumer_overrides,
            legacy_topic=legacy_topic,
        )
        confs = {
            "spark." + k.removeprefix("backfill.spark."): str(v)
            for k, v in settings.items()
            if k.startswith("backfill.spark.")
        }
        bootstrap = str(settings.get("backfill.bootstrap.servers") or bootstrap_servers)
        manager = cls(store, bootstrap_servers=bootstrap, spark_confs=confs, is_leader=is_leader, worker_id=worker_id)
        store.on_change = manager._on_store_change
        return manager

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Recover from the store (runs cut off by a restart become FAILED) and start the scheduler."""
        from apscheduler.schedulers.background import BackgroundScheduler

        with self._lock:
            if self._started:
                return
            self._started = True
            self.store.start()
            self._scheduler = BackgroundScheduler(daemon=True, job_defaults={"coalesce": True, "max_instances": 1})
            self._scheduler.start()
        for job in self.store.list():
            state = job.status.get("state")
            if state in (JobState.RUNNING, JobState.PENDING) and self._ran_here(job.status):
                job.status.update(
                    state=JobState.FAILED,
                    error="the worker stopped while this run was in progress",
                    finished_at=time.time(),
                )
                self.store.put(job)
            try:
                self._schedule(job.id, job.spec.get("schedule"))
            except Exception:
                log.exception("Cannot restore the schedule of backfill %s", job.id)

    def stop(self) -> None:
        """Cancel running jobs, stop the scheduler and the SparkSession."""
        with self._lock:
            scheduler, self._scheduler = self._scheduler, None
            self._started = False
            active = list(self._active.items())
        if scheduler is not None:
            scheduler.shutdown(wait=False)
        for _, (tracker, _thread) in active:
            self._cancel_tracker(tracker)
        for _, (_, thread) in active:
            thread.join(timeout=10)  # runner threads are daemons; a stuck one must not block the exit
        if self._provider is not None:
            self._provider.stop()
        if scheduler is not None:  # started, so its store was too
            self.store.stop()

    def _ran_here(self, status: Mapping[str, Any]) -> bool:
        """Whether a stored run is (or was) this worker's: always in standalone mode."""
        return self.worker_id is None or status.get("worker_id") in (None, self.worker_id)

    def _running_elsewhere(self, job_id: str) -> str | None:
        """The worker a run of the job is in progress on, if that is another worker."""
        if self.worker_id is None:
            return None
        job = self.store.get(job_id)
        status = job.status if job is not None else {}
        if status.get("state") in (JobState.RUNNING, JobState.PENDING) and not self._ran_here(status):
            return str(status.get("worker_id"))
        return None

    # -- queries -----------------------------------------------------------------------------------

    def list(self) -> list[dict[str, Any]]:
        return [self._summary(job) for job in self.store.list()]

    def get(self, job_id: str) -> dict[str, Any]:
        job = self.store.get(job_id)
        if job is None:
            raise NotFoundError(f"Backfill {job_id} not found")
        out = self._summary(job)
        out["spec"] = masked_spec(parse_spec(job.spec))
        return out

    def _summary(self, job: StoredJob) -> dict[str, Any]:
        with self._lock:
            active = self._active.get(job.id)
        status = (
            active[0].snapshot().model_dump(mode="json")
            if active
            else RunStatus.model_validate(job.status or {}).model_dump(mode="json")
        )
        out: dict[str, Any] = {"id": job.id, "kind": job.spec.get("kind"), "status": status}
        schedule = job.spec.get("schedule")
        if schedule:
            out["schedule"] = schedule
            out["next_run"] = self._next_run(job.id)
        return out

    def _next_run(self, job_id: str) -> str | None:
        scheduler = self._scheduler
        if scheduler is None:
            return None
        entry = scheduler.get_job(job_id)
        when = getattr(entry, "next_run_time", None) if entry is not None else None
        return when.isoformat() if when is not None else None

    # -- commands ----------------------------------------------------------------------------------

    def submit(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Validate and store a spec; run it now, or (with a schedule) on its schedule.

        Raises :class:`BadRequest` naming the bad key, :class:`Conflict` if the job is running.
        The result carries ``warnings`` when the hand-off guard has some.
        """
        spec, problems = self._checked_spec(raw)
        if spec is None:
            raise BadRequest(f"Invalid backfill spec: {spec_error(problems)}")
        warnings = self.handoff_guard.check(spec) if self.handoff_guard is not None else []
        with self._lock:
            if spec.id in self._active:
                raise Conflict(f"Backfill {spec.id} is running; cancel it first (DELETE /backfills/{spec.id})")
            elsewhere = self._running_elsewhere(spec.id)
            if elsewhere is not None:
                raise Conflict(f"Backfill {spec.id} is running on worker {elsewhere}; cancel it there first")
            previous = self.store.get(spec.id)
            self.store.put(StoredJob(spec.id, spec_to_json(spec), previous.status if previous else {}))
            self._schedule(spec.id, spec_to_json(spec).get("schedule"))
            if spec.schedule is None:
                self._start_run(spec.id, spec)
        info = self.get(spec.id)
        if warnings:
            info["warnings"] = warnings
        return info

    def validate(self, raw: Any) -> dict[str, Any]:
        """What :meth:`submit` would say of ``raw``, storing and running nothing: ``valid``, ``errors``
        (each with its ``key``, ``path`` and ``message``) and the hand-off guard's ``warnings``."""
        spec, problems = self._checked_spec(raw)
        warnings: Sequence[str] = []
        if spec is not None and self.handoff_guard is not None:
            try:
                warnings = self.handoff_guard.check(spec)
            except BadRequest as exc:  # the guard refuses on target.topic only
                message = str(exc).removeprefix("Invalid backfill spec: ").removeprefix("target.topic: ")
                problems = [SpecProblem(("target", "topic"), message)]
        return {"valid": not problems, "errors": [p.as_json() for p in problems], "warnings": [*warnings]}

    def _checked_spec(self, raw: Any) -> tuple[AnySpec | None, Problems]:
        """The spec, or its problems: the models' checks, then whether this worker can run its kind."""
        spec, problems = check_spec(raw)
        if spec is not None and spec.id in RESERVED_IDS:
            return None, [SpecProblem(("id",), f"{spec.id!r} is reserved: GET /backfills/{spec.id} is another route")]
        if spec is not None:
            try:
                installed_kinds().get(spec.kind)  # a kind this worker cannot load is refused now, not when it runs
            except ConfigError as exc:
                return None, [SpecProblem(("kind",), str(exc).removeprefix("kind: "))]
        if spec is not None and self.resolve_references is not None:
            unresolved = reference_problems(spec, self.resolve_references)
            if unresolved:
                return None, unresolved
        return spec, problems

    @staticmethod
    def kind_forms() -> KindForms:
        """The form description of every job kind (:mod:`~sluice.worker.backfill.spec_form`), each
        marked ``installed`` when this worker can run it."""
        return describe_kinds(set(installed_kinds().names()))

    def run_now(self, job_id: str) -> dict[str, Any]:
        """Start a stored job immediately (its schedule stays)."""
        job = self.store.get(job_id)
        if job is None:
            raise NotFoundError(f"Backfill {job_id} not found")
        with self._lock:
            if job_id in self._active:
                raise AlreadyExistsError(f"Backfill {job_id} is already running")
            elsewhere = self._running_elsewhere(job_id)
            if elsewhere is not None:
                raise AlreadyExistsError(f"Backfill {job_id} is already running on worker {elsewhere}")
            self._start_run(job_id, parse_spec(job.spec))
        return self.get(job_id)

    def cancel(self, job_id: str) -> dict[str, Any]:
        """Cancel the running run (its Spark jobs are cancelled; the state becomes CANCELLED).

        A run on another worker of the cluster is asked to cancel through the store: that worker
        reads the request (:meth:`_on_store_change`) and cancels, and its status write follows.
        """
        job = self.store.get(job_id)
        if job is None:
            raise NotFoundError(f"Backfill {job_id} not found")
        with self._lock:
            active = self._active.get(job_id)
            elsewhere = None if active is not None else self._running_elsewhere(job_id)
        if active is not None:
            self._cancel_tracker(active[0])
        elif elsewhere is not None and job.status.get("run_id"):
            log.info("Asking worker %s to cancel backfill %s", elsewhere, job_id)
            job.cancel_run = str(job.status["run_id"])
            self.store.put(job)
        return self.get(job_id)

    def delete(self, job_id: str) -> None:
        """Cancel any run, drop the schedule and forget the job."""
        self.cancel(job_id)
        with self._lock:
            active = self._active.get(job_id)
        if active is not None:
            active[1].join(timeout=30)
        if self._scheduler is not None and self._scheduler.get_job(job_id) is not None:
            self._scheduler.remove_job(job_id)
        self.store.delete(job_id)

    def wait(self, job_id: str, timeout: float | None = None) -> RunStatus:
        """Block until the job has no active run; return its last status (tests, the local CLI)."""
        with self._lock:
            active = self._active.get(job_id)
        if active is not None:
            active[1].join(timeout)
        return RunStatus.model_validate(self.get(job_id)["status"])

    # -- internals ---------------------------------------------------------------------------------

    def _cancel_tracker(self, tracker: RunTracker) -> None:
        tracker.request_cancel()
        try:
            self._canceller(self._provider, tracker.job_group)
        except Exception:
            log.warning("Cancelling Spark job group %s failed", tracker.job_group, exc_info=True)

    def _on_store_change(self, job_id: str) -> None:
        """Another worker (or this one) wrote the job: follow its schedule, honour a cancel request
        for (or the deletion of) a run of this worker. Runs on the store's reader."""
        job = self.store.get(job_id)
        # Not under self._lock: submit() holds it while it waits for this reader to read its write back.
        active = self._active.get(job_id)
        if active is not None and (job is None or job.cancel_run == active[0].run_id) and not active[0].cancelled:
            log.info("Backfill %s: cancelling run %s as another worker asked", job_id, active[0].run_id)
            self._cancel_tracker(active[0])
        try:
            self._schedule(job_id, job.spec.get("schedule") if job is not None else None)
        except ConfigError:
            log.warning("Backfill %s has an invalid schedule; not scheduled here", job_id)

    def _schedule(self, job_id: str, schedule: Mapping[str, Any] | None) -> None:
        scheduler = self._scheduler
        if scheduler is None:
            return
        fingerprint = repr(sorted(schedule.items())) if schedule else ""
        if self._schedules.get(job_id, "") == fingerprint and (scheduler.get_job(job_id) is not None) == bool(schedule):
            return  # unchanged (a status write of the job, read back)
        if scheduler.get_job(job_id) is not None:
            scheduler.remove_job(job_id)
        self._schedules.pop(job_id, None)
        if not schedule:
            return
        from apscheduler.triggers.cron import CronTrigger

        try:
            trigger = CronTrigger.from_crontab(str(schedule["cron"]), timezone=str(schedule.get("timezone") or "UTC"))
        except (ValueError, KeyError) as exc:
            raise ConfigError(f"schedule.cron: {exc}", key="schedule.cron") from None
        scheduler.add_job(
            self._scheduled_run, trigger, args=[job_id], id=job_id, replace_existing=True, misfire_grace_time=300
        )
        self._schedules[job_id] = fingerprint

    def _scheduled_run(self, job_id: str) -> None:
        if self._is_leader is not None and not self._is_leader():
            log.debug("Backfill %s is due; the leader runs it", job_id)
            return
        job = self.store.get(job_id)
        if job is None:
            return
        with self._lock:
            if job_id in self._active:
                log.warning("Backfill %s is still running; skipping its scheduled run", job_id)
                return
            elsewhere = self._running_elsewhere(job_id)
            if elsewhere is not None:
                log.warning("Backfill %s is still running on worker %s; skipping its scheduled run", job_id, elsewhere)
                return
            self._start_run(job_id, parse_spec(job.spec))

    def _provider_for_run(self) -> Any:
        if self._provider is None and self._runner is spark_runner:
            self._provider = SparkSessionProvider(self._spark_confs)
        return self._provider

    def _start_run(self, job_id: str, spec: Any) -> None:
        """Start a runner thread. Caller holds the lock and checked no run is active."""
        run_id = f"{job_id}-{uuid.uuid4().hex[:8]}"
        tracker = RunTracker(run_id, on_change=lambda status: self._persist(job_id, status), worker_id=self.worker_id)
        thread = threading.Thread(
            target=self._run, args=(job_id, spec, tracker), name=f"backfill-{job_id}", daemon=True
        )
        self._active[job_id] = (tracker, thread)
        tracker.set_state(JobState.PENDING)
        thread.start()

    def _run(self, job_id: str, spec: Any, tracker: RunTracker) -> None:
        tracker.set_state(JobState.RUNNING)
        log.info("Backfill %s (%s) started as run %s", job_id, spec.kind, tracker.run_id)
        try:
            spec = resolved_spec(spec, self.resolve_references)  # read anew for every run
            provider = self._provider_for_run()
            summary = self._runner(provider, spec, tracker, self.bootstrap_servers)
            if tracker.cancelled:
                tracker.set_state(JobState.CANCELLED, error="cancelled")
            else:
                tracker.set_state(JobState.SUCCEEDED, details=summary)
                log.info("Backfill %s succeeded: %s", job_id, summary)
        except BackfillCancelled:
            tracker.set_state(JobState.CANCELLED, error="cancelled")
            log.info("Backfill %s cancelled", job_id)
        except Exception as exc:  # noqa: BLE001 - the job's failure, recorded in its state
            message = str(exc) or type(exc).__name__
            if tracker.cancelled:
                tracker.set_state(JobState.CANCELLED, error="cancelled")
            else:
                tracker.set_state(JobState.FAILED, error=message)
                log.error("Backfill %s failed: %s", job_id, message)
        finally:
            with self._lock:
                if self._active.get(job_id, (None,))[0] is tracker:
                    del self._active[job_id]

    def _persist(self, job_id: str, status: RunStatus) -> None:
        job = self.store.get(job_id)
        if job is None:
            return
        job.status = status.model_dump(mode="json")
        if job.cancel_run is not None and (job.cancel_run != status.run_id or status.state.finished):
            job.cancel_run = None  # served (or about an older run)
        self.store.put(job)
