"""The standalone herder: one process runs every connector; configs live in memory, offsets in a file.

It is the herder core (:class:`~sluice.worker.herder.core.HerderCore`) over a
:class:`~sluice.worker.herder.stores.config_store.MemoryConfigStore`, an in-memory
:class:`~sluice.worker.herder.stores.status_store.StatusStore` and the
:class:`~sluice.worker.herder.strategy.LocalAssignment`
(everything runs here; a change is applied before the request that made it returns), which probes
the Kafka cluster so that ``GET /health`` reports losing it (:mod:`~sluice.worker.herder.kafka_contact`).
Its backfill jobs are kept in a file beside the offsets (or in memory), their manager started and
stopped with the herder.
"""

from __future__ import annotations

from typing import Any

from sluice.worker.backfill import BackfillManager
from sluice.worker.backfill.handoff_guard import HandoffGuard
from sluice.worker.config.models import WorkerConfig, refuse_distributed_only_keys
from sluice.worker.herder.core import HerderCore, security_settings
from sluice.worker.herder.kafka_contact import KafkaContact
from sluice.worker.herder.stores.config_store import MemoryConfigStore
from sluice.worker.herder.stores.status_store import StatusStore
from sluice.worker.herder.strategy import LocalAssignment
from sluice.worker.worker import Worker


class StandaloneHerder(HerderCore):
    """Runs every connector in this process."""

    def __init__(self, worker: Worker) -> None:
        """Raises :class:`ConfigError` when the worker config turns on a distributed-mode setting
        (``exactly.once.source.support=enabled``)."""
        config = worker.config
        refuse_distributed_only_keys(config.raw)
        store = MemoryConfigStore(on_change=self.wakeup)
        #: Whether Kafka answers (``GET /health``).
        self.kafka_contact = KafkaContact(config.bootstrap_servers, kafka_probe_settings(config))
        strategy = LocalAssignment(
            config.worker_id,
            store,
            running=lambda: self.ready,
            contact=self.kafka_contact,
            url=f"{config.listener[0]}://{config.worker_id}",
        )
        #: The worker's backfill jobs (``/backfills``); it lives as long as the herder.
        self.backfills = BackfillManager.from_worker_settings(config.raw)
        self.backfills.handoff_guard = HandoffGuard(self)
        self.backfills.resolve_references = worker.config_providers.resolve
        super().__init__(worker, store, StatusStore(), strategy, parts=[self.backfills])


def kafka_probe_settings(config: WorkerConfig) -> dict[str, Any]:
    """The security settings of the Kafka probe: the admin clients' (``admin.*``, as for ``GET /``'s
    cluster id), else the producers' or the consumers'. A worker that secures only its task clients
    must not be reported unhealthy because a probe of its own spoke plaintext to a TLS listener."""
    for prefix in ("admin.", "producer.", "consumer."):
        settings = security_settings(config.prefixed(prefix))
        if settings:
            return settings
    return {}
