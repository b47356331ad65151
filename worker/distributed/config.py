"""The keys of a distributed worker (``sluice distributed worker.properties``), as Kafka Connect's."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sluice.worker.config.models import WorkerConfig
from sluice.worker.herder.api import DEFAULT_SESSION_TIMEOUT_MS


class DistributedConfig(WorkerConfig):
    """A :class:`WorkerConfig` plus the cluster keys; ``group.id`` and the three topics are required."""

    group_id: str = Field(description="The cluster: workers with the same group.id share connectors and tasks")  # type: ignore[assignment]
    config_storage_topic: str = Field(description="Compacted one-partition topic holding connector configs")
    config_storage_replication_factor: int = Field(3, ge=-1, description="Replication of the config topic (-1: broker default)")
    sluice_storage_topic: str | None = Field(
        None,
        description="Compacted one-partition topic holding the records only Sluice reads (the leader's assignment, backfill jobs); "
        "default: config.storage.topic + '-sluice'. Kept out of the config topic, which Kafka Connect reads",
    )
    offset_storage_topic: str = Field(description="Compacted topic holding source offsets")
    offset_storage_partitions: int = Field(25, ge=-1, description="Partitions of the offsets topic when it is created")
    offset_storage_replication_factor: int = Field(3, ge=-1, description="Replication of the offsets topic (-1: broker default)")
    status_storage_topic: str = Field(description="Compacted topic holding connector and task statuses")
    status_storage_partitions: int = Field(5, ge=-1, description="Partitions of the status topic when it is created")
    status_storage_replication_factor: int = Field(3, ge=-1, description="Replication of the status topic (-1: broker default)")
    session_timeout_ms: int = Field(DEFAULT_SESSION_TIMEOUT_MS, ge=1, description="A worker silent this long leaves the group")
    heartbeat_interval_ms: int = Field(3_000, ge=1, description="Heartbeats to the group coordinator")
    rebalance_timeout_ms: int = Field(60_000, ge=1, description="Time a worker has to rejoin and to release revoked work")
    scheduled_rebalance_max_delay_ms: int = Field(
        300_000, ge=0, description="How long the work of a departed worker waits for it to come back before it moves"
    )
    worker_sync_timeout_ms: int = Field(3_000, ge=1, description="Time to catch up with the config topic before acting")
    rest_advertised_listener: Literal["http", "https"] | None = Field(None, description="Scheme other workers use to reach this one")
    exactly_once_source_support: Literal["disabled", "preparing", "enabled"] = Field(
        "disabled",
        description="Exactly-once delivery of source connectors (KIP-618): enabled commits each source task's "
        "records and offsets in Kafka transactions and fences zombie tasks; preparing is the step of a rolling "
        "upgrade to enabled (workers fence, tasks still deliver at least once; validation treats it as "
        "disabled); disabled: at least once. Every worker of a cluster must be set alike",
    )

    @model_validator(mode="after")
    def _timeouts(self) -> DistributedConfig:
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("heartbeat.interval.ms must be lower than session.timeout.ms")
        topics = [self.config_storage_topic, self.offset_storage_topic, self.status_storage_topic, self.sluice_topic]
        if len(set(topics)) != 4:
            raise ValueError(
                "config.storage.topic, offset.storage.topic, status.storage.topic and sluice.storage.topic "
                "must be four different topics"
            )
        return self

    @property
    def exactly_once_source_enabled(self) -> bool:
        """Whether this worker runs source tasks exactly-once (``exactly.once.source.support=enabled``;
        ``preparing`` is not enabled yet)."""
        return self.exactly_once_source_support == "enabled"

    def offsets_topic(self) -> str | None:
        return self.offset_storage_topic

    def worker_topics(self) -> dict[str, str]:
        return {
            **super().worker_topics(),
            self.config_storage_topic: "config.storage.topic",
            self.status_storage_topic: "status.storage.topic",
            self.sluice_topic: "sluice.storage.topic",
        }

    def source_transactions_topic(self) -> str | None:
        """``offset.storage.topic`` once source tasks deliver exactly once: they write their offsets
        there in their own transactions."""
        return self.offset_storage_topic if self.exactly_once_source_enabled else None

    @property
    def sluice_topic(self) -> str:
        """The topic of Sluice's own cluster records (``sluice.storage.topic`` or its default)."""
        return self.sluice_storage_topic or f"{self.config_storage_topic}-sluice"

    @property
    def advertised_url(self) -> str:
        """The URL other workers forward requests to."""
        scheme, _, _ = self.listener
        return f"{self.rest_advertised_listener or scheme}://{self.worker_id}"
