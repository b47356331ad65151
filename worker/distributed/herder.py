"""The distributed herder: one member of a cluster of workers coordinated through Kafka.

It is the herder core (:class:`~sluice.worker.herder.core.HerderCore`) over the config topic
(:class:`~sluice.worker.herder.stores.kafka_config_store.KafkaConfigStore`), the status topic
(:class:`~sluice.worker.herder.stores.kafka_status_store.KafkaStatusStore`) and the
:class:`~sluice.worker.distributed.cluster.ClusterAssignment`. Three threads matter:

* the core's **tick** thread — the only one that starts and stops connector instances and tasks on
  this worker. Every half second, or as soon as the config topic or the group changes, it (1)
  stops everything if the worker lost contact with the group, (2) if this worker is the leader,
  plans the assignment and writes it, (3) makes the work running here match the latest
  assignment, configs and target states, and (4) performs restart requests;
* the readers of the config, status and offset topics (:mod:`sluice.offsets.kafka_log`);
* the group membership thread (:mod:`sluice.worker.distributed.membership`).

REST calls run on the server's threads: reads come from this worker's copies of the topics;
writes are performed by the leader, so a follower forwards them (:mod:`sluice.worker.distributed.forwarding`).

Backfill jobs live in the cluster's ``sluice.storage.topic`` and only the leader fires their
schedules (:meth:`~sluice.worker.backfill.BackfillManager.for_cluster`); their manager starts with
the herder, once the topic is known to exist, and stops before it.
"""

from __future__ import annotations

from sluice.offsets.connector_topics import OffsetTopics
from sluice.worker.backfill import BackfillManager
from sluice.worker.backfill.handoff_guard import HandoffGuard
from sluice.worker.distributed.cluster import ClusterAssignment
from sluice.worker.distributed.config import DistributedConfig
from sluice.worker.distributed.membership import GroupMembership
from sluice.worker.herder.core import HerderCore, security_settings
from sluice.worker.herder.stores.kafka_config_store import KafkaConfigStore
from sluice.worker.herder.stores.kafka_status_store import KafkaStatusStore
from sluice.worker.worker import Worker


class DistributedHerder(HerderCore):
    """Runs the share of the cluster's connectors and tasks that the leader assigns to this worker."""

    def __init__(self, worker: Worker, config: DistributedConfig) -> None:
        if not isinstance(worker.offset_store, OffsetTopics):
            raise TypeError("A distributed worker keeps source offsets in Kafka topics (OffsetTopics)")
        self.config = config
        client_id = self._client_id()
        bootstrap = config.bootstrap_servers
        producer = security_settings(config.prefixed("producer."))
        consumer = security_settings(config.prefixed("consumer."))
        configs = KafkaConfigStore(
            config.config_storage_topic, bootstrap, config.group_id, client_id=client_id, on_change=self.wakeup,
            producer_overrides=producer, consumer_overrides=consumer, sluice_topic=config.sluice_topic,
        )

        def generation() -> int:
            assignment = configs.snapshot().assignment
            return assignment.generation if assignment else 0

        status = KafkaStatusStore(
            config.status_storage_topic, bootstrap, client_id=client_id, generation=generation,
            producer_overrides=producer, consumer_overrides=consumer, on_topic_reset=self._topics_reset,
        )
        self.membership = GroupMembership(
            bootstrap_servers=bootstrap,
            group_id=config.group_id,
            topic=config.config_storage_topic,
            worker_id=config.worker_id,
            url=config.advertised_url,
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            rebalance_timeout_ms=config.rebalance_timeout_ms,
            on_change=self.wakeup,
            overrides=consumer,
        )
        self.cluster = ClusterAssignment(
            config, configs, status, self.membership, worker.offset_store, running=lambda: self.ready
        )
        #: The cluster's backfill jobs (``/backfills``); it lives as long as the herder.
        self.backfills = BackfillManager.for_cluster(
            config.raw,
            # Not the config topic, whose unknown keys a Connect worker logs as errors (read for
            # the jobs an earlier Sluice kept there).
            topic=config.sluice_topic,
            legacy_topic=config.config_storage_topic,
            bootstrap_servers=bootstrap,
            client_id=client_id,
            worker_id=config.worker_id,
            is_leader=lambda: self.membership.is_leader,
            producer_overrides=producer,
            consumer_overrides=consumer,
        )
        self.backfills.handoff_guard = HandoffGuard(self)
        self.backfills.resolve_references = worker.config_providers.resolve
        super().__init__(worker, configs, status, self.cluster, parts=[self.backfills])
        self.configs: KafkaConfigStore = configs
        self.status: KafkaStatusStore = status

    def _client_id(self) -> str:
        return self.config.client_id or f"sluice-{self.config.group_id}-{self.config.worker_id}"

    def _topics_reset(self, connector: str) -> None:
        self.work.topics_reset(connector)
