"""Exactly-once delivery for a source task (KIP-618): its records and their offsets in one Kafka
transaction per boundary.

With ``exactly.once.source.support=enabled`` on a distributed worker every source task runs with a
transactional producer whose ``transactional.id`` is ``<group.id>-<connector>-<task>``, as in
Kafka Connect. The order of :class:`~worker.runners.source.SourceTaskRunner` changes to:

1. At start: ``init_transactions()`` — the broker aborts whatever transaction an older instance of
   the same task left open and fences that instance (its next send or commit fails, so a zombie
   on a frozen or partitioned worker can never commit again); then the offset store is read to its
   end (committed records only), and only then does the task start, from offsets no zombie can
   still change.
2. Poll, transform and convert as at least once; the first record after a commit begins a
   transaction, and every record goes into it.
3. At the boundary — after whole polls (``transaction.boundary=poll``, the default: a poll's
   records are never split, and consecutive polls share a transaction for :data:`POLL_GROUP_S`
   or twenty times the last commit's duration, whichever is longer, or until a poll returns
   nothing), every ``transaction.boundary.interval.ms``
   (``interval``), or when the task asks through its :class:`~connectors.api.TransactionContext`
   (``connector``) — the pending offsets
   are written to the offsets topic (the connector's own ``offsets.storage.topic`` when it names
   one: :mod:`~offsets.connector_topics`) *by the same producer*, on the partition Kafka's default
   partitioner gives their key (so a REST reset or a Connect worker writing the same key orders
   with them), and the transaction is committed: records and offsets become visible together to
   ``read_committed`` consumers, or not at all.
4. A commit that fails aborts the transaction and fails the task: nothing of it is visible and
   its offsets were not stored, so the restarted task produces the same records again, once.

The commit runs on a thread of its own while the task polls and converts its next records, which
go out once it is done — unless the task overrides ``SourceTask.commit()``, whose promise
("everything polled so far is stored") a poll made meanwhile would break: then the next poll waits
for the commit (a CDC source confirms its slot there). A stop commits the open transaction. Records the ``errors.*`` operator sends to a dead letter
queue go through the DLQ's own producer, outside the transaction (at least once), as in Connect,
whose source tasks have no DLQ at all.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from sluice.connectors.api import ConnectError, SourceRecord
from sluice.offsets import encode_offset
from sluice.offsets.partitioning import key_partition
from sluice.worker.runners.source_offsets import Pending

log = logging.getLogger(__name__)

#: librdkafka's transaction timeout (and Kafka's ``transaction.timeout.ms`` default): a transaction
#: the broker hears nothing of for this long is aborted. Message timeouts may not exceed it.
TRANSACTION_TIMEOUT_MS = 60_000


#: With ``transaction.boundary=poll``: how long consecutive polls share one transaction at least,
#: and at least how many times as long as the last commit took (so commits, a broker round trip
#: each, take about 5 % of the task's time whatever the broker's speed).
POLL_GROUP_S = 0.1
POLL_GROUP_COMMITS = 20


@dataclass(frozen=True)
class ExactlyOnce:
    """How a source task delivers exactly once: what the task builder gives the runner."""

    transactional_id: str
    offsets_topic: str
    boundary: str  # poll | interval | connector
    interval_ms: int

    def producer_config(self, config: Mapping[str, Any], *, overridden: frozenset[str] = frozenset()) -> dict[str, Any]:
        """``config`` made transactional: idempotent, ``acks=all``, this task's ``transactional.id``,
        and a message timeout within the transaction timeout (unless the connector chose one)."""
        out = dict(config)
        out["transactional.id"] = self.transactional_id
        out["enable.idempotence"] = True
        out["acks"] = "all"
        timeout = int(out.get("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS))
        out["transaction.timeout.ms"] = timeout
        for key in ("delivery.timeout.ms", "message.timeout.ms"):
            if key in out and key not in overridden and int(out[key]) > timeout:
                out[key] = timeout
        return out


def transactional_id(group_id: str, connector: str, task: int) -> str:
    """Kafka Connect's ``transactional.id`` of a source task: ``<group.id>-<connector>-<task>``."""
    return f"{group_id}-{connector}-{task}"


class TransactionRequests:
    """The :class:`~connectors.api.TransactionContext` a task gets with ``transaction.boundary=connector``:
    what it asked for, taken by the runner after each poll. Thread: the task thread (which is also
    the runner's)."""

    def __init__(self) -> None:
        self.commit_requested = False
        self.abort_requested = False
        #: ``id(record)`` → ``"commit"`` or ``"abort"``, for requests naming a record.
        self.at_record: dict[int, str] = {}

    def commit_transaction(self, record: SourceRecord | None = None) -> None:
        if record is None:
            self.commit_requested = True
        else:
            self.at_record[id(record)] = "commit"

    def abort_transaction(self, record: SourceRecord | None = None) -> None:
        if record is None:
            self.abort_requested = True
        else:
            self.at_record[id(record)] = "abort"

    def split(self, records: Sequence[SourceRecord]) -> list[tuple[Sequence[SourceRecord], str | None]]:
        """``records`` cut after each record the task named, with what it asked for there (the
        last part's action is ``None``: the end of the poll decides, through :meth:`take`)."""
        parts: list[tuple[Sequence[SourceRecord], str | None]] = []
        start = 0
        for i, record in enumerate(records):
            action = self.at_record.pop(id(record), None)
            if action is not None:
                parts.append((records[start : i + 1], action))
                start = i + 1
        if start < len(records) or not parts:
            parts.append((records[start:], None))
        self.at_record.clear()  # a request naming a record this poll did not return means nothing
        return parts

    def take(self) -> str | None:
        """``"abort"``, ``"commit"`` or ``None``: what the task asked for at the end of its poll (an
        abort wins, as in Connect)."""
        asked = "abort" if self.abort_requested else "commit" if self.commit_requested else None
        self.commit_requested = self.abort_requested = False
        return asked


class SourceTransactions:
    """One task's transactions on its producer. Runner thread; a commit made with
    :meth:`commit_later` runs on a thread of its own, and the runner touches nothing of this object
    but :meth:`due` until it has waited for that commit's future."""

    def __init__(self, settings: ExactlyOnce, task: str, timeout_s: float) -> None:
        self.settings = settings
        self._task = task
        self._timeout_s = timeout_s
        self._open = False
        self._offsets_partitions = 0
        self._partition_of: dict[bytes, int] = {}
        #: What the task asks for, with ``transaction.boundary=connector`` (its ``transaction_context``).
        self.requests = TransactionRequests() if settings.boundary == "connector" else None
        self._committer: ThreadPoolExecutor | None = None
        #: Records in the open transaction (``transaction-size-*``), and when it began.
        self.size = 0
        self._began = 0.0
        self._commit_s = 0.0  # how long the last commit took
        self.next_interval = 0.0

    @classmethod
    def of(cls, settings: ExactlyOnce | None, task: str, timeout_s: float) -> SourceTransactions | None:
        """The transactions of a task that delivers exactly once; ``None`` for one that does not."""
        return None if settings is None else cls(settings, task, timeout_s)

    @property
    def open(self) -> bool:
        return self._open

    def start(self, producer: Producer) -> None:
        """Fence every older instance of this task and abort what it left open (step 1)."""
        try:
            producer.init_transactions(self._timeout_s * 6)
        except KafkaException as exc:
            raise ConnectError(
                f"Cannot start exactly-once delivery for {self._task} (transactional.id "
                f"{self.settings.transactional_id}): {_describe(exc)}"
            ) from exc
        metadata = producer.list_topics(self.settings.offsets_topic, timeout=self._timeout_s * 6)
        topic = metadata.topics.get(self.settings.offsets_topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise ConnectError(
                f"Cannot write source offsets of {self._task} in its transactions: topic "
                f"{self.settings.offsets_topic} is not available ({getattr(topic, 'error', None) or 'no partitions'})"
            )
        self._offsets_partitions = len(topic.partitions)
        self.next_interval = time.monotonic() + self.settings.interval_ms / 1000

    def due(self, polled: bool, requests: TransactionRequests | None) -> str | None:
        """What the boundary calls for after a poll (``polled``: it returned records): ``"commit"``,
        ``"abort"`` (only a task that defines its boundaries asks for that) or ``None``."""
        boundary = self.settings.boundary
        if boundary == "poll":
            # Whole polls, grouped: a poll's records are never split, and consecutive polls share
            # a transaction for up to POLL_GROUP_S (a commit is a broker round trip; per poll of a
            # thousand records it cost more than producing them) or until a poll comes back empty.
            if not self._open:  # only offsets moved (a transform dropped every record): store them
                return "commit" if polled else None
            window = max(POLL_GROUP_S, POLL_GROUP_COMMITS * self._commit_s)
            return "commit" if not polled or time.monotonic() - self._began >= window else None
        if boundary == "interval":
            return "commit" if time.monotonic() >= self.next_interval else None
        assert requests is not None, "transaction.boundary=connector without a TransactionContext"
        return requests.take()

    def begin(self, producer: Producer) -> None:
        """Open a transaction unless one is open (step 2)."""
        if not self._open:
            try:
                producer.begin_transaction()
            except KafkaException as exc:
                raise ConnectError(f"Cannot begin a transaction for {self._task}: {_describe(exc)}") from exc
            self._open = True
            self._began = time.monotonic()

    def commit(self, producer: Producer, offsets: Pending) -> int | None:
        """Write ``offsets`` into the open transaction and commit it (step 3); on failure abort it
        and raise (step 4). Opens one first when only offsets moved (records a transform dropped).
        Returns how many records the transaction held (``None``: there was nothing to commit)."""
        if not offsets and not self._open:
            return None
        self.begin(producer)
        topic = self.settings.offsets_topic
        started = time.monotonic()
        try:
            for key, (_, offset) in offsets.items():
                value = None if offset is None else encode_offset(offset)
                producer.produce(topic, value, key, partition=self._partition(key))
            self._commit(producer)
        except KafkaException as exc:
            self._abort_after(producer, exc)
        self._open = False
        size, self.size = self.size, 0
        self.next_interval = time.monotonic()
        self._commit_s = self.next_interval - started
        self.next_interval += self.settings.interval_ms / 1000
        return size

    def commit_later(self, producer: Producer, offsets: Pending) -> Future[int | None] | None:
        """:meth:`commit` on a thread of its own, so the task polls and converts its next records
        while the broker commits (they are produced once :meth:`commit`'s future is done: the
        runner waits for it before it begins the next transaction). ``None``: nothing to commit."""
        if not offsets and not self._open:
            return None
        if self._committer is None:
            self._committer = ThreadPoolExecutor(1, thread_name_prefix=f"commit-{self._task}")
        return self._committer.submit(self.commit, producer, offsets)

    def close(self) -> None:
        """Wait for a commit still in flight (its outcome was or will not be needed)."""
        if self._committer is not None:
            self._committer.shutdown(wait=True)
            self._committer = None

    def abort(self, producer: Producer) -> None:
        """Discard the open transaction: its records and offsets (the task asked for it)."""
        if self._open:
            try:
                producer.abort_transaction(self._timeout_s * 6)
            except KafkaException as exc:
                raise ConnectError(f"Cannot abort the transaction of {self._task}: {_describe(exc)}") from exc
            self._open = False
            self.size = 0

    def _commit(self, producer: Producer) -> None:
        deadline = time.monotonic() + self._timeout_s * 6
        while True:
            try:
                producer.commit_transaction(max(1.0, deadline - time.monotonic()))
                return
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if not err.retriable() or time.monotonic() >= deadline:
                    raise
                log.debug("Committing the transaction of %s again: %s", self._task, err.str())

    def _abort_after(self, producer: Producer, exc: KafkaException) -> None:
        err: KafkaError = exc.args[0]
        self._open = False
        if err.fatal():
            raise ConnectError(
                f"{self._task} was fenced out or its producer failed fatally ({_describe(exc)}): another "
                f"instance of the task (transactional.id {self.settings.transactional_id}) has started, or the "
                "transaction timed out. Its last transaction is not visible and its offsets were not stored"
            ) from exc
        try:
            producer.abort_transaction(self._timeout_s * 6)
        except KafkaException:
            log.warning(
                "Could not abort the failed transaction of %s; the broker aborts it when it times out", self._task
            )
        raise ConnectError(
            f"Cannot commit the transaction of {self._task} ({_describe(exc)}): it was aborted, none of its "
            "records is visible to read_committed consumers and its offsets were not stored; the task "
            "produces them again when it restarts"
        ) from exc

    def _partition(self, key: bytes) -> int:
        partition = self._partition_of.get(key)
        if partition is None:
            if len(self._partition_of) > 10_000:
                self._partition_of.clear()
            partition = self._partition_of[key] = key_partition(key, self._offsets_partitions)
        return partition


def _describe(exc: KafkaException) -> str:
    err = exc.args[0]
    return err.str() if isinstance(err, KafkaError) else str(exc)


def fence(producer_config: Mapping[str, Any], transactional_ids: list[str], timeout_s: float) -> None:
    """Fence every producer that uses one of ``transactional_ids``: a fresh producer with the same id
    calls ``init_transactions``, which bumps the id's epoch and aborts its open transaction, so the
    task instance that had it can never commit again (what Kafka's ``Admin.fenceProducers`` does).
    Raises :class:`ConnectError` naming the id that could not be fenced."""
    for tid in transactional_ids:
        producer = Producer({**producer_config, "transactional.id": tid, "enable.idempotence": True, "acks": "all"})
        try:
            producer.init_transactions(timeout_s)
        except KafkaException as exc:
            raise ConnectError(f"Cannot fence the producers of transactional.id {tid}: {_describe(exc)}") from exc
        finally:
            producer.flush(0)
    if transactional_ids:
        log.info("Fenced %d task producer(s): %s", len(transactional_ids), ", ".join(transactional_ids))
