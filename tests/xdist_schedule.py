"""pytest-xdist's ``--dist loadfile`` with the slowest files first.

A test file is one unit of work (its module fixtures, a worker process or a Connect peer, start
once), as in xdist's own ``loadfile``; the difference is the order. xdist hands out files in
collection order, so a four-minute file collected last starts when the others are done and the run
waits for it alone. Here the next file a worker gets is the slowest one left, by the times of an
earlier run kept in :data:`TIMES` (``pytest --file-times=tests/file_times.json`` rewrites it): the
longest-first rule that keeps the run's end close to its total divided by the workers. A file that
is not listed yet counts as :data:`UNKNOWN_S`.

A worker is given its next file when it holds only the last test of the current one: xdist keeps
that test back until more work or the end arrives (it needs to know the next test to tear fixtures
down), so it must not wait for zero.

When a worker crashes, xdist puts its whole workload back in the queue, files it had finished
included. Handed out, such a file sends the worker no test, so it never reports one done and is
never given more or told to stop: the run waits forever (a worker abort did this once). Files with
nothing left to run are dropped before one is handed out.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController

TIMES = Path(__file__).resolve().parent / "file_times.json"
UNKNOWN_S = 3.0


def load_times(path: Path = TIMES) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


class SlowestFileFirst(LoadFileScheduling):
    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self._times = load_times()
        self._ordered = False

    def _assign_work_unit(self, node: WorkerController) -> None:
        if not self._ordered:
            units = sorted(self.workqueue.items(), key=lambda unit: -self._times.get(unit[0], UNKNOWN_S))
            self.workqueue.clear()
            self.workqueue.update(units)
            self._ordered = True
        for scope in [scope for scope, unit in self.workqueue.items() if all(unit.values())]:
            del self.workqueue[scope]  # a crashed worker's finished file, back in the queue
        if not self.workqueue:
            node.shutdown()
            return
        super()._assign_work_unit(node)

    def _reschedule(self, node: WorkerController) -> None:
        if node.shutting_down:
            return
        if not self.workqueue:
            node.shutdown()
            return
        if self._pending_of(self.assigned_work[node]) <= 1:
            self._assign_work_unit(node)
