"""Where a redriven dead letter may go: a topic the sink reads, in its scope, never the DLQ itself
and never a reserved topic (the worker's own, Kafka's internal ones), whatever its headers say."""

from __future__ import annotations

from sluice.worker.config.connector_scope import ConnectorScope, ReservedTopics
from sluice.worker.herder.dead_letters import _Targets

RESERVED = ReservedTopics.of({"connect-configs": "config.storage.topic"}, "connect-offsets")


def _topic(header: str) -> bytes:
    return header.encode()


def test_a_regex_sinks_dead_letter_goes_back_only_to_an_ordinary_topic() -> None:
    targets = _Targets([], ".*", ConnectorScope(), "orders.dlq", RESERVED)
    assert targets.of({"__connect.errors.topic": _topic("orders")}) == ("orders", None)
    for forged, why in (
        ("connect-configs", "is the worker's config topic"),
        ("connect-offsets", "offset.storage.topic"),
        ("__consumer_offsets", "internal topic of Kafka's"),
    ):
        topic, reason = targets.of({"__connect.errors.topic": _topic(forged)})
        assert topic is None and reason is not None and why in reason, (forged, reason)
    assert targets.of({"__connect.errors.topic": _topic("orders.dlq")})[1] == "its topic orders.dlq is the dead letter queue itself"
