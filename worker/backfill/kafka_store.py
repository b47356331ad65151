"""Backfill jobs of a distributed cluster, kept in its ``sluice.storage.topic``.

Every worker of a cluster must see the same jobs and schedules, and they must outlive any one
worker — which a compacted topic gives, as ``config.storage.topic`` gives connector configs. A job
is one record there::

    sluice-backfill-<id>   {"id": ..., "spec": {...}, "status": {...}}   (a tombstone deletes it)

Not in the config topic: a Kafka Connect worker reading that topic logs every key it does not know
as an error. An earlier Sluice did keep jobs there (``legacy_topic``): they are still read, a job
written again moves to the new topic, and moving or deleting one tombstones its old record. Each
worker follows the topic with its own :class:`~offsets.kafka_log.KafkaLog` and keeps
the jobs in memory; a write waits until the worker has read it back, so a ``GET`` after a
``POST`` on the same worker sees the job.

Unlike connector configs, these records are written by whichever worker changes the job (it took
the REST call, or it runs the job), not only by the leader: a job's status changes where it runs.
Two workers writing the same job at once is prevented where it matters by the manager: scheduled
runs fire on the leader only, and a job running on one worker cannot be started on another.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from sluice.offsets.kafka_log import KafkaLog
from sluice.worker.backfill.store import JobMapReads, StoredJob

log = logging.getLogger(__name__)

KEY_PREFIX = "sluice-backfill-"

#: Builds the topic follower: ``(topic, bootstrap, on_record, client_id=…, consumer_overrides=…, producer_overrides=…)``.
LogFactory = Callable[..., Any]


def job_key(job_id: str) -> bytes:
    return f"{KEY_PREFIX}{job_id}".encode()


class KafkaBackfillStore(JobMapReads):
    """A :class:`~worker.backfill.store.BackfillStore` on the cluster's config topic. Thread-safe.

    ``on_change(job_id)`` runs on the reader thread after any worker's write of a job was read
    (this worker's own included); it must not block on this store's writes.
    """

    def __init__(
        self,
        topic: str,
        bootstrap_servers: str,
        *,
        client_id: str,
        producer_overrides: Mapping[str, Any] | None = None,
        consumer_overrides: Mapping[str, Any] | None = None,
        log_factory: LogFactory | None = None,
        timeout: float = 30.0,
        legacy_topic: str | None = None,
    ) -> None:
        if log_factory is None:
            log_factory = KafkaLog
        self.topic = topic
        self._timeout = timeout
        self._lock = threading.Lock()
        self._jobs: dict[str, StoredJob] = {}  # what reads see: the topic's jobs over the legacy topic's
        self._current: dict[str, StoredJob] = {}
        self._legacy: dict[str, StoredJob] = {}
        self._started = False
        self.on_change: Callable[[str], None] | None = None
        self._log = log_factory(
            topic,
            bootstrap_servers,
            self._apply,
            client_id=f"{client_id}-backfills",
            consumer_overrides=dict(consumer_overrides or {}),
            producer_overrides=dict(producer_overrides or {}),
        )
        self._legacy_log = None
        if legacy_topic is not None:
            self._legacy_log = log_factory(
                legacy_topic,
                bootstrap_servers,
                self._apply_legacy,
                client_id=f"{client_id}-backfills-legacy",
                consumer_overrides=dict(consumer_overrides or {}),
                producer_overrides=dict(producer_overrides or {}),
            )

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Read the topic to its end (every job written so far), then keep following it."""
        if not self._started:
            if self._legacy_log is not None:
                self._legacy_log.start(self._timeout)
            self._log.start(self._timeout)
            self._started = True

    def stop(self) -> None:
        if self._started:
            self._started = False
            self._log.stop()
            if self._legacy_log is not None:
                self._legacy_log.stop()

    # -- reading -------------------------------------------------------------------------------------

    def _apply(self, raw_key: bytes | None, raw_value: bytes | None) -> None:
        self._apply_to(self._current, raw_key, raw_value)

    def _apply_legacy(self, raw_key: bytes | None, raw_value: bytes | None) -> None:
        self._apply_to(self._legacy, raw_key, raw_value)

    def _apply_to(self, jobs: dict[str, StoredJob], raw_key: bytes | None, raw_value: bytes | None) -> None:
        if raw_key is None or not raw_key.startswith(KEY_PREFIX.encode()):
            return
        job_id = raw_key[len(KEY_PREFIX) :].decode("utf-8", "replace")
        if raw_value is None:
            with self._lock:
                jobs.pop(job_id, None)
                self._merge(job_id)
        else:
            try:
                job = StoredJob.from_json(orjson.loads(raw_value))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                log.warning("Skipping backfill record %s: %s", job_id, exc)
                return
            if job.id != job_id:
                log.warning("Skipping backfill record %s: it holds job %s", job_id, job.id)
                return
            with self._lock:
                jobs[job_id] = job
                self._merge(job_id)
        callback = self.on_change
        if callback is not None:
            try:
                callback(job_id)
            except Exception:
                log.exception("Applying the change of backfill %s failed", job_id)

    def _merge(self, job_id: str) -> None:
        """Under the lock: what reads see of ``job_id``."""
        job = self._current.get(job_id) or self._legacy.get(job_id)
        if job is None:
            self._jobs.pop(job_id, None)
        else:
            self._jobs[job_id] = job

    # -- writing -------------------------------------------------------------------------------------

    def put(self, job: StoredJob) -> None:
        self._write(job.id, orjson.dumps(job.to_json(), default=str))

    def delete(self, job_id: str) -> None:
        self._write(job_id, None)

    def _write(self, job_id: str, value: bytes | None) -> None:
        self._log.send(job_key(job_id), value, timeout=self._timeout)
        # Read back: this worker's next read shows the write (and every write before it).
        self._log.read_to_end(self._timeout)
        with self._lock:
            moved = job_id in self._legacy
        if moved and self._legacy_log is not None:
            # The job lives in the new topic now: its record in the config topic goes.
            self._legacy_log.send(job_key(job_id), None, timeout=self._timeout)
            self._legacy_log.read_to_end(self._timeout)
