"""Connector and task statuses shared through ``status.storage.topic`` (Connect's records).

Keys ``status-connector-<c>`` and ``status-task-<c>-<n>``; values
``{"state", "trace", "worker_id", "generation"}`` (JSON without schemas), plus Sluice's
``restart_attempt``/``restart_attempts_max`` while an automatic restart is pending. Each worker
writes the statuses of what it runs and reads everyone's, so ``GET /connectors/{c}/status``
answers the same on every worker once the records have propagated (normally well under a
second). Every worker applies the records in topic order, so all of them converge on the same
view; what keeps a stale worker from corrupting it is on the write side: a worker out of contact
with the group writes no status, and ``UNASSIGNED`` never replaces another worker's status
(Connect's ``putSafe``).

Connectors' active topics (KIP-558) are records there too, Connect's: key
``status-topic-<topic>:connector-<c>``, value ``{"topic": {"name", "connector", "task",
"discoverTimestamp"}}``, written by the worker whose task first used the topic and deleted
(tombstones) by a reset or the connector's deletion, so ``GET /connectors/{c}/topics`` answers the
same on every worker — and on a Kafka Connect worker reading the same topic. An earlier Sluice
keyed them ``topic-<topic>-connector-<c>`` (Connect discards those with a warning): they are still
read, rewritten under Connect's key the next time a task uses the topic, and tombstoned with it.

A worker's own writes show at once in its own answers; the records before them in the topic,
which its reader may not have reached yet, do not undo them (until a write is read back, older
records of its key are skipped), so a worker never flips back to a state it already left.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from sluice.offsets.kafka_log import KafkaLog
from sluice.worker.herder.stores.status_store import StatusStore
from sluice.worker.status import ConnectorTaskId, State, Status

log = logging.getLogger(__name__)

#: How long a write of ours that never came back from the topic (a failed send) keeps older
#: records of its key from being applied.
UNREAD_WRITE_EXPIRY_S = 30.0


def encode_status(status: Status) -> bytes:
    body: dict[str, Any] = {
        "state": status.state.value,
        "trace": status.trace,
        "worker_id": status.worker_id,
        "generation": status.generation,
    }
    if status.restart_attempt is not None:
        body["restart_attempt"] = status.restart_attempt
        body["restart_attempts_max"] = status.restart_attempts_max
    return orjson.dumps(body)


def decode_status(value: bytes) -> Status:
    body = orjson.loads(value)
    return Status(
        State(body["state"]),
        str(body.get("worker_id") or ""),
        trace=body.get("trace"),
        generation=int(body.get("generation") or 0),
        restart_attempt=body.get("restart_attempt"),
        restart_attempts_max=body.get("restart_attempts_max"),
    )


def connector_key(name: str) -> bytes:
    return f"status-connector-{name}".encode()


def task_key(task_id: ConnectorTaskId) -> bytes:
    return f"status-task-{task_id.connector}-{task_id.task}".encode()


TOPIC_KEY_PREFIX = "status-topic-"
TOPIC_KEY_SEPARATOR = ":connector-"  # topic names cannot contain ':', so the first one splits the key
LEGACY_TOPIC_KEY_PREFIX = "topic-"


def topic_key(connector: str, topic: str) -> bytes:
    return f"{TOPIC_KEY_PREFIX}{topic}{TOPIC_KEY_SEPARATOR}{connector}".encode()


def legacy_topic_key(connector: str, topic: str) -> bytes:
    """The key an earlier Sluice wrote for an active topic (read and tombstoned, never written)."""
    return f"{LEGACY_TOPIC_KEY_PREFIX}{topic}-connector-{connector}".encode()


class KafkaStatusStore(StatusStore):
    """A :class:`StatusStore` whose writes go to the status topic and whose reads include every worker's."""

    def __init__(
        self,
        topic: str,
        bootstrap_servers: str,
        *,
        client_id: str,
        generation: Callable[[], int],
        producer_overrides: Mapping[str, Any] | None = None,
        consumer_overrides: Mapping[str, Any] | None = None,
        on_topic_reset: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__()
        self._generation = generation
        self._on_topic_reset = on_topic_reset
        # Key → (bytes of our latest write not yet read back, when it was sent).
        self._unread: dict[bytes, tuple[bytes | None, float]] = {}
        self._unread_lock = threading.Lock()
        # Active topics: connector → topics, and each record's key → (connector, topic) for its
        # tombstone (a topic may have a record under the legacy key as well as under Connect's).
        self._active: dict[str, set[str]] = {}
        self._topic_keys: dict[bytes, tuple[str, str]] = {}
        self._log = KafkaLog(
            topic,
            bootstrap_servers,
            self._apply,
            client_id=f"{client_id}-status",
            producer_overrides=producer_overrides,
            consumer_overrides=consumer_overrides,
        )

    def start(self) -> None:
        self._log.start()

    def stop(self) -> None:
        self._log.stop()

    def read_to_end(self, timeout: float = 30.0) -> None:
        self._log.read_to_end(timeout)

    # -- writes: local first (this worker's answers are immediate), then the topic --------------------

    def _superseded(self, current: Status | None, status: Status) -> bool:
        """Connect's ``putSafe``: a worker that stopped something never hides its new owner's status."""
        return status.state is State.UNASSIGNED and current is not None and current.worker_id != status.worker_id

    def put_connector(self, name: str, status: Status) -> None:
        if self._superseded(self.connector(name), status):
            return
        status.generation = max(status.generation, self._generation())
        super().put_connector(name, status)
        self._send(connector_key(name), encode_status(status))

    def put_task(self, task_id: ConnectorTaskId, status: Status) -> None:
        if self._superseded(self.task(task_id), status):
            return
        status.generation = max(status.generation, self._generation())
        super().put_task(task_id, status)
        # The error counters the base store attaches are this process's runtime view; a cluster's
        # status must read the same on every worker, so it carries Connect's fields only.
        status.task_id = None
        self._send(task_key(task_id), encode_status(status))

    def forget(self, connector: str) -> None:
        tasks = list(self.tasks(connector))
        super().forget(connector)
        self._send(connector_key(connector), None)
        for task_id in tasks:
            self._send(task_key(task_id), None)
        self.reset_topics(connector)

    # -- active topics (KIP-558) --------------------------------------------------------------------

    def topics(self, connector: str) -> set[str]:
        """The topics any task of ``connector`` on any worker has used since the last reset."""
        with self._lock:
            return set(self._active.get(connector, ()))

    def put_topic(self, connector: str, topic: str, task: int) -> None:
        """Record that a task of ``connector`` used ``topic`` (once: known topics are not rewritten,
        except one known only from a legacy record, which moves to Connect's key)."""
        key = topic_key(connector, topic)
        legacy = legacy_topic_key(connector, topic)
        with self._lock:
            if key in self._topic_keys:
                return
            self._active.setdefault(connector, set()).add(topic)
            self._topic_keys[key] = (connector, topic)
            had_legacy = self._topic_keys.pop(legacy, None) is not None
        body = {"topic": {"name": topic, "connector": connector, "task": task, "discoverTimestamp": int(time.time() * 1000)}}
        self._send(key, orjson.dumps(body))
        if had_legacy:
            self._send(legacy, None)

    def reset_topics(self, connector: str) -> None:
        """Forget the connector's active topics on every worker."""
        with self._lock:
            self._active.pop(connector, None)
            keys = sorted(k for k, (c, _) in self._topic_keys.items() if c == connector)
            for key in keys:
                del self._topic_keys[key]
        for key in keys:
            self._send(key, None)

    def forget_task(self, task_id: ConnectorTaskId) -> None:
        # Connect keeps a stopped task's last status (another worker may already own it): only
        # the local view is cleared, the topic keeps whatever the new owner writes.
        super().forget_task(task_id)

    def _send(self, key: bytes, value: bytes | None) -> None:
        with self._unread_lock:
            self._unread[key] = (value, time.monotonic())
        self._log.send_async(key, value)

    # -- reads from the topic -------------------------------------------------------------------------

    def _older_than_own_write(self, key: bytes, value: bytes | None) -> bool:
        """Whether this record precedes a write of ours that the reader has not reached yet."""
        with self._unread_lock:
            pending = self._unread.get(key)
            if pending is None:
                return False
            if pending[0] == value or time.monotonic() - pending[1] > UNREAD_WRITE_EXPIRY_S:
                del self._unread[key]  # ours, read back (or lost: stop waiting for it)
                return False
            return True

    def _apply(self, raw_key: bytes | None, raw_value: bytes | None) -> None:
        if raw_key is None or self._older_than_own_write(raw_key, raw_value):
            return
        key = raw_key.decode("utf-8", "replace")
        if key.startswith((TOPIC_KEY_PREFIX, LEGACY_TOPIC_KEY_PREFIX)):
            self._apply_topic(raw_key, raw_value)
        elif key.startswith("status-connector-"):
            name = key[len("status-connector-") :]
            if raw_value is None:
                with self._lock:
                    self._connectors.pop(name, None)
                return
            status = self._decode(key, raw_value)
            if status is None:
                return
            with self._lock:
                self._connectors[name] = status
        elif key.startswith("status-task-"):
            name, _, number = key[len("status-task-") :].rpartition("-")
            if not number.isdigit():
                return
            task_id = ConnectorTaskId(name, int(number))
            if raw_value is None:
                with self._lock:
                    self._tasks.pop(task_id, None)
                return
            status = self._decode(key, raw_value)
            if status is None:
                return
            with self._lock:
                self._tasks[task_id] = status

    def _apply_topic(self, raw_key: bytes, raw_value: bytes | None) -> None:
        if raw_value is None:
            with self._lock:
                known = self._topic_keys.get(raw_key)
            if known is None:
                return
            # The herder learns first, so it cannot publish the topic again from a task's
            # not-yet-reset set in between (a topic the task uses afterwards comes back, as in Connect).
            # A legacy key's tombstone is no reset: it may only mean the record moved to Connect's key.
            if self._on_topic_reset is not None and raw_key.startswith(TOPIC_KEY_PREFIX.encode()):
                self._on_topic_reset(known[0])
            with self._lock:
                if self._topic_keys.pop(raw_key, None) is not None and known not in self._topic_keys.values():
                    self._active.get(known[0], set()).discard(known[1])
            return
        try:
            body = orjson.loads(raw_value)["topic"]
            connector, topic = str(body["connector"]), str(body["name"])
        except (orjson.JSONDecodeError, KeyError, TypeError) as exc:
            log.warning("Skipping topic record %s: %s", raw_key.decode("utf-8", "replace"), exc)
            return
        with self._lock:
            self._active.setdefault(connector, set()).add(topic)
            self._topic_keys[raw_key] = (connector, topic)

    @staticmethod
    def _decode(key: str, value: bytes) -> Status | None:
        try:
            return decode_status(value)
        except (orjson.JSONDecodeError, KeyError, ValueError) as exc:
            log.warning("Skipping status record %s: %s", key, exc)
            return None
