"""The standalone herder: one process runs every connector; configs live in memory, offsets in a file.

It is the herder core (:class:`~sluice.worker.herder.core.HerderCore`) over a
:class:`~sluice.worker.herder.stores.MemoryConfigStore`, an in-memory
:class:`~sluice.worker.status.StatusStore` and the :class:`~sluice.worker.herder.strategy.LocalAssignment`
(everything runs here; a change is applied before the request that made it returns).
"""

from __future__ import annotations

from sluice.worker.herder.core import HerderCore
from sluice.worker.herder.stores import MemoryConfigStore
from sluice.worker.herder.strategy import LocalAssignment
from sluice.worker.status import StatusStore
from sluice.worker.worker import Worker


class StandaloneHerder(HerderCore):
    """Runs every connector in this process."""

    def __init__(self, worker: Worker) -> None:
        store = MemoryConfigStore(on_change=self.wakeup)
        strategy = LocalAssignment(worker.config.worker_id, store, running=lambda: self.ready)
        super().__init__(worker, store, StatusStore(), strategy)
