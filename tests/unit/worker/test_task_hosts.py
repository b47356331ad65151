"""The host side of ``task.executor=process`` (worker/execution/task_host.py), served in this process over a pipe.

What the worker relies on: a task's state changes come up tagged with its run key, ``ended`` comes
only once its runner thread has finished (so a stop is complete when the worker hears it), a stop
that arrives before the task was built still ends it cleanly, and the host's control loop returns
when the worker goes away.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterator, Mapping
from multiprocessing.connection import Connection
from typing import Any

import pytest

from sluice.worker.execution.task_host import TaskHostServer
from sluice.worker.runners.base import TaskStatusListener, WorkerTask
from sluice.worker.status import ConnectorTaskId, TargetState

TASK = ConnectorTaskId("c", 0)


class IdleRunner(WorkerTask):
    """Runs until stopped, as an idle source would (pausing when told)."""

    def initialize(self) -> None:
        pass

    def execute(self) -> None:
        while self.await_unpaused():
            self._stopping.wait(0.05)

    def close(self) -> None:
        pass


class SlowBuilder:
    """Builds an :class:`IdleRunner` once ``release`` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.release.set()
        self.server: TaskHostServer | None = None

    def stop_seen(self, key: int) -> bool:
        """Whether the host has taken in a stop for run ``key`` (its control loop is asynchronous)."""
        hosted = self.server._tasks.get(key) if self.server is not None else None
        return hosted is not None and hosted.stop_requested

    def validate(self, raw: Mapping[str, Any]) -> Any:
        return raw

    def build(self, task_id: ConnectorTaskId, validated: Any, config: Any, listener: TaskStatusListener, state: TargetState) -> WorkerTask:
        self.release.wait(10)
        return IdleRunner(task_id, listener, state)


@pytest.fixture
def host() -> Iterator[tuple[Connection, SlowBuilder, list[int]]]:
    worker_end, host_end = multiprocessing.Pipe()
    builder = SlowBuilder()
    exit_code: list[int] = []
    server = TaskHostServer(builder, host_end)  # type: ignore[arg-type]
    builder.server = server
    thread = threading.Thread(target=lambda: exit_code.append(server.serve()), daemon=True)
    thread.start()
    yield worker_end, builder, exit_code
    worker_end.close()
    thread.join(5)


def messages_until(conn: Connection, last: str, timeout: float = 10) -> list[tuple[Any, ...]]:
    """What the host sends up to and including the first ``last`` message."""
    out: list[tuple[Any, ...]] = []
    while conn.poll(timeout):
        message = conn.recv()
        if message[0] != "relay":
            out.append(message)
        if message[0] == last:
            return out
    raise AssertionError(f"no {last!r} from the host; got {out}")


def test_a_task_reports_its_states_and_ends_after_its_shutdown(host: tuple[Connection, SlowBuilder, list[int]]) -> None:
    conn, _, _ = host
    conn.send(("start", 7, TASK, {}, {}, TargetState.STARTED, False))
    assert messages_until(conn, "event") == [("event", 7, "startup")]
    conn.send(("target", 7, TargetState.PAUSED))
    assert messages_until(conn, "event") == [("event", 7, "pause")]
    conn.send(("stop", 7))
    sent = messages_until(conn, "ended")
    assert [m[:3] for m in sent] == [("event", 7, "shutdown"), ("ended", 7, sent[-1][2])]


def test_a_stop_before_the_task_was_built_still_ends_it_cleanly(host: tuple[Connection, SlowBuilder, list[int]]) -> None:
    conn, builder, _ = host
    builder.release.clear()
    conn.send(("start", 1, TASK, {}, {}, TargetState.STARTED, False))
    conn.send(("stop", 1))
    for _ in range(100):
        if builder.stop_seen(1):
            break
        threading.Event().wait(0.05)
    builder.release.set()
    sent = messages_until(conn, "ended")
    assert [m[:3] for m in sent] == [("event", 1, "shutdown"), ("ended", 1, sent[-1][2])]


def test_the_control_loop_returns_when_the_worker_says_exit(host: tuple[Connection, SlowBuilder, list[int]]) -> None:
    conn, _, exit_code = host
    conn.send(("exit",))
    deadline = threading.Event()
    for _ in range(50):
        if exit_code:
            break
        deadline.wait(0.1)
    assert exit_code == [0]
