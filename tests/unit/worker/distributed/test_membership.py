"""Contact with the group, as the herder sees it from librdkafka's statistics."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from sluice.worker.distributed import membership as membership_module
from sluice.worker.distributed.membership import (
    DESCRIBE_AFTER_STEADY_S,
    GroupMembership,
    Member,
    decode_client_id,
    encode_client_id,
)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(membership_module.time, "monotonic", lambda: now[0])
    return now


@pytest.fixture
def member(clock: list[float]) -> Iterator[GroupMembership]:
    # The group is never joined (no broker listens there). stop() destroys the clients at teardown,
    # on the main thread, rather than leaving them to the garbage collector (on a librdkafka thread,
    # rd_kafka_destroy() aborts the process).
    member = GroupMembership(
        bootstrap_servers="127.0.0.1:1",
        group_id="g",
        topic="t",
        worker_id="h:1",
        url="http://h:1",
        session_timeout_ms=10_000,
        heartbeat_interval_ms=1_000,
        rebalance_timeout_ms=60_000,
        on_change=lambda: None,
    )
    try:
        yield member
    finally:
        member.stop()


def _stats(state: str, join_state: str) -> str:
    return orjson.dumps({"cgrp": {"state": state, "join_state": join_state}}).decode()


def test_contact_is_lost_before_the_coordinator_would_expel_us(clock: list[float], member: GroupMembership) -> None:
    assert not member.in_contact, "not in contact before joining"
    member._on_assign(None, [])  # type: ignore[arg-type]
    assert member.in_contact and not member.is_leader
    member._on_stats(_stats("up", "steady"))
    clock[0] += 7.9
    assert member.in_contact
    member._on_stats(_stats("wait-coord", "init"))  # the coordinator is unreachable
    clock[0] += 0.2  # 8.1 s without steady contact: 0.8 × session.timeout.ms
    assert not member.in_contact, "tasks must stop before the session expires and the work moves"
    member._on_stats(_stats("up", "steady"))
    assert member.in_contact


def test_leadership_follows_partition_zero_and_needs_contact(clock: list[float], member: GroupMembership) -> None:
    from confluent_kafka import TopicPartition

    member._on_assign(None, [TopicPartition("t", 0)])  # type: ignore[arg-type]
    assert member.is_leader
    clock[0] += 9
    assert not member.is_leader, "a leader out of contact must not act as the leader"
    member._on_stats(_stats("up", "steady"))
    assert member.is_leader
    member._on_revoke(None, [TopicPartition("t", 0)])  # type: ignore[arg-type]
    assert not member.is_leader
    member._on_lost(None, [])  # type: ignore[arg-type]
    assert not member.in_contact


def test_client_ids_carry_the_worker_and_its_url() -> None:
    encoded = encode_client_id("10.0.0.5:8083", "https://10.0.0.5:8083")
    decoded = decode_client_id(encoded)
    assert decoded is not None and (decoded.worker_id, decoded.url) == ("10.0.0.5:8083", "https://10.0.0.5:8083")
    assert decode_client_id("connector-consumer-x-0") is None


def test_a_frozen_worker_holds_until_the_group_confirms_it(clock: list[float], member: GroupMembership) -> None:
    from confluent_kafka import TopicPartition

    member._on_assign(None, [])  # type: ignore[arg-type]
    member._on_stats(_stats("up", "steady"))
    clock[0] += 30  # SIGSTOP for 30 s; librdkafka has not noticed the expulsion yet
    assert not member.in_contact
    member._on_stats(_stats("up", "steady"))
    assert not member.in_contact, "a steady report right after a freeze must not count"
    clock[0] += 0.5
    member._on_stats(_stats("up", "steady"))
    assert not member.in_contact
    member._on_assign(None, [TopicPartition("t", 1)])  # type: ignore[arg-type]  # rejoined
    assert member.in_contact


class FakeAdmin:
    """Counts describe_consumer_groups calls (one future each): answered with :attr:`answer` if set,
    else left outstanding."""

    def __init__(self) -> None:
        self.futures: list[Future[Any]] = []
        self.answer: Any = None

    def describe_consumer_groups(self, group_ids: list[str], request_timeout: float) -> dict[str, Future[Any]]:
        future: Future[Any] = Future()
        if self.answer is not None:
            future.set_result(self.answer)
        self.futures.append(future)
        return {group_ids[0]: future}


def _description(*workers: str) -> SimpleNamespace:
    return SimpleNamespace(members=[SimpleNamespace(client_id=encode_client_id(w, f"http://{w}")) for w in workers])


def _admin_stats(*states: str) -> str:
    """The AdminClient's report: its bootstrap entry, then one known broker per state."""
    brokers = {"127.0.0.1:1/bootstrap": {"nodeid": -1, "state": "INIT"}}
    brokers.update({f"127.0.0.1:1/{i}": {"nodeid": i, "state": state} for i, state in enumerate(states)})
    return orjson.dumps({"brokers": brokers}).decode()


def _steady_for(member: GroupMembership, clock: list[float], seconds: float) -> None:
    """Statistics reports (every 0.5 s, as librdkafka's here) of a steady group for ``seconds``,
    the AdminClient's connections up all along."""
    member._on_stats(_stats("up", "steady"))
    member._on_admin_stats(_admin_stats("UP"))
    for _ in range(round(seconds / 0.5)):
        clock[0] += 0.5
        member._on_stats(_stats("up", "steady"))
        member._on_admin_stats(_admin_stats("UP"))


def _joined(member: GroupMembership) -> FakeAdmin:
    admin = FakeAdmin()
    member._admin = admin  # type: ignore[assignment]
    member._on_assign(None, [])  # type: ignore[arg-type]
    return admin


def test_members_asks_the_coordinator_only_while_contact_is_steady(clock: list[float], member: GroupMembership) -> None:
    """librdkafka #4605: a describe sent while the coordinator connection comes back may abort the process."""
    admin = _joined(member)
    admin.answer = _description("a:1", "b:1")
    assert member.members() is None and not admin.futures, "no statistics yet: contact unknown"

    _steady_for(member, clock, DESCRIBE_AFTER_STEADY_S - 0.5)
    assert member.members() is None and not admin.futures, "steady, but not for long enough"
    clock[0] += 0.5
    member._on_stats(_stats("up", "steady"))
    assert member.members() == [Member("a:1", "http://a:1"), Member("b:1", "http://b:1")]
    assert len(admin.futures) == 1

    member._on_stats(_stats("wait-coord", "init"))  # the coordinator is unreachable (a broker restarts)
    assert member.members() is None
    clock[0] += 0.5
    member._on_stats(_stats("wait-broker-transport", "init"))
    assert member.members() is None
    clock[0] += 0.5
    member._on_stats(_stats("up", "steady"))  # back, but only just: its connections may still be coming up
    assert member.members() is None
    _steady_for(member, clock, DESCRIBE_AFTER_STEADY_S - 0.5)
    assert member.members() is None
    assert len(admin.futures) == 1, "nothing asked while contact was not steady"
    clock[0] += 0.5
    member._on_stats(_stats("up", "steady"))
    assert member.members() is not None and len(admin.futures) == 2

    member._on_stats(_stats("up", "wait-join"))  # a rebalance, the coordinator up all along
    assert member.members() is None
    clock[0] += 0.5
    member._on_stats(_stats("up", "steady"))
    assert member.members() is not None and len(admin.futures) == 3

    clock[0] += DESCRIBE_AFTER_STEADY_S + 0.1  # no report since: the membership thread is stuck
    assert member.members() is None, "the last report is too old to go by"
    member._on_stats(_stats("up", "steady"))  # after a gap in the reports, steady counts from this one
    assert member.members() is None
    assert len(admin.futures) == 3

    member._on_lost(None, [])  # type: ignore[arg-type]
    assert member.members() is None and len(admin.futures) == 3


def test_members_waits_for_the_admin_clients_own_connections(clock: list[float], member: GroupMembership) -> None:
    """The group is steady, but the AdminClient's connection to a broker is (re)connecting, as after
    a broker restart: a coordinator request built now is the one librdkafka #4605 aborts on."""
    admin = _joined(member)
    admin.answer = _description("a:1")
    for _ in range(round(DESCRIBE_AFTER_STEADY_S / 0.5) + 2):
        clock[0] += 0.5
        member._on_stats(_stats("up", "steady"))
        member._on_admin_stats(_admin_stats("UP", "CONNECT"))
    assert member.members() is None and not admin.futures, "one of the admin's connections is not up"

    member._on_admin_stats(_admin_stats("UP", "UP"))  # up now, but only just
    assert member.members() is None and not admin.futures
    _steady_for(member, clock, DESCRIBE_AFTER_STEADY_S)
    assert member.members() == [Member("a:1", "http://a:1")] and len(admin.futures) == 1

    member._on_admin_stats(_admin_stats("UP", "TRY_CONNECT"))  # a broker went away again
    clock[0] += 0.5
    member._on_stats(_stats("up", "steady"))
    assert member.members() is None and len(admin.futures) == 1

    clock[0] += DESCRIBE_AFTER_STEADY_S + 0.1
    member._on_stats(_stats("up", "steady"))
    member._on_admin_stats(_admin_stats("UP"))  # after a gap in the admin's reports, it counts anew
    assert member.members() is None and len(admin.futures) == 1


def test_at_most_one_describe_is_outstanding(clock: list[float], member: GroupMembership) -> None:
    admin = _joined(member)
    _steady_for(member, clock, DESCRIBE_AFTER_STEADY_S)
    with pytest.raises(TimeoutError):
        member.members(timeout=0.01)  # the coordinator does not answer in time
    assert len(admin.futures) == 1
    for _ in range(5):  # the leader's next ticks, contact steady all along
        clock[0] += 0.5
        member._on_stats(_stats("up", "steady"))
        member._on_admin_stats(_admin_stats("UP"))
        assert member.members(timeout=0.01) is None
    assert len(admin.futures) == 1, "a timed-out request still out must not be joined by another"

    admin.futures[0].set_result(_description("a:1"))  # librdkafka's own request timeout, or a late answer
    admin.answer = _description("a:1", "b:1")
    assert member.members(timeout=0.01) == [Member("a:1", "http://a:1"), Member("b:1", "http://b:1")]
    assert len(admin.futures) == 2, "once it is done, the next call asks again"


def test_members_raises_once_stopped(clock: list[float], member: GroupMembership) -> None:
    _joined(member)
    _steady_for(member, clock, DESCRIBE_AFTER_STEADY_S)
    member.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        member.members()
