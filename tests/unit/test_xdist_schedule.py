"""The suite's scheduler (tests/xdist_schedule.py) with xdist's own bookkeeping and stand-in workers."""

from __future__ import annotations

from collections import OrderedDict
from types import SimpleNamespace
from typing import Any

from tests import xdist_schedule
from tests.xdist_schedule import SlowestFileFirst


class Worker:
    """What the scheduler sees of a worker: the tests it was sent, whether it was told to stop."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(list(indexes))

    def shutdown(self) -> None:
        self.shutting_down = True


def _scheduler(monkeypatch: Any, times: dict[str, float]) -> SlowestFileFirst:
    monkeypatch.setattr(xdist_schedule, "load_times", lambda: times)
    config = SimpleNamespace(
        getvalue=lambda name: ["2*popen"] if name == "tx" else None, option=SimpleNamespace(loadscopereorder=True)
    )
    return SlowestFileFirst(config)  # type: ignore[arg-type]


COLLECTION = ["a.py::t1", "a.py::t2", "b.py::t1", "b.py::t2", "c.py::t1", "c.py::t2"]


def test_the_slowest_file_goes_first(monkeypatch: Any) -> None:
    sched = _scheduler(monkeypatch, {"c.py": 90.0, "a.py": 30.0})
    one, two = Worker("gw0"), Worker("gw1")
    for w in (one, two):
        sched.add_node(w)  # type: ignore[arg-type]
        sched.add_node_collection(w, COLLECTION)  # type: ignore[arg-type]
    sched.schedule()
    assert one.sent[0] == [4, 5], "c.py, the slowest by the earlier run, first"
    assert two.sent[0] == [0, 1], "then a.py (30 s) before b.py (not listed: 3 s)"


def test_a_crashed_workers_finished_files_are_not_handed_out(monkeypatch: Any) -> None:
    """A worker finished a.py, was given b.py and died in it: b.py goes to the next worker, a.py
    (nothing left to run) to nobody — handed out, the worker would wait for tests that never come."""
    sched = _scheduler(monkeypatch, {"a.py": 30.0, "b.py": 20.0, "c.py": 10.0})
    crashed, survivor = Worker("gw0"), Worker("gw1")
    for w in (crashed, survivor):
        sched.add_node(w)  # type: ignore[arg-type]
        sched.add_node_collection(w, COLLECTION)  # type: ignore[arg-type]
    sched.schedule()
    assert crashed.sent == [[0, 1]] and survivor.sent == [[2, 3]]
    sched.mark_test_complete(crashed, 0)  # type: ignore[arg-type]
    assert crashed.sent == [[0, 1], [4, 5]], "holding a.py's last test, it is given c.py"
    sched.mark_test_complete(crashed, 1)  # type: ignore[arg-type]
    sched.mark_test_complete(crashed, 4)  # type: ignore[arg-type]

    assert sched.remove_node(crashed) == "c.py::t2"  # type: ignore[arg-type]
    # survivor holds 2 tests of b.py; it finishes one and gets what is left of c.py, not a.py.
    sched.mark_test_complete(survivor, 2)  # type: ignore[arg-type]
    assert survivor.sent == [[2, 3], [5]]
    assert "a.py" not in sched.workqueue
    sched.mark_test_complete(survivor, 3)  # type: ignore[arg-type]
    assert survivor.shutting_down, "nothing left: told to stop"
    assert isinstance(sched.workqueue, OrderedDict) and not sched.workqueue
