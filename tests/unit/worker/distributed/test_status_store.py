"""The status store's view of its own writes: applied at once, never undone by older records
its topic reader reaches later, and in step with the topic again once they are read back."""

from __future__ import annotations

from typing import Any

from worker.distributed.status_store import KafkaStatusStore, encode_status, task_key
from worker.status import ConnectorTaskId, State, Status

TASK = ConnectorTaskId("fwd", 0)


class FakeLog:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, bytes | None]] = []

    def send_async(self, key: bytes, value: bytes | None) -> None:
        self.sent.append((key, value))


def store() -> tuple[KafkaStatusStore, FakeLog]:
    s = KafkaStatusStore("status", "127.0.0.1:9", client_id="test", generation=lambda: 1)
    log = FakeLog()
    s._log = log  # type: ignore[assignment]
    return s, log


def record(state: State, worker: str = "w1") -> bytes:
    return encode_status(Status(state, worker, generation=1))


def test_an_older_record_read_after_our_write_does_not_undo_it() -> None:
    s, log = store()
    s._apply(task_key(TASK), record(State.RUNNING))
    s.put_task(TASK, Status(State.PAUSED, "w1"))
    assert s.task(TASK).state is State.PAUSED  # type: ignore[union-attr]
    # The reader was behind: it now reaches a RUNNING written before our PAUSED.
    s._apply(task_key(TASK), record(State.RUNNING))
    assert s.task(TASK).state is State.PAUSED  # type: ignore[union-attr]
    # Our write comes back; from then on the topic rules again.
    key, value = log.sent[-1]
    s._apply(key, value)
    s._apply(task_key(TASK), record(State.RUNNING, "w2"))
    assert s.task(TASK) == Status(State.RUNNING, "w2", generation=1)


def test_records_of_other_keys_apply_as_they_come() -> None:
    s, _ = store()
    s.put_task(TASK, Status(State.PAUSED, "w1"))
    other = ConnectorTaskId("fwd", 1)
    s._apply(task_key(other), record(State.RUNNING, "w2"))
    assert s.task(other).state is State.RUNNING  # type: ignore[union-attr]


def test_a_write_that_never_comes_back_stops_blocking_after_the_expiry(monkeypatch: Any) -> None:
    import worker.distributed.status_store as module

    s, _ = store()
    s.put_task(TASK, Status(State.PAUSED, "w1"))
    monkeypatch.setattr(module, "UNREAD_WRITE_EXPIRY_S", -1.0)
    s._apply(task_key(TASK), record(State.FAILED, "w2"))
    assert s.task(TASK).state is State.FAILED  # type: ignore[union-attr]
