"""Contact with the group, as the herder sees it from librdkafka's statistics."""

from __future__ import annotations

import orjson
import pytest

from sluice.worker.distributed import membership as membership_module
from sluice.worker.distributed.membership import GroupMembership, decode_client_id, encode_client_id


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(membership_module.time, "monotonic", lambda: now[0])
    return now


def _member() -> GroupMembership:
    # Clients are created but never started: no broker is contacted.
    return GroupMembership(
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


def _stats(state: str, join_state: str) -> str:
    return orjson.dumps({"cgrp": {"state": state, "join_state": join_state}}).decode()


def test_contact_is_lost_before_the_coordinator_would_expel_us(clock: list[float]) -> None:
    member = _member()
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


def test_leadership_follows_partition_zero_and_needs_contact(clock: list[float]) -> None:
    from confluent_kafka import TopicPartition

    member = _member()
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


def test_a_frozen_worker_holds_until_the_group_confirms_it(clock: list[float]) -> None:
    from confluent_kafka import TopicPartition

    member = _member()
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
