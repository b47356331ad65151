"""The leader's assignment rules, without Kafka."""

from __future__ import annotations

from collections import Counter

from sluice.worker.distributed.assignor import CONNECTOR, Item, plan


def _connector(name: str, tasks: int) -> set[Item]:
    return {(name, CONNECTOR), *((name, t) for t in range(tasks))}


def _tasks_per_worker(owners: dict[str, set[Item]]) -> dict[str, int]:
    return {w: sum(1 for i in items if i[1] != CONNECTOR) for w, items in owners.items()}


def test_new_work_is_spread_and_balanced() -> None:
    wanted = _connector("a", 3) | _connector("b", 3)
    result = plan({}, ["w1", "w2", "w3"], wanted, now=0, delay_s=10)
    assert _tasks_per_worker(result.owners) == {"w1": 2, "w2": 2, "w3": 2}
    for name in ("a", "b"):
        owners = [result.owner_of((name, t)) for t in range(3)]
        assert len(set(owners)) == 3, f"{name}'s tasks share a worker: {owners}"
    assert Counter(result.owner_of((n, CONNECTOR)) for n in "ab").most_common(1)[0][1] == 1
    assert result.revoking == {}


def test_adding_and_removing_a_connector_moves_nothing_else() -> None:
    first = plan({}, ["w1", "w2", "w3"], _connector("a", 3), now=0, delay_s=10)
    with_b = plan(first.owners, ["w1", "w2", "w3"], _connector("a", 3) | _connector("b", 2), now=1, delay_s=10)
    for item in _connector("a", 3):
        assert with_b.owner_of(item) == first.owner_of(item)
    without_b = plan(with_b.owners, ["w1", "w2", "w3"], _connector("a", 3), now=2, delay_s=10)
    for item in _connector("a", 3):
        assert without_b.owner_of(item) == first.owner_of(item)
    assert all(i[0] == "a" for items in without_b.owners.values() for i in items)
    assert without_b.revoking == {}


def test_a_departed_workers_work_waits_for_the_delay_then_moves() -> None:
    wanted = _connector("a", 3)
    start = plan({}, ["w1", "w2", "w3"], wanted, now=0, delay_s=10)
    lost = start.owners["w3"]
    held = plan(start.owners, ["w1", "w2"], wanted, now=100, delay_s=10)
    assert held.owners["w3"] == lost, "work of a departed worker must wait for it"
    assert held.departed == {"w3": 100}
    assert held.next_deadline == 110
    still = plan(held.owners, ["w1", "w2"], wanted, now=109, delay_s=10, departed=held.departed)
    assert still.owners["w3"] == lost
    moved = plan(still.owners, ["w1", "w2"], wanted, now=110, delay_s=10, departed=still.departed)
    assert "w3" not in moved.owners
    assert {i for items in moved.owners.values() for i in items} == wanted
    assert sorted(_tasks_per_worker(moved.owners).values()) == [1, 2]
    # Nothing that w1 and w2 already ran moved.
    for worker in ("w1", "w2"):
        assert start.owners[worker] <= moved.owners[worker]


def test_a_worker_that_comes_back_within_the_delay_keeps_its_work() -> None:
    wanted = _connector("a", 3)
    start = plan({}, ["w1", "w2", "w3"], wanted, now=0, delay_s=10)
    held = plan(start.owners, ["w1", "w2"], wanted, now=1, delay_s=10)
    back = plan(held.owners, ["w1", "w2", "w3"], wanted, now=5, delay_s=10, departed=held.departed)
    assert back.owners == start.owners
    assert back.departed == {}


def test_a_joining_worker_gets_work_in_two_phases() -> None:
    wanted = _connector("a", 4) | _connector("b", 4)
    two = plan({}, ["w1", "w2"], wanted, now=0, delay_s=10)
    assert _tasks_per_worker(two.owners) == {"w1": 4, "w2": 4}
    # w3 joins: some work is revoked first, owned by nobody while its old owner stops it.
    joined = plan(two.owners, ["w1", "w2", "w3"], wanted, now=1, delay_s=10)
    assert joined.revoking, "an unbalanced cluster must revoke work"
    assert joined.owners["w3"] == set()
    for item, (old_owner, _) in joined.revoking.items():
        assert item not in joined.owners[old_owner]
        assert joined.owner_of(item) is None
    # Not yet confirmed: still revoked, still owned by nobody.
    waiting = plan(joined.owners, ["w1", "w2", "w3"], wanted, now=2, delay_s=10, revoking=joined.revoking)
    assert waiting.revoking.keys() == joined.revoking.keys()
    # Confirmed: handed to the new worker, and the counts are even.
    done = plan(
        waiting.owners, ["w1", "w2", "w3"], wanted, now=3, delay_s=10, revoking=waiting.revoking,
        revocation_done=lambda item, worker: True,
    )
    assert done.revoking == {}
    counts = _tasks_per_worker(done.owners)
    assert max(counts.values()) - min(counts.values()) <= 1, counts
    assert {i for items in done.owners.values() for i in items} == wanted


def test_an_unconfirmed_revocation_times_out() -> None:
    wanted = _connector("a", 4)
    two = plan({}, ["w1"], wanted, now=0, delay_s=10)
    joined = plan(two.owners, ["w1", "w2"], wanted, now=1, delay_s=10, revocation_timeout_s=30)
    assert joined.revoking
    late = plan(joined.owners, ["w1", "w2"], wanted, now=40, delay_s=10, revoking=joined.revoking, revocation_timeout_s=30)
    assert late.revoking == {}
    assert {i for items in late.owners.values() for i in items} == wanted


def test_no_live_workers_assigns_nothing() -> None:
    result = plan({}, [], _connector("a", 2), now=0, delay_s=10)
    assert result.owners == {}
