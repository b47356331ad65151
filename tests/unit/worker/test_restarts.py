"""Automatic restarts of failed tasks: backoff, budget, reset."""

from __future__ import annotations

import random
import threading

from sluice.worker.restarts import RestartPolicy, TaskRestarter
from sluice.worker.status import ConnectorTaskId

TASK = ConnectorTaskId("c", 0)


def test_backoff_doubles_with_jitter_up_to_the_maximum() -> None:
    policy = RestartPolicy(max_attempts=10, initial_backoff_ms=1000, max_backoff_ms=5000)
    rng = random.Random(1)
    waits = [policy.backoff_s(n, rng) for n in range(1, 6)]
    for n, wait in enumerate(waits[:3], start=1):
        base = 2 ** (n - 1)
        assert 0.8 * base <= wait <= 1.2 * base
    assert all(w <= 5.0 for w in waits)
    assert waits[-1] >= 4.0


def test_restarts_until_the_budget_then_stops() -> None:
    clock = [0.0]
    restarter = TaskRestarter(RestartPolicy(max_attempts=2, initial_backoff_ms=1, max_backoff_ms=1000), clock=lambda: clock[0])
    fired = threading.Semaphore(0)
    restarter.on_started(TASK)
    first = restarter.on_failed(TASK, fired.release)
    assert first is not None and first[0] == 1
    assert fired.acquire(timeout=2)
    second = restarter.on_failed(TASK, fired.release)
    assert second is not None and second[0] == 2
    assert fired.acquire(timeout=2)
    assert restarter.on_failed(TASK, fired.release) is None, "the budget is spent"
    restarter.reset(TASK)
    again = restarter.on_failed(TASK, fired.release)
    assert again is not None and again[0] == 1, "a manual restart gives a fresh budget"
    restarter.close()


def test_a_long_run_earns_a_fresh_budget() -> None:
    clock = [0.0]
    restarter = TaskRestarter(RestartPolicy(max_attempts=1, initial_backoff_ms=60_000, max_backoff_ms=1000), clock=lambda: clock[0])
    restarter.on_started(TASK)
    assert restarter.on_failed(TASK, lambda: None) is not None
    restarter.on_started(TASK)
    clock[0] = 5.0  # ran for longer than the maximum backoff
    assert restarter.on_failed(TASK, lambda: None) is not None
    restarter.close()


def test_zero_attempts_turns_restarts_off_and_reset_cancels_a_pending_one() -> None:
    assert TaskRestarter(RestartPolicy(max_attempts=0)).on_failed(TASK, lambda: None) is None
    fired = threading.Event()
    restarter = TaskRestarter(RestartPolicy(max_attempts=3, initial_backoff_ms=300, max_backoff_ms=1000))
    assert restarter.on_failed(TASK, fired.set) is not None
    restarter.reset_connector("c")
    assert not fired.wait(0.6), "a reset must cancel the pending restart"
    restarter.close()
