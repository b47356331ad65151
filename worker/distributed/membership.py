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
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from sluice.worker.herder.api import contact_lost_after_s

log = logging.getLogger(__name__)

_CLIENT_ID_PREFIX = "sluice-worker "

#: How long the coordinator must have been up, by every statistics report, before :meth:`GroupMembership.members`
#: sends a request (and how old the last report may be): see librdkafka #4605 there.
DESCRIBE_AFTER_STEADY_S = 2.0
#: How often the membership's AdminClient reports the state of its connections.
ADMIN_STATS_INTERVAL_MS = 500


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
        self._lost_after_s = contact_lost_after_s(session_timeout_ms)
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
        #: The group client's last statistics ("cgrp"), for messages about lost contact.
        self._group_client: dict[str, Any] = {}
        # After this process was frozen (SIGSTOP, a long GC pause, a starved VM), librdkafka may
        # still report a steady group for a moment although the coordinator expelled us: contact
        # then counts only after a new assignment, or once a whole session timeout has passed.
        self._suspect_until: float | None = None
        # What members() needs before it asks the coordinator (librdkafka #4605, see there): whether the
        # last statistics report was steady, since when every report has had the coordinator up (None:
        # not up in the last one), and the describe request still outstanding, if any.
        self._steady = False
        self._coordinator_up_since: float | None = None
        self._describing: Future[Any] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Who closes the consumer: :meth:`stop`, or the membership thread when stop could not wait for it.
        self._close_lock = threading.Lock()
        self._poller_done = False
        self._poller_closes = False
        self._consumer = _group_consumer(
            bootstrap_servers, group_id, encode_client_id(worker_id, url),
            session_timeout_ms, heartbeat_interval_ms, rebalance_timeout_ms, self._on_stats, overrides,
        )  # fmt: skip
        self._admin_up_since: float | None = None
        self._last_admin_stats: float | None = None
        self._admin: AdminClient | None = _membership_admin(bootstrap_servers, overrides, self._on_admin_stats)

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        self._consumer.subscribe([self._topic], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)
        self._thread = threading.Thread(target=self._run, name="group-membership", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        poller = self._thread
        if poller is not None:
            poller.join(10)
        # The AdminClient is destroyed now, on this thread. Kept, it would go on reconnecting to the
        # cluster (and keep any coordinator request of members() alive) for as long as this object
        # lives; and this object is in reference cycles (the consumer's callbacks are its bound
        # methods), so the garbage collector would destroy the client later, on whichever thread it
        # happens to run: on a librdkafka thread, rd_kafka_destroy() aborts the process.
        self._admin = None
        with self._close_lock:
            if poller is not None and poller.is_alive() and not self._poller_done:
                # Still inside poll() (a slow callback): closing the consumer under it would pull the
                # client from under a call in flight, so the membership thread closes it as it returns.
                self._poller_closes = True
                return
        self._close_consumer()

    def _close_consumer(self) -> None:
        try:
            self._consumer.close()  # leaves the group at once, so the others rebalance without waiting
        except (KafkaException, RuntimeError):
            pass

    def _run(self) -> None:
        try:
            self._poll()
        finally:
            with self._close_lock:
                self._poller_done = True
                if self._poller_closes:
                    self._close_consumer()

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self._consumer.poll(0.2)
                if msg is not None and msg.error() is not None:
                    log.debug("Group consumer: %s", msg.error())
                admin = self._admin
                if admin is not None:
                    admin.poll(0)  # its statistics callback
                del admin
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
            self._steady = True  # a join just completed: the group is steady though the last report predates it
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
            self._steady = False
            self._coordinator_up_since = None
        log.warning("Lost membership of group %s (session timed out)", self.group_id)
        self._on_change()

    def _on_stats(self, stats_json: str) -> None:
        try:
            cgrp = orjson.loads(stats_json).get("cgrp") or {}
        except orjson.JSONDecodeError:
            return
        up = cgrp.get("state") == "up"
        steady = up and cgrp.get("join_state") in ("steady", "wait-assign-call", "wait-unassign-call")
        changed = False
        now = time.monotonic()
        with self._lock:
            self._group_client = cgrp
            # A gap between reports is time nobody saw: the coordinator's steady stretch starts anew.
            gap = self._last_stats is None or now - self._last_stats > DESCRIBE_AFTER_STEADY_S
            if self._last_stats is not None and now - self._last_stats > self._lost_after_s:
                log.warning(
                    "This worker was unresponsive for %.1fs (frozen or starved): holding its tasks until the group confirms it",
                    now - self._last_stats,
                )
                self._suspect_until = now + self._session_timeout_s
                changed = True
            self._last_stats = now
            if self._suspect_until is not None and now < self._suspect_until:
                steady = up = False
            self._steady = steady
            if not up:
                self._coordinator_up_since = None
            elif gap or self._coordinator_up_since is None:
                self._coordinator_up_since = now
            if steady:
                self._last_contact = time.monotonic()
                if not self._in_group and cgrp.get("join_state") == "steady":
                    self._in_group = True
                    changed = True
        if changed:
            self._on_change()

    def _on_admin_stats(self, stats_json: str) -> None:
        """The AdminClient's statistics: are its connections to every broker it knows up?"""
        try:
            brokers = (orjson.loads(stats_json).get("brokers") or {}).values()
        except (orjson.JSONDecodeError, AttributeError):
            return
        known = [b for b in brokers if isinstance(b, dict) and b.get("nodeid", -1) >= 0]  # not the bootstrap entries
        up = bool(known) and all(b.get("state") == "UP" for b in known)
        now = time.monotonic()
        with self._lock:
            gap = self._last_admin_stats is None or now - self._last_admin_stats > DESCRIBE_AFTER_STEADY_S
            self._last_admin_stats = now
            if not up:
                self._admin_up_since = None
            elif gap or self._admin_up_since is None:
                self._admin_up_since = now

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
        return self._in_group and time.monotonic() - self._last_contact < self._lost_after_s

    def client_state(self) -> str:
        """The group client's own view, for a message about lost contact: its coordinator state,
        its join state and the reason of its last rebalance, as librdkafka last reported them."""
        with self._lock:
            cgrp, reported = self._group_client, self._last_stats
        if not cgrp or reported is None:
            return "the group client has not reported its state"
        reason = str(cgrp.get("rebalance_reason") or "").strip() or "none"
        return (
            f"the group client reports coordinator state {cgrp.get('state')}, join state {cgrp.get('join_state')} "
            f"(for {int(cgrp.get('stateage', 0)) / 1000:.1f} s), {cgrp.get('rebalance_cnt', 0)} rebalance(s), "
            f"the last because: {reason}; {time.monotonic() - reported:.1f} s ago"
        )

    def members(self, timeout: float = 10.0) -> list[Member] | None:
        """The live workers as the group coordinator sees them; ``None`` when it is not asked now.

        A request is sent only while contact with the coordinator is steady: the last statistics
        report (at most :data:`DESCRIBE_AFTER_STEADY_S` old) found the group steady, every report for
        the last :data:`DESCRIBE_AFTER_STEADY_S` had the coordinator up, every report of the
        AdminClient's own for as long had its connection to each broker up (it keeps them open,
        ``enable.sparse.connections=false``, so a request never waits for one to be made), and no
        earlier request is still outstanding (one whose wait timed out is left to finish, never
        joined by a second one).

        Why: librdkafka #4605 (its fix, PR #5397, is in no release: 2.16.0 still has the bug). A
        coordinator-bound admin request (DescribeConsumerGroups here) whose build fails because the
        connection to the coordinator is (re)connecting, as during a broker restart, frees an
        internal object that librdkafka then uses again: ``rd_kafka_enq_once_del_source_return:
        Assertion 'eonce->refcnt > 0' failed`` aborts the process. The leader asks every
        ``MEMBERS_REFRESH_S``, so during an outage requests would pile up and fire while connections
        come back. The gate narrows that window to a connection dropped between the last report and
        the request; only the librdkafka fix closes it.

        ``None`` means what a failed request means to the caller: no decision from the group's
        membership this time.
        """
        admin = self._admin
        if admin is None:
            raise RuntimeError(f"the membership of group {self.group_id} was stopped")
        now = time.monotonic()
        with self._lock:
            steady = (
                self._steady
                and _steady_since(self._coordinator_up_since, self._last_stats, now)
                and _steady_since(self._admin_up_since, self._last_admin_stats, now)
            )
        if not steady:
            return None
        if self._describing is not None and not self._describing.done():
            log.debug("The previous description of group %s is still outstanding; not asking again", self.group_id)
            return None
        future = admin.describe_consumer_groups([self.group_id], request_timeout=timeout)[self.group_id]
        del admin  # the future holds no reference to it: stop() alone decides when the client goes
        self._describing = future  # until it is done, even once the wait below gave up
        description = future.result(timeout)
        self._describing = None
        members = []
        for member in description.members:
            decoded = decode_client_id(member.client_id)
            if decoded is not None:
                members.append(decoded)
        return members


def _steady_since(up_since: float | None, last_report: float | None, now: float) -> bool:
    """Up for at least :data:`DESCRIBE_AFTER_STEADY_S` by reports of which the last is that recent."""
    return (
        up_since is not None
        and now - up_since >= DESCRIBE_AFTER_STEADY_S
        and last_report is not None
        and now - last_report <= DESCRIBE_AFTER_STEADY_S
    )


def _membership_admin(
    bootstrap_servers: str, overrides: Mapping[str, Any] | None, on_stats: Callable[[str], None]
) -> AdminClient:
    """The AdminClient that describes the group. It keeps its connections up (not only while a
    request needs one) and reports their state every :data:`ADMIN_STATS_INTERVAL_MS`, so that
    :meth:`GroupMembership.members` can wait until its own connections are steady too."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        **dict(overrides or {}),
        "enable.sparse.connections": False,
        "statistics.interval.ms": ADMIN_STATS_INTERVAL_MS,
        "stats_cb": on_stats,
    }
    return AdminClient(config)


def _group_consumer(
    bootstrap_servers: str,
    group_id: str,
    client_id: str,
    session_timeout_ms: int,
    heartbeat_interval_ms: int,
    rebalance_timeout_ms: int,
    on_stats: Callable[[str], None],
    overrides: Mapping[str, Any] | None,
) -> Consumer:
    """The membership's consumer: its group settings, and statistics twice a second (contact)."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": group_id,
            "client.id": client_id,
            "session.timeout.ms": session_timeout_ms,
            "heartbeat.interval.ms": heartbeat_interval_ms,
            # The rebalance timeout of the JoinGroup request is librdkafka's max.poll.interval.ms.
            "max.poll.interval.ms": max(rebalance_timeout_ms, session_timeout_ms),
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "latest",
            "partition.assignment.strategy": "range",
            "statistics.interval.ms": 500,
            "stats_cb": on_stats,
            **dict(overrides or {}),
        }
    )
