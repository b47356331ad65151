"""Topic and group scopes of connectors (issue #36, item 5): what a scoped admin's config may name,
and the reserved topics (the worker's own, Kafka's internal ones) no connector may name."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import Consumer

from sluice.connectors.api import ConfigError, ConnectError
from sluice.transforms.routing import RegexRouter, TimestampRouter
from sluice.worker.config.connector_scope import (
    ConnectorScope,
    ReservedTopics,
    TopicScope,
    TopicsUsed,
    check_config_scope,
    check_group_unique,
    check_reserved_topics,
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


# -- reserved topics: the worker's own and Kafka's, refused to every connector -----------------------

RESERVED = ReservedTopics.of(
    {
        "connect-configs": "config.storage.topic",
        "connect-status": "status.storage.topic",
        "connect-configs-sluice": "sluice.storage.topic",
        "sluice.audit": "rest.audit.topic",
    },
    "connect-offsets",
)


def _reserved(used: TopicsUsed, config: dict[str, str] | None = None) -> None:
    check_reserved_topics(used, config or {}, RESERVED)


def _refused(used: TopicsUsed, key: str, text: str, config: dict[str, str] | None = None) -> None:
    with pytest.raises(ConfigError) as info:
        _reserved(used, config)
    assert info.value.key == key
    assert text in str(info.value), str(info.value)


def test_the_reserved_topics_are_the_workers_and_kafkas() -> None:
    assert RESERVED.why("connect-offsets") == "is the worker's offsets topic (offset.storage.topic)"
    assert RESERVED.why("sluice.audit") == "is the worker's audit topic (rest.audit.topic)"
    assert RESERVED.why("__share_group_state") == "is an internal topic of Kafka's"
    # Other software's '__' topics are ordinary ones: a CDC source writes Debezium's heartbeats there.
    for topic in ("connect-configs-archive", "orders", "_single-underscore", "connect", "__debezium-heartbeat.shop"):
        assert RESERVED.why(topic) is None
    # A standalone worker has no offsets topic; its audit topic, if any, is still reserved.
    assert ReservedTopics.of({}, None).why("connect-offsets") is None


def test_a_sink_may_not_read_a_reserved_topic() -> None:
    _refused(
        TopicsUsed(False, topics=("orders", "connect-configs")),
        "topics",
        "topics: 'connect-configs' is the worker's config topic (config.storage.topic); no connector may read "
        "or write the worker's internal topics",
    )
    _refused(TopicsUsed(False, topics=("__consumer_offsets",)), "topics", "no connector may read or write Kafka's")
    _reserved(TopicsUsed(False, topics=("connect-configs-archive", "orders", "connect-status-v2")))


@pytest.mark.parametrize(
    ("regex", "matched"),
    [
        (".*", "connect-configs"),
        ("connect-.*", "connect-configs"),
        ("connect-(configs|x)", "connect-configs"),
        ("sluice\\.audit", "sluice.audit"),
        ("sluice.audit", "sluice.audit"),
        ("connect-offsets|orders", "connect-offsets"),
        ("__trans.*", "__transaction_state"),
        ("_.*", "__consumer_offsets"),
    ],
)
def test_a_regex_matching_a_reserved_topic_is_refused(regex: str, matched: str) -> None:
    _refused(TopicsUsed(False, topics_regex=regex), "topics.regex", f"matches {matched!r}, which is")


def test_a_regex_is_tried_against_the_reserved_names_only() -> None:
    for regex in ("orders-.*", "connect-configs-a.*", "connect-configs-archive", "connect-statu"):
        _reserved(TopicsUsed(False, topics_regex=regex))
    _refused(TopicsUsed(False, topics_regex="__share.*"), "topics.regex", "matches '__share_group_state'")
    _reserved(TopicsUsed(False, topics_regex="__debezium-heartbeat\\..*"))


def test_a_dead_letter_queue_or_a_source_topic_may_not_be_reserved() -> None:
    _refused(
        TopicsUsed(False, topics=("orders",), dlq_topic="connect-status"),
        "errors.deadletterqueue.topic.name",
        "is the worker's status topic",
    )
    _refused(TopicsUsed(True), "topic", "is the worker's offsets topic", {"topic": "connect-offsets"})
    _refused(TopicsUsed(True), "topic", "Sluice storage topic", {"topic": "connect-configs-sluice"})
    # A prefix only data completes is held at run time (TopicScope), not refused here.
    _reserved(TopicsUsed(True), {"topic": "orders", "topic.prefix": "connect-"})


def test_a_router_whose_literal_output_is_reserved_is_refused() -> None:
    _refused(
        TopicsUsed(True, transforms=(("r", _router("connect-status")),)),
        "transforms.r.replacement",
        "'connect-status' is the worker's status topic (status.storage.topic), where transform r routes records",
        {"transforms.r.replacement": "connect-status"},
    )
    # A sink's topics are known: each route is exact.
    sink = RegexRouter()
    sink.configure({"regex": "orders", "replacement": "connect-configs"})
    _refused(
        TopicsUsed(False, topics=("orders",), transforms=(("r", sink),)), "transforms.r.replacement", "config topic"
    )
    ts = TimestampRouter()
    ts.configure({"topic.format": "connect-status"})
    _refused(
        TopicsUsed(True, transforms=(("t", ts),)),
        "transforms.t.topic.format",
        "status topic",
        {"transforms.t.topic.format": "connect-status"},
    )
    # Routes the record decides pass here and are held at run time.
    _reserved(TopicsUsed(True, transforms=(("r", _router("$1-status")),)), {"transforms.r.replacement": "$1-status"})
    ts.configure({"topic.format": "connect-status-${timestamp}"})
    _reserved(TopicsUsed(True, transforms=(("t", ts),)), {"transforms.t.topic.format": "connect-status-${timestamp}"})


def test_a_scoped_connector_keeps_its_scope_messages() -> None:
    # Reserved topics are refused whatever the grant (a scope of '*' too); scope messages are unchanged.
    with pytest.raises(ConfigError, match="config topic"):
        check_reserved_topics(TopicsUsed(False, topics=("connect-configs",)), {}, RESERVED)
    _check(TopicsUsed(False, topics=("connect-configs",)), scope=ConnectorScope(("*",)))
    with pytest.raises(ConfigError, match="'pay-events' is outside the topics this connector may reach"):
        _check(TopicsUsed(False, topics=("pay-events",)))


def test_a_record_routed_to_a_reserved_topic_is_refused_at_run_time() -> None:
    unrestricted = TopicScope(ConnectorScope(), RESERVED)
    unrestricted.check("connect-status-archive")
    unrestricted.check("orders")
    with pytest.raises(
        ConnectError,
        match=r"routed to topic 'connect-status', which is the worker's status topic \(status.storage.topic\); "
        "it was not sent: no connector may read or write the worker's internal topics",
    ):
        unrestricted.check("connect-status")
    with pytest.raises(ConnectError, match="'__consumer_offsets', which is an internal topic of Kafka's"):
        unrestricted.check("__consumer_offsets")
    scoped = TopicScope(ORDERS, RESERVED)
    with pytest.raises(ConnectError, match="which is the worker's config topic"):
        scoped.check("connect-configs")
    with pytest.raises(ConnectError, match="routed to topic 'pay-events', outside"):
        scoped.check("pay-events")


def test_the_consumer_blacklist_hides_exactly_the_reserved_topics() -> None:
    blacklist = RESERVED.blacklist()
    assert blacklist.split(",") == [
        "^__cluster_metadata$",
        "^__consumer_offsets$",
        "^__share_group_state$",
        "^__transaction_state$",
        "^connect-configs$",
        "^connect-configs-sluice$",
        "^connect-offsets$",
        "^connect-status$",
        "^sluice[.]audit$",
    ]
    patterns = [re.compile(p) for p in blacklist.split(",")]

    def hidden(topic: str) -> bool:
        return any(p.search(topic) for p in patterns)

    assert all(hidden(t) for t in ("connect-configs", "sluice.audit", "__consumer_offsets", "__transaction_state"))
    assert not any(
        hidden(t) for t in ("connect-configs-archive", "sluiceXaudit", "x__y", "orders", "__debezium-heartbeat.x")
    )
    assert RESERVED.blacklist("^legacy-.*").startswith("^legacy-.*,^__cluster_metadata$,")
    # librdkafka accepts the list (it compiles each pattern when the consumer is configured).
    Consumer({"group.id": "blacklist-check", "topic.blacklist": RESERVED.blacklist("^legacy-.*")}).close()
