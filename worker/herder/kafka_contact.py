"""Whether a standalone worker is in contact with its Kafka cluster, for ``GET /health``.

A distributed worker learns it from its group membership
(:mod:`sluice.worker.distributed.membership`): librdkafka reports the group's state every half
second. A standalone worker has no client that talks to Kafka all the time — its tasks' clients come
and go, and each reports its own outage in the task's status — so it asks: one AdminClient sends a
metadata request for one topic (:data:`PROBE_TOPIC`) every :data:`PROBE_INTERVAL_S`, one request
at a time. That is one small request per interval to one broker, on a client of its own, so nothing
on a task's data path waits for it or shares its connection.

The rule is distributed mode's (:func:`sluice.worker.herder.api.contact_lost_after_s`): contact
counts as lost once no broker has answered for 80 % of the default session timeout (8 s), from the
last answer, or from the start when none has come yet. The log names the loss once (WARNING) and
its end once (INFO); librdkafka's per-retry connection lines go to DEBUG.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from sluice.worker.herder.api import DEFAULT_SESSION_TIMEOUT_MS, contact_lost_after_s
from sluice.worker.observability.outages import LibrdkafkaLog, kafka_reason

log = logging.getLogger(__name__)

#: Seconds between two probes (and the longest a probe waits for its answer).
PROBE_INTERVAL_S = 2.0

#: The topic whose metadata the probe asks for: one small answer, also when it does not exist (the
#: answer then says so) or the worker may not describe it (likewise); any answer is contact.
PROBE_TOPIC = "__consumer_offsets"

#: librdkafka reconnects to a refused bootstrap server every 50 ms or so while a request waits;
#: once a second is enough to see a broker come back within a probe interval.
_PROBE_CLIENT: dict[str, Any] = {"reconnect.backoff.ms": 1_000, "reconnect.backoff.max.ms": 1_000}


class KafkaContact:
    """Probes ``bootstrap_servers`` on a thread of its own; :meth:`loss` says whether contact is lost."""

    def __init__(
        self,
        bootstrap_servers: str,
        overrides: Mapping[str, Any] | None = None,
        *,
        lost_after_s: float = contact_lost_after_s(DEFAULT_SESSION_TIMEOUT_MS),
        interval_s: float = PROBE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        #: How long without an answer counts as lost (tests shorten it).
        self.lost_after_s = lost_after_s
        self._overrides = dict(overrides or {})
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._since = clock()  # start of the current silence: the last answer, or the start
        self._answered = False  # whether any broker has answered since the start
        self._reason: str | None = None  # the last error of this silence
        self._announced = False
        self._off = False  # no probe: the client could not be made (loss() then says nothing)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            self._since = self._clock()
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            **_PROBE_CLIENT,
            **self._overrides,
            "error_cb": self._on_error,
            "logger": LibrdkafkaLog(tracked=True),  # the loss is logged once, here
        }
        try:
            admin = AdminClient(config)
        except (KafkaException, ValueError, TypeError) as exc:  # a setting librdkafka refuses
            log.warning(
                "Cannot probe the Kafka cluster at %s (%s): GET /health will not report losing it",
                self.bootstrap_servers,
                exc,
            )
            self._off = True
            return
        self._thread = threading.Thread(target=self._run, args=(admin,), name="kafka-contact", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)

    # -- what the probe learns (public: a test, or another client that heard from Kafka) -------------

    def answered(self) -> None:
        """A broker answered: contact holds (and, if it was lost, is back)."""
        with self._lock:
            back = self._announced
            self._since = self._clock()
            self._answered = True
            self._reason = None
            self._announced = False
        if back:
            log.info("In contact with the Kafka cluster at %s again", self.bootstrap_servers)

    def failed(self, reason: str | None = None) -> None:
        """No answer this time; ``reason`` says why when known (``Connection refused``)."""
        with self._lock:
            if reason:
                self._reason = reason
            announce = not self._announced and self._clock() - self._since >= self.lost_after_s
            self._announced = self._announced or announce
        if announce:
            log.warning(
                "This worker %s; GET /health reports it unhealthy until a broker answers", self._describe_loss()
            )

    def loss(self) -> str | None:
        """``None`` while in contact; else what is lost and since when, naming the bootstrap servers
        (a predicate of "the worker": ``has lost contact with the Kafka cluster at …``)."""
        with self._lock:
            if self._off or self._clock() - self._since < self.lost_after_s:
                return None
        return self._describe_loss()

    def _describe_loss(self) -> str:
        with self._lock:
            silent = self._clock() - self._since
            answered, reason = self._answered, self._reason
        why = f" (last error: {reason})" if reason else ""
        if answered:
            return f"has lost contact with the Kafka cluster at {self.bootstrap_servers}: no broker has answered for {silent:.0f} s{why}"
        return f"cannot reach the Kafka cluster at {self.bootstrap_servers}: no broker has answered since it started {silent:.0f} s ago{why}"

    # -- the probe thread --------------------------------------------------------------------------------

    def _run(self, admin: AdminClient) -> None:
        while not self._stop.is_set():
            started = self._clock()
            try:
                # A metadata request for one topic, answered whether or not it exists. Not the Admin
                # API's DescribeCluster: librdkafka aborted the process (an assertion in its admin
                # response parsing) when a broker went away with that request in flight.
                admin.list_topics(PROBE_TOPIC, timeout=self._interval_s)
            except (KafkaException, RuntimeError) as exc:
                error = exc.args[0] if exc.args else None
                # "Timed out" says less than the connection error the error callback already gave.
                quiet = isinstance(error, KafkaError) and error.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
                self.failed(None if quiet else str(exc))
            else:
                self.answered()
            admin.poll(0)  # serves the error callback and librdkafka's log lines
            self._stop.wait(max(0.0, self._interval_s - (self._clock() - started)))

    def _on_error(self, error: KafkaError) -> None:
        if error.code() != KafkaError._ALL_BROKERS_DOWN:  # "1/1 brokers are down" hides the reason
            with self._lock:
                self._reason = kafka_reason(error.str())
