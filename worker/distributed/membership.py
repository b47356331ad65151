"""Group membership and leadership through a Kafka consumer group.

Every worker joins the consumer group ``group.id`` subscribed to the one-partition config topic.
Kafka's group coordinator then does what a coordination service would: it tracks who is alive
(heartbeats within ``session.timeout.ms``), and the member that is assigned partition 0 is the
leader. Each member's ``client.id`` carries its worker id and REST URL, so the leader can list
the live workers with ``describe_consumer_groups``.

The membership thread also answers the question the herder must ask before it lets tasks run:
*is this worker still in contact with the group?* librdkafka reports the group's state in its
statistics every second; when the coordinator has not been reachable in a steady state for
``session.timeout.ms`` the coordinator has expelled us, and the leader will hand our work to
others after ``scheduled.rebalance.max.delay.ms`` — so the herder stops our tasks first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

log = logging.getLogger(__name__)

_CLIENT_ID_PREFIX = "sluice-worker "


@dataclass(frozen=True)
class Member:
    worker_id: str
    url: str


def encode_client_id(worker_id: str, url: str) -> str:
    return f"{_CLIENT_ID_PREFIX}{worker_id} {url}"


def decode_client_id(client_id: str) -> Member | None:
    if not client_id.startswith(_CLIENT_ID_PREFIX):
        return None
    worker_id, _, url = client_id[len(_CLIENT_ID_PREFIX) :].partition(" ")
    return Member(worker_id, url) if worker_id else None


class GroupMembership:
    """Joins the group; tracks leadership, contact with the coordinator and the live members."""

    def __init__(
        self,
        *,
        bootstrap_servers: str,
        group_id: str,
        topic: str,
        worker_id: str,
        url: str,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        rebalance_timeout_ms: int,
        on_change: Callable[[], None],
        overrides: Mapping[str, Any] | None = None,
    ) -> None:
        self.worker_id = worker_id
        self.url = url
        self.group_id = group_id
        self._topic = topic
        self._on_change = on_change
        self._session_timeout_s = session_timeout_ms / 1000
        self._lock = threading.Lock()
        self._leader = False
        self._in_group = False
        self._last_contact = time.monotonic()
        #: Wall-clock time of the last assignment (rebalance) this worker took part in, or None.
        self.assigned_at: float | None = None
        #: Assignments received so far (``completed-rebalances-total``).
        self.completed_rebalances = 0
        self._joined_as_leader = False
        self._last_stats: float | None = None
        # After this process was frozen (SIGSTOP, a long GC pause, a starved VM), librdkafka may
        # still report a steady group for a moment although the coordinator expelled us: contact
        # then counts only after a new assignment, or once a whole session timeout has passed.
        self._suspect_until: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap_servers,
                "group.id": group_id,
                "client.id": encode_client_id(worker_id, url),
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": heartbeat_interval_ms,
                # The rebalance timeout of the JoinGroup request is librdkafka's max.poll.interval.ms.
                "max.poll.interval.ms": max(rebalance_timeout_ms, session_timeout_ms),
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "latest",
                "partition.assignment.strategy": "range",
                "statistics.interval.ms": 500,
                "stats_cb": self._on_stats,
                **dict(overrides or {}),
            }
        )
        self._admin = AdminClient({"bootstrap.servers": bootstrap_servers, **dict(overrides or {})})

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        self._consumer.subscribe([self._topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
        self._thread = threading.Thread(target=self._run, name="group-membership", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        try:
            self._consumer.close()  # leaves the group at once, so the others rebalance without waiting
        except (KafkaException, RuntimeError):
            pass

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self._consumer.poll(0.2)
                if msg is not None and msg.error() is not None:
                    log.debug("Group consumer: %s", msg.error())
            except (KafkaException, RuntimeError) as exc:
                if self._stop.is_set():
                    return
                log.warning("Group membership error: %s", exc)
                time.sleep(0.5)

    # -- callbacks (on the membership thread) ------------------------------------------------------------

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        leader = any(p.partition == 0 for p in partitions)
        with self._lock:
            # A revocation clears _leader first, so compare with the role last joined as: a
            # leader that comes back a follower says so.
            changed = leader != self._joined_as_leader or not self._in_group
            self._joined_as_leader = leader
            self._leader = leader
            self._in_group = True
            self._suspect_until = None
            self._last_contact = time.monotonic()
            self.assigned_at = time.time()
            self.completed_rebalances += 1
        if changed:
            log.info("Joined group %s as %s", self.group_id, "the leader" if leader else "a follower")
        self._on_change()

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self._lock:
            was = self._leader
            self._leader = False
        if was:
            log.info("Leadership of group %s revoked (rebalance)", self.group_id)
        self._on_change()

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        with self._lock:
            self._leader = False
            self._in_group = False
        log.warning("Lost membership of group %s (session timed out)", self.group_id)
        self._on_change()

    def _on_stats(self, stats_json: str) -> None:
        try:
            cgrp = orjson.loads(stats_json).get("cgrp") or {}
        except orjson.JSONDecodeError:
            return
        steady = cgrp.get("state") == "up" and cgrp.get("join_state") in ("steady", "wait-assign-call", "wait-unassign-call")
        changed = False
        now = time.monotonic()
        with self._lock:
            if self._last_stats is not None and now - self._last_stats > self._session_timeout_s * 0.8:
                log.warning(
                    "This worker was unresponsive for %.1fs (frozen or starved): holding its tasks until the group confirms it",
                    now - self._last_stats,
                )
                self._suspect_until = now + self._session_timeout_s
                changed = True
            self._last_stats = now
            if self._suspect_until is not None and now < self._suspect_until:
                steady = False
            if steady:
                self._last_contact = time.monotonic()
                if not self._in_group and cgrp.get("join_state") == "steady":
                    self._in_group = True
                    changed = True
        if changed:
            self._on_change()

    # -- queries -----------------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        with self._lock:
            return self._leader and self._in_contact_locked()

    @property
    def in_contact(self) -> bool:
        """``False`` once the coordinator may have expelled us (no steady contact for the session timeout)."""
        with self._lock:
            return self._in_contact_locked()

    def _in_contact_locked(self) -> bool:
        # Stop a little before the coordinator's own deadline: our work must be idle by the time
        # it can be reassigned.
        return self._in_group and time.monotonic() - self._last_contact < self._session_timeout_s * 0.8

    def members(self, timeout: float = 10.0) -> list[Member]:
        """The live workers as the group coordinator sees them."""
        future = self._admin.describe_consumer_groups([self.group_id], request_timeout=timeout)[self.group_id]
        description = future.result(timeout)
        members = []
        for member in description.members:
            decoded = decode_client_id(member.client_id)
            if decoded is not None:
                members.append(decoded)
        return members
