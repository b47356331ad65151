"""Incremental assignment of connectors and tasks to the workers of a cluster.

The leader calls :func:`plan` whenever the membership, the configs or the clock changes. The plan
moves as little as possible, because every move stops a task:

1. Work stays where it is while its worker is alive. Nothing is taken from a worker to add,
   remove or reconfigure another connector.
2. The work of a worker that left the group is held for ``scheduled.rebalance.max.delay.ms``
   (it may come back, e.g. a rolling restart), then handed to the live workers.
3. New work (a new connector, more tasks) goes to the live worker with the fewest instances of
   that connector, then the fewest overall, so a connector's tasks spread across workers and the
   counts stay even.
4. When the counts differ by more than one (a worker joined), the busiest workers give work up in
   two phases: a plan first *revokes* it (no worker owns it), and only once the old owner has
   confirmed the stop (or ``rebalance.timeout.ms`` passed) does a later plan assign it to the new
   owner. No task ever runs in two places at once.

Everything here is pure and deterministic, so the rules are unit-tested without Kafka.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from sluice.worker.herder.stores.config_store import CONNECTOR, Item

__all__ = ["CONNECTOR", "Item", "Plan", "is_task", "plan"]


def is_task(item: Item) -> bool:
    return item[1] != CONNECTOR


@dataclass
class Plan:
    """The result of :func:`plan`: owners of every item, items being revoked, departed workers."""

    owners: dict[str, set[Item]]
    #: item → (worker it was revoked from, time the revocation started)
    revoking: dict[Item, tuple[str, float]] = field(default_factory=dict)
    #: departed worker → time it was first seen missing
    departed: dict[str, float] = field(default_factory=dict)
    #: when the leader should plan again at the latest (a held worker's deadline), or None
    next_deadline: float | None = None

    def owner_of(self, item: Item) -> str | None:
        for worker, items in self.owners.items():
            if item in items:
                return worker
        return None


def plan(
    previous: Mapping[str, Iterable[Item]],
    live: Iterable[str],
    wanted: Iterable[Item],
    *,
    now: float,
    delay_s: float,
    departed: Mapping[str, float] | None = None,
    revoking: Mapping[Item, tuple[str, float]] | None = None,
    revocation_done: Callable[[Item, str], bool] = lambda item, worker: False,
    revocation_timeout_s: float = 60.0,
) -> Plan:
    """The next assignment. ``previous`` maps workers (live or not) to what they own now."""
    live_set = set(live)
    wanted_set = set(wanted)
    departed_at = {w: t for w, t in (departed or {}).items() if w not in live_set}

    # 1 + 2: keep what live workers own, and what departed workers own within the delay.
    owners, taken, next_deadline = _keep(previous, live_set, wanted_set, departed_at, now=now, delay_s=delay_s)
    # Forget departed workers that hold nothing any more.
    departed_at = {w: t for w, t in departed_at.items() if w in owners}

    # Revocations in flight: an item is free once its old owner confirmed the stop, left, or timed out.
    still_revoking: dict[Item, tuple[str, float]] = {}
    for item, (worker, started) in (revoking or {}).items():
        if item not in wanted_set or item in taken:
            continue
        if worker in live_set and not revocation_done(item, worker) and now - started < revocation_timeout_s:
            still_revoking[item] = (worker, started)
            taken.add(item)
            next_deadline = _earliest(next_deadline, started + revocation_timeout_s)

    # 3: new and freed work to the live workers.
    pool = sorted(wanted_set - taken, key=lambda i: (i[0], i[1]))
    if live_set:
        for item in pool:
            target = _least_loaded(owners, live_set, item)
            owners[target].add(item)

    # 4: even out the counts, one revocation round at a time, only in a settled cluster.
    held = any(w not in live_set for w in owners)
    if live_set and not still_revoking and not held:
        for kind in (is_task, lambda i: not is_task(i)):
            for worker, item in _surplus(owners, live_set, kind):
                owners[worker].discard(item)
                still_revoking[item] = (worker, now)
                next_deadline = _earliest(next_deadline, now + revocation_timeout_s)

    return Plan(owners=owners, revoking=still_revoking, departed=departed_at, next_deadline=next_deadline)


def _earliest(current: float | None, deadline: float) -> float:
    return deadline if current is None else min(current, deadline)


def _keep(
    previous: Mapping[str, Iterable[Item]],
    live: set[str],
    wanted: set[Item],
    departed_at: dict[str, float],
    *,
    now: float,
    delay_s: float,
) -> tuple[dict[str, set[Item]], set[Item], float | None]:
    """Steps 1 and 2 of :func:`plan`: the owners kept, the items they hold, and the earliest end of a
    departed worker's delay. Records in ``departed_at`` when a worker was first seen missing."""
    owners: dict[str, set[Item]] = {w: set() for w in live}
    taken: set[Item] = set()
    next_deadline: float | None = None
    for worker in sorted(previous):
        items = [i for i in previous[worker] if i in wanted and i not in taken]
        if worker in live:
            owners[worker].update(items)
            taken.update(items)
            continue
        if not items:
            continue
        deadline = departed_at.setdefault(worker, now) + delay_s
        if now < deadline:
            owners[worker] = set(items)
            taken.update(items)
            next_deadline = _earliest(next_deadline, deadline)
    return owners, taken, next_deadline


def _least_loaded(owners: Mapping[str, set[Item]], live: set[str], item: Item) -> str:
    kind = is_task(item)

    def load(worker: str) -> tuple[int, int, str]:
        mine = owners[worker]
        same = sum(1 for i in mine if i[0] == item[0] and is_task(i) == kind)
        total = sum(1 for i in mine if is_task(i) == kind)
        return same, total, worker

    return min(sorted(live), key=load)


def _surplus(owners: Mapping[str, set[Item]], live: set[str], kind: Callable[[Item], bool]) -> list[tuple[str, Item]]:
    """Items to take from over-full workers so that every count ends within one of the others."""
    counts = {w: sum(1 for i in owners[w] if kind(i)) for w in live}
    total = sum(counts.values())
    if not counts or max(counts.values()) - min(counts.values()) <= 1:
        return []
    workers = sorted(live)
    base, extra = divmod(total, len(workers))
    # The busiest workers may keep one more than the base.
    ranked = sorted(workers, key=lambda w: (-counts[w], w))
    quota = {w: base + (1 if n < extra else 0) for n, w in enumerate(ranked)}
    moves: list[tuple[str, Item]] = []
    for worker in ranked:
        surplus = counts[worker] - quota[worker]
        if surplus <= 0:
            continue
        mine = [i for i in owners[worker] if kind(i)]
        per_connector = Counter(i[0] for i in mine)
        # Give up instances of the connector this worker holds most of: that also spreads it.
        mine.sort(key=lambda i: (-per_connector[i[0]], i[0], -i[1]))
        moves.extend((worker, i) for i in mine[:surplus])
    return moves
