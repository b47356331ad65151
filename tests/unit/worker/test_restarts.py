"""Automatic restarts of failed tasks: backoff, budget, reset."""

from __future__ import annotations

import errno
import random
import threading

import pytest

from sluice.worker.restarts import RestartPolicy, TaskRestarter, lacks_descriptors
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
    restarter = TaskRestarter(
        RestartPolicy(max_attempts=2, initial_backoff_ms=1, max_backoff_ms=1000), clock=lambda: clock[0]
    )
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
    restarter = TaskRestarter(
        RestartPolicy(max_attempts=1, initial_backoff_ms=60_000, max_backoff_ms=1000), clock=lambda: clock[0]
    )
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


def _offsets_write_failed() -> Exception:
    """How the reproduction's task failed: the offset file could not be opened, wrapped by the runtime."""
    try:
        try:
            raise OSError(errno.EMFILE, "Too many open files", "offsets.json.tmp")
        except OSError as exc:
            raise RuntimeError("Failed to commit offsets") from exc
    except RuntimeError as wrapped:
        return wrapped


def test_failures_for_lack_of_descriptors_spend_no_attempt_and_keep_being_retried() -> None:
    restarter = TaskRestarter(RestartPolicy(max_attempts=2, initial_backoff_ms=1, max_backoff_ms=20))
    fired = threading.Semaphore(0)
    restarter.on_started(TASK)
    for _ in range(6):  # three times the budget: the flood lasts longer than a few attempts
        scheduled = restarter.on_failed(TASK, fired.release, _offsets_write_failed())
        assert scheduled is not None and scheduled[0] == 0
        assert fired.acquire(timeout=2)
    assert restarter.attempts(TASK) == 0
    # An ordinary failure afterwards still has the whole budget.
    assert restarter.on_failed(TASK, fired.release, ValueError("bad record")) == (1, pytest.approx(0.001, rel=0.5))
    restarter.close()


def test_an_automatic_restart_that_fails_for_lack_of_descriptors_is_tried_again() -> None:
    restarter = TaskRestarter(RestartPolicy(max_attempts=1, initial_backoff_ms=1, max_backoff_ms=20))
    calls = []
    started = threading.Event()

    def restart() -> None:
        calls.append(1)
        if len(calls) < 4:
            raise OSError(errno.ENFILE, "Too many open files in system")
        started.set()

    assert restarter.on_failed(TASK, restart, _offsets_write_failed()) is not None
    assert started.wait(2), "the restart was abandoned after it failed"
    assert len(calls) == 4
    restarter.close()


@pytest.mark.parametrize(
    ("error", "lacking"),
    [
        (OSError(errno.EMFILE, "Too many open files"), True),
        (ExceptionGroup("tasks", [ValueError("x"), OSError(errno.ENFILE, "Too many open files in system")]), True),
        # A task host's error arrives as text.
        (RuntimeError("OSError: [Errno 24] Too many open files: '/data/offsets.json'"), True),
        (OSError(errno.ENOSPC, "No space left on device"), False),
        (None, False),
    ],
)
def test_lack_of_descriptors_is_found_anywhere_in_the_chain(error: BaseException | None, lacking: bool) -> None:
    assert lacks_descriptors(error) is lacking
