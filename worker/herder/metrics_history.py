"""``GET /connectors/{name}/metrics/history``: a connector's throughput, errors and lag over the
last hour, from every worker that runs its tasks (:mod:`sluice.worker.observability.history`)."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import quote

import orjson

from sluice.connectors.api import NotFoundError
from sluice.worker.herder.api import ClusterWorker
from sluice.worker.herder.cluster_probe import ask_peers
from sluice.worker.herder.stores.config_store import ConfigStore
from sluice.worker.herder.strategy import AssignmentStrategy
from sluice.worker.observability.history import ConnectorHistory, merge

log = logging.getLogger(__name__)

#: How long another worker is given for its part.
PEER_TIMEOUT_S = 3.0


class HistoryRequests:
    """This worker's samples of a connector and, in a cluster, those of the other workers running its tasks."""

    def __init__(self, history: ConnectorHistory, store: ConfigStore, strategy: AssignmentStrategy) -> None:
        self.history = history
        self.store = store
        self.strategy = strategy

    def of(self, name: str, span_ms: int | None) -> dict[str, Any]:
        snapshot = self.store.snapshot()
        if name not in snapshot.connectors:
            raise NotFoundError(f"Connector {name} not found")
        span = min(span_ms or self.history.span_ms, self.history.span_ms)
        parts = [self.history.points(name, span)]
        unreachable: list[str] = []
        urls = self.strategy.peer_urls(snapshot, name)  # none for a request another worker sent here
        path = f"/connectors/{quote(name, safe='')}/metrics/history?span_ms={span}"
        for answer in ask_peers(self.strategy, [ClusterWorker(url, url) for url in urls], path, PEER_TIMEOUT_S):
            try:
                if answer.status != 200:
                    raise ValueError(answer.error or f"HTTP {answer.status}")
                parts.append(list(orjson.loads(answer.body)["points"]))
            except (ValueError, KeyError, TypeError) as exc:
                log.info("The metrics history of %s lacks %s: %s", name, answer.worker.url, exc)
                unreachable.append(answer.worker.url)
        return {
            "connector": name,
            "interval_ms": self.history.interval_ms,
            "span_ms": span,
            "points": merge(parts),
            "unreachable": unreachable,
        }
