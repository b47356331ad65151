"""The herder: the façade for every cluster action, and the one core behind both worker modes.

* :mod:`.api` — the :class:`Herder` façade the REST API and the CLI call, its answers and errors;
* :mod:`.core` — :class:`~.core.HerderCore`, the rules (validation, restarts, offsets, status),
  written once over a :class:`~.stores.ConfigStore` and an :class:`~.strategy.AssignmentStrategy`;
* :mod:`.stores` — the config store protocol and its memory implementation (the Kafka one is
  :mod:`sluice.worker.distributed.config_store`);
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
    "TaskInfo",
]
