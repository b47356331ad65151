"""The cluster's configuration in ``config.storage.topic``, with Kafka Connect's records.

Keys and values are Connect's (JSON without schemas, one partition, compacted): the records of
:mod:`sluice.worker.herder.stores.config_store`, which also says what each one means, plus
``logger-cluster-<logger>`` (``{"level": "DEBUG"}``, ``PUT /admin/loggers/<logger>?scope=cluster``,
KIP-976).

Nothing else goes there: a Connect worker reading the topic logs every other key as an error
(``Discarding config update record with invalid key``). What only Sluice needs — the leader's
current assignment (see :mod:`sluice.worker.distributed.assignor`) with the leader's REST URL — lives in
a topic of its own, ``sluice.storage.topic`` (key ``assignment``), which the leader writes in the
same fenced transactions. Clusters that ran an earlier Sluice have their assignment in the config
topic as ``sluice-assignment``: it is read until an assignment appears in the new topic, and the
first leader to write there tombstones it (Connect logs both until compaction removes them).

Only the leader writes, through a transactional producer whose ``transactional.id`` is the same on
every worker: a new leader's ``init_transactions`` fences the previous one, so a deposed leader
that has not noticed yet cannot write anything. The one exception, as in Connect, is a
``logger-cluster-*`` record: any worker writes it, with a plain producer, since it changes no state
the leader owns. Every worker applies such a record when it reads it, but not the ones already in
the topic when it started (they were meant for the workers running then).
"""

from __future__ import annotations

import base64
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from confluent_kafka import KafkaError, KafkaException, Producer

from sluice.offsets.kafka_log import KafkaLog, KafkaLogError
from sluice.worker.herder.api import NoLeader
from sluice.worker.herder.stores.config_store import (
    CONNECTOR,
    SESSION_KEY,
    ConfigSnapshot,
    Item,
    Record,
    RecordConfigStore,
    apply_record,
    connector_record,
    restart_record,
    target_state_record,
    task_records,
)
from sluice.worker.observability.log_levels import apply_cluster_logger_level

log = logging.getLogger(__name__)

ASSIGNMENT_KEY = "assignment"  # in sluice.storage.topic
LEGACY_ASSIGNMENT_KEY = "sluice-assignment"  # in the config topic, where earlier Sluice versions wrote it
LOGGER_CLUSTER_PREFIX = "logger-cluster-"


class NotLeader(NoLeader):
    """This worker is no longer the leader (a rebalance moved leadership, or a newer leader fenced
    it): HTTP 409 with ``Retry-After``, and the retry reaches the new leader."""


@dataclass
class Assignment:
    """The leader's decision: who runs what, what is being revoked, who left and when."""

    generation: int
    leader: str
    leader_url: str
    owners: dict[str, set[Item]] = field(default_factory=dict)
    revoking: dict[Item, tuple[str, float]] = field(default_factory=dict)
    departed: dict[str, float] = field(default_factory=dict)  # wall-clock seconds
    urls: dict[str, str] = field(default_factory=dict)

    def items_of(self, worker: str) -> set[Item]:
        return set(self.owners.get(worker, ()))

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "generation": self.generation,
                "leader": self.leader,
                "leader_url": self.leader_url,
                "workers": {
                    w: {
                        "url": self.urls.get(w, ""),
                        "connectors": sorted(c for c, t in items if t == CONNECTOR),
                        "tasks": sorted([c, t] for c, t in items if t != CONNECTOR),
                    }
                    for w, items in sorted(self.owners.items())
                },
                "revoking": [[c, t, w, since] for (c, t), (w, since) in sorted(self.revoking.items())],
                "departed": self.departed,
            }
        )

    @classmethod
    def from_json(cls, data: bytes) -> Assignment:
        body = orjson.loads(data)
        owners: dict[str, set[Item]] = {}
        urls: dict[str, str] = {}
        for worker, entry in body.get("workers", {}).items():
            items: set[Item] = {(c, CONNECTOR) for c in entry.get("connectors", ())}
            items.update((c, int(t)) for c, t in entry.get("tasks", ()))
            owners[worker] = items
            urls[worker] = entry.get("url", "")
        revoking = {(c, int(t)): (w, float(since)) for c, t, w, since in body.get("revoking", ())}
        return cls(
            generation=int(body["generation"]),
            leader=str(body["leader"]),
            leader_url=str(body["leader_url"]),
            owners=owners,
            revoking=revoking,
            departed={str(k): float(v) for k, v in body.get("departed", {}).items()},
            urls=urls,
        )


@dataclass
class ClusterSnapshot(ConfigSnapshot):
    """A config snapshot with the leader's latest assignment (from ``sluice.storage.topic``)."""

    assignment: Assignment | None = None


class KafkaConfigStore(RecordConfigStore):
    """The :class:`~sluice.worker.herder.stores.config_store.ConfigStore` of a cluster: follows the config topic
    into a :class:`ClusterSnapshot`; the leader also writes to it."""

    # The record builders, where callers of the Kafka store have always found them.
    connector_record = staticmethod(connector_record)
    target_state_record = staticmethod(target_state_record)
    task_records = staticmethod(task_records)
    restart_record = staticmethod(restart_record)

    def __init__(
        self,
        topic: str,
        bootstrap_servers: str,
        group_id: str,
        *,
        client_id: str,
        on_change: Callable[[], None],
        producer_overrides: Mapping[str, Any] | None = None,
        consumer_overrides: Mapping[str, Any] | None = None,
        on_logger_level: Callable[[str, str], None] = apply_cluster_logger_level,
        sluice_topic: str | None = None,
    ) -> None:
        self.topic = topic
        self.sluice_topic = sluice_topic or f"{topic}-sluice"
        # The assignment from sluice.storage.topic, and the one an earlier Sluice left in the
        # config topic (used until the first one exists; tombstoned by the next leader's write).
        self._assignment: Assignment | None = None
        self._legacy_assignment: Assignment | None = None
        self._legacy_live = False
        self._on_logger_level = on_logger_level
        self._started = False  # logger-cluster records read before this are the past's
        self._bootstrap = bootstrap_servers
        self._group_id = group_id
        self._client_id = client_id
        self._producer_overrides = dict(producer_overrides or {})
        self._on_change = on_change
        self._lock = threading.Lock()
        self._snapshot = ClusterSnapshot()
        self._log = KafkaLog(
            topic, bootstrap_servers, self._apply, client_id=f"{client_id}-configs", consumer_overrides=consumer_overrides,
            with_producer=False,
        )
        self._sluice_log = KafkaLog(
            self.sluice_topic, bootstrap_servers, self._apply_sluice, client_id=f"{client_id}-sluice",
            consumer_overrides=consumer_overrides, with_producer=False,
        )
        self._leader_producer: Producer | None = None
        self._write_lock = threading.Lock()

    def start(self) -> None:
        self._sluice_log.start()
        self._log.start()
        self._started = True

    def stop(self) -> None:
        self.resign()
        self._log.stop()
        self._sluice_log.stop()

    def read_to_end(self, timeout: float = 30.0) -> None:
        self._sluice_log.read_to_end(timeout)
        self._log.read_to_end(timeout)

    def snapshot(self) -> ClusterSnapshot:
        """A consistent copy (shallow per map) to read without the lock."""
        with self._lock:
            copy = self._snapshot.copy()
        assert isinstance(copy, ClusterSnapshot)
        return copy

    # -- reading -------------------------------------------------------------------------------------

    def _apply(self, raw_key: bytes | None, raw_value: bytes | None) -> None:
        if raw_key is None:
            return
        key = raw_key.decode("utf-8", "replace")
        if key.startswith("sluice-backfill-"):
            return  # backfill jobs (worker.backfill.kafka_store): not the herder's business
        try:
            value = orjson.loads(raw_value) if raw_value is not None else None
        except orjson.JSONDecodeError:
            log.warning("Skipping config record %s: the value is not JSON", key)
            return
        if key.startswith(LOGGER_CLUSTER_PREFIX):
            logger = key[len(LOGGER_CLUSTER_PREFIX) :]
            self._logger_level_record(logger, value)
            return
        with self._lock:
            s = self._snapshot
            s.sequence += 1
            if key == LEGACY_ASSIGNMENT_KEY:
                self._legacy_live = raw_value is not None
                if raw_value is not None:
                    self._legacy_assignment = Assignment.from_json(raw_value)
                s.assignment = self._assignment or self._legacy_assignment
            elif not apply_record(s, key, value):
                log.debug("Ignoring config record with unknown key %s", key)
        self._on_change()

    def _apply_sluice(self, raw_key: bytes | None, raw_value: bytes | None) -> None:
        """A record of ``sluice.storage.topic``."""
        if raw_key is None:
            return
        key = raw_key.decode("utf-8", "replace")
        if key != ASSIGNMENT_KEY:
            log.debug("Ignoring record with unknown key %s in %s", key, self.sluice_topic)
            return
        try:
            assignment = Assignment.from_json(raw_value) if raw_value is not None else None
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            log.warning("Skipping assignment record in %s: %s", self.sluice_topic, exc)
            return
        with self._lock:
            self._assignment = assignment
            self._snapshot.assignment = assignment or self._legacy_assignment
            self._snapshot.sequence += 1
        self._on_change()

    def _logger_level_record(self, logger: str, value: Any) -> None:
        level = value.get("level") if isinstance(value, dict) else None
        if not isinstance(level, str):
            log.error("Ignoring the cluster-wide level of logger %s: the record holds no level string: %r", logger, value)
        elif self._started:
            self._on_logger_level(logger, level)
        else:
            log.debug("Ignoring level %s of logger %s: it was set for the cluster before this worker started", level, logger)

    # -- writing (any worker) ----------------------------------------------------------------------------

    def put_logger_level(self, logger: str, level: str, *, timeout: float = 30.0) -> None:
        """Write ``logger-cluster-<logger>``; returns once this worker has read it back (and so
        applied it). Any worker may write it, leader or not (KIP-976)."""
        producer = Producer(
            {
                "bootstrap.servers": self._bootstrap,
                "client.id": f"{self._client_id}-loggers",
                "acks": "all",
                "linger.ms": 0,
                **self._producer_overrides,
            }
        )
        errors: list[KafkaError] = []
        producer.produce(
            self.topic,
            orjson.dumps({"level": level}),
            f"{LOGGER_CLUSTER_PREFIX}{logger}".encode(),
            on_delivery=lambda err, _msg: errors.append(err) if err is not None else None,
        )
        if producer.flush(timeout) > 0:
            raise KafkaLogError(f"Writing the level of logger {logger} to {self.topic} timed out after {timeout}s")
        if errors:
            raise KafkaLogError(f"Writing the level of logger {logger} to {self.topic} failed: {errors[0].str()}")
        self.read_to_end(timeout)

    # -- writing (the leader only) ---------------------------------------------------------------------

    def become_leader(self, timeout: float = 30.0) -> None:
        """Fence any previous leader and make this worker the config topic's only writer."""
        with self._write_lock:
            if self._leader_producer is not None:
                return
            producer = Producer(
                {
                    "bootstrap.servers": self._bootstrap,
                    "client.id": f"{self._client_id}-leader",
                    "transactional.id": f"sluice-{self._group_id}-leader",
                    "transaction.timeout.ms": 60_000,
                    "linger.ms": 0,
                    **self._producer_overrides,
                }
            )
            try:
                producer.init_transactions(timeout)
            except KafkaException as exc:
                raise KafkaLogError(f"Cannot take over writes to {self.topic} as the leader: {exc}") from None
            self._leader_producer = producer
        # Everything the previous leader committed is visible from here on.
        self.read_to_end(timeout)
        if self.snapshot().session_key is None:
            self.write([(SESSION_KEY, _new_session_key())])

    def resign(self) -> None:
        with self._write_lock:
            producer, self._leader_producer = self._leader_producer, None
        if producer is not None:
            try:
                producer.flush(2)
            except KafkaException:
                pass

    @property
    def is_writer(self) -> bool:
        return self._leader_producer is not None

    def write(self, records: list[Record], *, wait_visible: bool = True, timeout: float = 30.0) -> None:
        """Write ``(key, value)`` records in one transaction; ``None`` values are tombstones."""
        self._transact([(self.topic, key, value) for key, value in records], timeout=timeout, wait_visible=wait_visible)

    def write_assignment(self, assignment: Assignment, *, timeout: float = 30.0) -> None:
        """Write the leader's assignment to ``sluice.storage.topic`` and wait until it is read back;
        the same transaction tombstones an earlier Sluice's record in the config topic."""
        records: list[tuple[str, str, Any]] = [(self.sluice_topic, ASSIGNMENT_KEY, assignment.to_json())]
        with self._lock:
            legacy = self._legacy_live
        if legacy:
            records.append((self.topic, LEGACY_ASSIGNMENT_KEY, None))
        self._transact(records, timeout=timeout, wait_visible=True)

    def _transact(self, records: list[tuple[str, str, Any]], *, timeout: float, wait_visible: bool) -> None:
        with self._write_lock:
            producer = self._leader_producer
            if producer is None:
                raise NotLeader("This worker is not the leader (any more); retry the request")
            written: dict[str, dict[int, int]] = {}  # topic → partition → the offset past our last record

            def delivered(err: KafkaError | None, msg: Any) -> None:
                if err is None:
                    ends = written.setdefault(msg.topic(), {})
                    ends[msg.partition()] = max(ends.get(msg.partition(), 0), msg.offset() + 1)

            try:
                producer.begin_transaction()
                for topic, key, value in records:
                    payload = value if isinstance(value, bytes) or value is None else orjson.dumps(value)
                    producer.produce(topic, payload, key.encode(), on_delivery=delivered)
                producer.commit_transaction(timeout)
                producer.poll(0)
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH) or (
                    error.fatal()
                ):
                    self._leader_producer = None
                    raise NotLeader(f"This worker was fenced out as the leader by a newer one: {error.str()}") from None
                if error.txn_requires_abort():
                    try:
                        producer.abort_transaction(timeout)
                    except KafkaException:
                        pass
                topics = ", ".join(sorted({topic for topic, _, _ in records}))
                raise KafkaLogError(f"Writing to {topics} failed: {error.str()}") from None
        if wait_visible:
            # Our own records, by their offsets: the commit's markers land a moment after it returns.
            for topic, ends in written.items():
                (self._sluice_log if topic == self.sluice_topic else self._log).read_past(ends, timeout)
            self.read_to_end(timeout)


def _new_session_key() -> dict[str, Any]:
    return {
        "key": base64.b64encode(secrets.token_bytes(32)).decode(),
        "algorithm": "HmacSHA256",
        "creation-timestamp": int(time.time() * 1000),
    }
