"""Topic and group scopes of connectors (issue #36, item 5): what a scoped admin's config may name."""

from __future__ import annotations

import pytest

from sluice.connectors.api import ConfigError, ConnectError
from sluice.transforms.routing import RegexRouter, TimestampRouter
from sluice.worker.config.connector_scope import (
    ConnectorScope,
    TopicScope,
    TopicsUsed,
    check_config_scope,
    check_group_unique,
    effective_group,
    regex_literal_prefix,
)

ORDERS = ConnectorScope(("orders-*", "orders.dlq"))


@pytest.mark.parametrize(
    ("regex", "prefix"),
    [
        ("orders-.*", "orders-"),
        ("^orders-.*", "orders-"),
        ("orders\\.v1\\..*", "orders.v1."),
        ("orders-?x", "orders"),
        ("orders-.*|pay-events", ""),
        ("(?i)orders-.*", ""),
        ("orders-(a|b)", "orders-"),
        ("[o]rders", ""),
        ("orders", "orders"),
    ],
)
def test_regex_literal_prefix(regex: str, prefix: str) -> None:
    assert regex_literal_prefix(regex) == prefix


def test_scope_round_trips_through_config_keys() -> None:
    stamped = {k: v for k, v in ConnectorScope(("a-*", "b"), ("g-*",)).stamp().items() if v is not None}
    assert ConnectorScope.of(stamped) == ConnectorScope(("a-*", "b"), ("g-*",))
    assert not ConnectorScope.of({}).restricted


def _check(used: TopicsUsed, config: dict[str, str] | None = None, scope: ConnectorScope = ORDERS) -> None:
    check_config_scope(used, config or {}, scope)


def test_sink_topics_and_regex() -> None:
    _check(TopicsUsed(False, topics=("orders-a", "orders.dlq")))
    with pytest.raises(ConfigError, match="'pay-events' is outside") as info:
        _check(TopicsUsed(False, topics=("orders-a", "pay-events")))
    assert info.value.key == "topics"
    _check(TopicsUsed(False, topics_regex="orders-.*"))
    for regex in ("orders.*", ".*", "orders-.*|pay-events", "pay-.*"):
        with pytest.raises(ConfigError, match="topics.regex") as info:
            _check(TopicsUsed(False, topics_regex=regex))
        assert info.value.key == "topics.regex"
    _check(TopicsUsed(False, topics_regex=".*"), scope=ConnectorScope(("*",)))


def test_dlq_and_source_keys() -> None:
    with pytest.raises(ConfigError) as info:
        _check(TopicsUsed(False, topics=("orders-a",), dlq_topic="pay-dlq"))
    assert info.value.key == "errors.deadletterqueue.topic.name"
    with pytest.raises(ConfigError) as info:
        _check(TopicsUsed(True), {"topic": "pay-events"})
    assert info.value.key == "topic"
    with pytest.raises(ConfigError) as info:
        _check(TopicsUsed(True), {"topic.prefix": "pay."})
    assert info.value.key == "topic.prefix"
    _check(TopicsUsed(True), {"topic": "orders-x", "topic.prefix": "orders-"})


def _router(replacement: str) -> RegexRouter:
    router = RegexRouter()
    router.configure({"regex": "(.*)", "replacement": replacement})
    return router


def test_routers() -> None:
    with pytest.raises(ConfigError, match="transform r") as info:
        _check(TopicsUsed(True, transforms=(("r", _router("pay-events")),)), {"transforms.r.replacement": "pay-events"})
    assert info.value.key == "transforms.r.replacement"
    with pytest.raises(ConfigError):
        _check(TopicsUsed(True, transforms=(("r", _router("pay-$1")),)), {"transforms.r.replacement": "pay-$1"})
    _check(TopicsUsed(True, transforms=(("r", _router("orders-$1")),)), {"transforms.r.replacement": "orders-$1"})
    # A sink's topics are known, so each route is checked exactly.
    with pytest.raises(ConfigError):
        _check(TopicsUsed(False, topics=("orders-a",), transforms=(("r", _router("x-$1")),)), {})
    ts = TimestampRouter()
    ts.configure({"topic.format": "pay-${timestamp}"})
    with pytest.raises(ConfigError) as info:
        _check(TopicsUsed(True, transforms=(("t", ts),)), {"transforms.t.topic.format": "pay-${timestamp}"})
    assert info.value.key == "transforms.t.topic.format"


def test_an_unrestricted_scope_checks_nothing() -> None:
    _check(TopicsUsed(False, topics=("pay-events",), dlq_topic="x"), scope=ConnectorScope())


def test_topic_scope_at_run_time() -> None:
    guard = TopicScope(ORDERS)
    guard.check("orders-1")
    with pytest.raises(ConnectError, match="routed to topic 'pay-events', outside"):
        guard.check("pay-events")


def test_groups() -> None:
    assert effective_group({"name": "spy", "consumer.override.group.id": "connect-payments-sink"}) == "connect-spy"
    assert effective_group({"name": "spy", "consumer.override.group.id": "connect-spy-2"}) == "connect-spy-2"
    others = {"payments-sink": {"name": "payments-sink"}}
    with pytest.raises(ConfigError, match="consumer group of connector payments-sink"):
        check_group_unique(
            "payments", {"name": "payments", "consumer.override.group.id": "connect-payments-sink"}, others
        )
    check_group_unique("payments", {"name": "payments"}, others)
