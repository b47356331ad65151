"""The status store of a standalone worker: connector and task statuses held in memory.

Kafka Connect's ``MemoryStatusBackingStore``. The distributed herder uses its subclass
:class:`~sluice.worker.herder.stores.kafka_status_store.KafkaStatusStore`, which also writes each
status to the status topic and reads the other workers' from it.
"""

from __future__ import annotations

import threading

from sluice.worker.status import ConnectorTaskId, Status


class StatusStore:
    """In-memory status of connectors and tasks, and the topics their tasks used (KIP-558); the
    Kafka-backed store comes with distributed mode."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connectors: dict[str, Status] = {}
        self._tasks: dict[ConnectorTaskId, Status] = {}
        self._used_topics: dict[str, set[str]] = {}

    def start(self) -> None:
        """Nothing to read: the store starts empty."""

    def stop(self) -> None:
        """Nothing to release."""

    def put_connector(self, name: str, status: Status) -> None:
        with self._lock:
            self._connectors[name] = status

    def put_task(self, task_id: ConnectorTaskId, status: Status) -> None:
        status.task_id = task_id
        with self._lock:
            self._tasks[task_id] = status

    def connector(self, name: str) -> Status | None:
        with self._lock:
            return self._connectors.get(name)

    def task(self, task_id: ConnectorTaskId) -> Status | None:
        with self._lock:
            return self._tasks.get(task_id)

    def tasks(self, connector: str) -> dict[ConnectorTaskId, Status]:
        with self._lock:
            return {tid: s for tid, s in self._tasks.items() if tid.connector == connector}

    def snapshot(self) -> tuple[dict[str, Status], dict[ConnectorTaskId, Status]]:
        """Copies of every connector's and task's status (``GET /metrics`` counts them)."""
        with self._lock:
            return dict(self._connectors), dict(self._tasks)

    def topics(self, connector: str) -> set[str]:
        """The topics any task of ``connector`` has used since its creation or the last reset."""
        with self._lock:
            return set(self._used_topics.get(connector, ()))

    def put_topic(self, connector: str, topic: str, task: int) -> None:
        """Record that task ``task`` of ``connector`` used ``topic``."""
        with self._lock:
            self._used_topics.setdefault(connector, set()).add(topic)

    def reset_topics(self, connector: str) -> None:
        """Forget the topics ``connector`` used."""
        with self._lock:
            self._used_topics.pop(connector, None)

    def forget(self, connector: str) -> None:
        with self._lock:
            self._connectors.pop(connector, None)
            self._used_topics.pop(connector, None)
            for tid in [t for t in self._tasks if t.connector == connector]:
                del self._tasks[tid]

    def forget_task(self, task_id: ConnectorTaskId) -> None:
        with self._lock:
            self._tasks.pop(task_id, None)
