"""``POST /connectors/{name}/tap``: the next records a connector moves, from every worker that runs
its tasks (:mod:`sluice.worker.observability.tap`)."""

from __future__ import annotations

import contextvars
import logging
import threading
from itertools import zip_longest
from typing import Any
from urllib.parse import quote

from sluice.connectors.api import ConnectError, NotFoundError
from sluice.worker.herder.api import BadRequest
from sluice.worker.herder.stores.config_store import ConfigStore
from sluice.worker.herder.strategy import AssignmentStrategy
from sluice.worker.observability.tap import Tapped, check_request
from sluice.worker.worker import Worker

log = logging.getLogger(__name__)


class LiveTap:
    """Taps a connector here and, in a cluster, on the other workers running its tasks at once."""

    def __init__(self, worker: Worker, store: ConfigStore, strategy: AssignmentStrategy) -> None:
        self.worker = worker
        self.store = store
        self.strategy = strategy

    def sample(self, name: str, count: int, timeout_s: float) -> dict[str, Any]:
        try:
            check_request(count, timeout_s)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        snapshot = self.store.snapshot()
        if name not in snapshot.connectors:
            raise NotFoundError(f"Connector {name} not found")
        urls = self.strategy.peer_urls(snapshot, name)
        remote: list[list[Tapped]] = [[] for _ in urls]
        failures: list[str] = []
        askers = [
            # The request's context (its Authorization header) goes with each thread: the other workers check it.
            threading.Thread(
                target=contextvars.copy_context().run,
                args=(self._ask, url, name, count, timeout_s, into, failures),
                daemon=True,
            )
            for url, into in zip(urls, remote, strict=True)
        ]
        for asker in askers:
            asker.start()
        local = self.worker.tap(name, count, timeout_s)
        for asker in askers:
            asker.join(timeout_s + 10)
        # Each worker was asked for all of them: take from each in turn, so every worker's tasks show.
        merged = [record for row in zip_longest(local, *remote) for record in row if record is not None]
        records = merged[:count]
        return {"connector": name, "records": records, "complete": len(records) >= count, "unreachable": failures}

    def _ask(self, url: str, name: str, count: int, timeout_s: float, into: list[Tapped], failures: list[str]) -> None:
        path = f"/connectors/{quote(name, safe='')}/tap"
        try:
            _, answer = self.strategy.forward(url, "POST", path, params={"count": str(count), "timeout": str(timeout_s)})
            into.extend(answer.get("records", []) if isinstance(answer, dict) else [])
        except ConnectError as exc:
            log.info("The live tap of %s could not reach %s: %s", name, url, exc)
            failures.append(url)
