"""The herder: the façade for every cluster action, and the one core behind both worker modes.

* :mod:`.api` — the :class:`Herder` façade the REST API and the CLI call, its answers and errors;
* :mod:`.core` — :class:`~.core.HerderCore`, the rules (validation, restarts, offsets, status),
  written once over a :class:`~.stores.config_store.ConfigStore` and an
  :class:`~.strategy.AssignmentStrategy`;
* :mod:`.stores` — where the herders keep configs and statuses, in memory (standalone) or in
  Kafka topics (distributed);
* :mod:`.work` — the connectors and tasks running on this worker, made to match the store.

Only the façade is re-exported here, so importing it stays cheap for the REST layer.
"""

from __future__ import annotations

from sluice.worker.herder.api import (
    HEALTH_TIMEOUT_S,
    HEALTHY,
    HEALTHY_MESSAGE,
    STARTING,
    STARTING_MESSAGE,
    BadRequest,
    Conflict,
    ConnectorInfo,
    ConnectorStateInfo,
    Forbidden,
    Health,
    Herder,
    NoLeader,
    TaskInfo,
)

__all__ = [
    "HEALTHY",
    "HEALTHY_MESSAGE",
    "HEALTH_TIMEOUT_S",
    "STARTING",
    "STARTING_MESSAGE",
    "BadRequest",
    "Conflict",
    "ConnectorInfo",
    "ConnectorStateInfo",
    "Forbidden",
    "Health",
    "Herder",
    "NoLeader",
    "TaskInfo",
]
