"""Create the internal topics of a distributed cluster, or check the ones that exist.

Every internal topic must be compacted (a deleted record would lose a connector's config or a
source offset for good), and the config topic must have exactly one partition (its records are
ordered as a whole). Connect refuses to start on a misconfigured topic; so does Sluice, with a
message that says which key names the topic and how to fix it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from sluice.connectors.api import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InternalTopic:
    """What an internal topic must look like."""

    name: str
    key: str  # the worker key that names it, for messages
    partitions: int
    replication_factor: int  # -1: the broker's default.replication.factor
    exact_partitions: bool = False


def ensure_topics(admin: AdminClient, topics: list[InternalTopic], timeout: float = 30.0) -> None:
    """Create missing topics (compacted); raise :class:`ConfigError` for an existing topic that is unfit."""
    try:
        metadata = admin.list_topics(timeout=timeout)
    except KafkaException as exc:
        raise ConfigError(f"Cannot reach Kafka to check the internal topics: {exc}") from None
    missing = [t for t in topics if t.name not in metadata.topics]
    if missing:
        futures = admin.create_topics(
            [
                NewTopic(t.name, t.partitions, t.replication_factor, config={"cleanup.policy": "compact"})
                for t in missing
            ],
            operation_timeout=timeout,
        )
        for t in missing:
            try:
                futures[t.name].result(timeout)
                log.info("Created internal topic %s (%s) with %d partition(s)", t.name, t.key, t.partitions)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if getattr(error, "name", lambda: "")() != "TOPIC_ALREADY_EXISTS":  # another worker won the race
                    raise ConfigError(f"Cannot create the internal topic {t.name} ({t.key}): {exc}", key=t.key) from None
        metadata = _await_leaders(admin, [t.name for t in missing], timeout)
    _check(admin, topics, metadata, timeout)


def _await_leaders(admin: AdminClient, names: list[str], timeout: float) -> Any:
    """Metadata once every partition of the new topics has a leader (creation is asynchronous)."""
    deadline = time.monotonic() + timeout
    while True:
        metadata = admin.list_topics(timeout=timeout)
        ready = all(
            name in metadata.topics
            and metadata.topics[name].error is None
            and metadata.topics[name].partitions
            and all(p.leader >= 0 for p in metadata.topics[name].partitions.values())
            for name in names
        )
        if ready or time.monotonic() > deadline:
            return metadata
        time.sleep(0.1)


def _check(admin: AdminClient, topics: list[InternalTopic], metadata: object, timeout: float) -> None:
    resources = [ConfigResource(ResourceType.TOPIC, t.name) for t in topics]
    described = admin.describe_configs(resources)
    for t, resource in zip(topics, resources, strict=True):
        info = metadata.topics.get(t.name)  # type: ignore[attr-defined]
        count = len(info.partitions) if info is not None else 0
        if t.exact_partitions and count != t.partitions:
            raise ConfigError(
                f"Topic '{t.name}' supplied via the '{t.key}' property is required to have a single partition in "
                f"order to guarantee consistency of connector configurations, but found {count} partitions.",
                key=t.key,
            )
        try:
            entries = described[resource].result(timeout)
        except KafkaException as exc:
            raise ConfigError(f"Cannot read the configuration of topic {t.name} ({t.key}): {exc}", key=t.key) from None
        policy = entries.get("cleanup.policy")
        value = policy.value if policy is not None else ""
        if "compact" not in str(value).split(",") or "delete" in str(value).split(","):
            raise ConfigError(
                f"Topic '{t.name}' supplied via the '{t.key}' property is required to have 'cleanup.policy=compact' "
                f"to guarantee consistency and durability of connector data, but found the topic currently has "
                f"'cleanup.policy={value}'. Continuing would likely result in eventually losing data and problems "
                f"restarting this Connect cluster in the future. Change the '{t.key}' property in the worker "
                f"configuration to use a topic with 'cleanup.policy=compact'.",
                key=t.key,
            )
