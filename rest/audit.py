"""The audit trail: who changed what, and who was turned away.

Every mutating request (POST, PUT, PATCH, DELETE) and every refused one (401, 403) becomes one JSON
record::

    {"time": "2025-01-31T12:00:00.123456+00:00", "principal": "alice", "client": "10.0.0.7",
     "method": "PUT", "path": "/connectors/orders/pause", "connector": "orders",
     "status": 202, "outcome": "ok"}

``outcome`` is ``ok`` (status below 400), ``refused`` (401 or 403) or ``failed`` (any other error,
or no response at all). The record is written as one line on the ``sluice.audit`` logger and,
with the worker key ``rest.audit.topic``, produced to that Kafka topic keyed by connector name.
It never holds a request body, a header value or a query string: those are where secrets travel.
"""

from __future__ import annotations

import atexit
import datetime
import json
import logging
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from sluice.connectors.api import ConfigError
from sluice.worker.execution.clients import translate

log = logging.getLogger(__name__)
#: Operators route and keep the trail by this name, apart from the worker's diagnostics.
audit_log = logging.getLogger("sluice.audit")

MUTATING_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
REFUSED_STATUSES = frozenset({401, 403})
ANONYMOUS = "anonymous"

#: The ``producer.*`` keys the audit producer borrows: how to reach and log in to the cluster, nothing
#: about batching or delivery, which the task producers tune for throughput.
_SECURITY_PREFIXES = ("security.protocol", "sasl.", "ssl.")

_PRODUCER_DEFAULTS: dict[str, Any] = {
    "client.id": "sluice-rest-audit",
    "acks": "all",
    "linger.ms": 20,
    # Bounded: while the cluster is unreachable the oldest records expire and later ones are
    # dropped with a warning rather than growing the worker's memory without limit.
    "message.timeout.ms": 120_000,
    "queue.buffering.max.messages": 100_000,
}

#: How long process exit waits for records still in the producer's queue.
_FLUSH_ON_EXIT_S = 5.0


def outcome(status: int | None) -> str:
    """``ok``, ``refused`` or ``failed`` for an HTTP status (``None``: the app answered nothing)."""
    if status is None:
        return "failed"
    if status in REFUSED_STATUSES:
        return "refused"
    return "ok" if status < 400 else "failed"


def is_audited(method: str, status: int | None) -> bool:
    """Whether a request belongs in the trail: it tried to change something, or it was refused."""
    return method in MUTATING_METHODS or status in REFUSED_STATUSES


class AuditTopic:
    """Produces audit records to a Kafka topic without ever making a request wait.

    ``produce`` only queues (librdkafka sends from its own thread); a full queue or an unreachable
    cluster loses records with a warning in the worker log instead of blocking or failing requests.
    """

    def __init__(self, topic: str, producer_config: Mapping[str, Any]) -> None:
        self.topic = topic
        try:
            self._producer = Producer(dict(producer_config))
        except KafkaException as exc:
            raise ConfigError(f"Cannot create the producer for rest.audit.topic {topic}: {exc}", key="rest.audit.topic") from None

    @classmethod
    def from_worker_config(cls, topic: str, raw: Mapping[str, Any]) -> AuditTopic:
        """A producer on the worker's ``bootstrap.servers`` with its ``producer.*`` security keys."""
        security = {
            key[len("producer.") :]: value
            for key, value in raw.items()
            if key.startswith("producer.") and key[len("producer.") :].startswith(_SECURITY_PREFIXES)
        }
        config = {
            "bootstrap.servers": str(raw.get("bootstrap.servers") or "localhost:9092"),
            **_PRODUCER_DEFAULTS,
            **translate(security),
            # librdkafka's lines through Python logging, where the worker's secret masking applies.
            "logger": logging.getLogger("librdkafka"),
        }
        return cls(topic, config)

    def send(self, key: str | None, record: bytes) -> None:
        """Queue one record; never blocks and never raises."""
        try:
            self._producer.produce(self.topic, record, key.encode() if key is not None else None, on_delivery=self._delivered)
        except (BufferError, KafkaException) as exc:
            log.warning("Audit record not sent to topic %s: %s", self.topic, exc)
        # Serve delivery reports of earlier records; 0 means it returns at once.
        self._producer.poll(0)

    def close(self, timeout_s: float = _FLUSH_ON_EXIT_S) -> None:
        """Wait up to ``timeout_s`` for queued records; what is still queued then is reported lost."""
        left = self._producer.flush(timeout_s)
        if left:
            log.warning("%d audit record(s) not delivered to topic %s before shutdown", left, self.topic)

    def _delivered(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            log.warning("Audit record not delivered to topic %s: %s", self.topic, error)


class AuditTrail:
    """Writes the audit records of :mod:`sluice.rest.audit` (the log line always, the topic when configured)."""

    def __init__(self, topic: AuditTopic | None = None) -> None:
        self.topic = topic

    @classmethod
    def from_worker_config(cls, raw: Mapping[str, Any]) -> AuditTrail:
        """Reads ``rest.audit.topic``; its producer flushes when the process exits."""
        name = str(raw.get("rest.audit.topic") or "").strip()
        if not name:
            return cls()
        topic = AuditTopic.from_worker_config(name, raw)
        # The REST server runs without lifespan events, so process exit is the one shutdown hook.
        atexit.register(topic.close)
        return cls(topic)

    def record(
        self,
        *,
        principal: str | None,
        client: str | None,
        method: str,
        path: str,
        connector: str | None,
        status: int | None,
    ) -> None:
        """Write one request's record."""
        entry = {
            "time": datetime.datetime.now(datetime.UTC).isoformat(),
            "principal": principal or ANONYMOUS,
            "client": client,
            "method": method,
            "path": path,
            "connector": connector,
            "status": status,
            "outcome": outcome(status),
        }
        # ASCII JSON escapes every line break (newline, U+2028, …), so a crafted path cannot forge a second line.
        line = json.dumps(entry, separators=(",", ":"))
        audit_log.info("%s", line)
        if self.topic is not None:
            self.topic.send(connector, line.encode())
