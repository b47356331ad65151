from __future__ import annotations

import pytest

from sluice.connectors.api import ConfigError
from sluice.transforms import Filter, HasHeaderKey, RecordIsTombstone, TopicNameMatches

from .support import configured, sink, source


def test_topic_name_matches_needs_the_whole_name() -> None:
    p = configured(TopicNameMatches, pattern="orders-.*")
    assert p.test(sink("v", topic="orders-eu"))
    assert not p.test(sink("v", topic="all-orders-eu"))
    assert p.test(source("v", topic="orders-eu"))  # answered from the cache
    with pytest.raises(ConfigError) as err:
        configured(TopicNameMatches, pattern="(")
    assert err.value.key == "pattern"
    with pytest.raises(ConfigError):
        configured(TopicNameMatches)


def test_has_header_key() -> None:
    p = configured(HasHeaderKey, name="trace")
    assert p.test(sink("v", headers=(("a", 1), ("trace", None))))
    assert not p.test(sink("v", headers=(("a", 1),)))
    assert not p.test(sink("v"))


def test_record_is_tombstone() -> None:
    p = configured(RecordIsTombstone)
    assert p.test(sink(None)) and not p.test(sink({"a": 1})) and not p.test(sink(0))
    with pytest.raises(ConfigError) as err:
        configured(RecordIsTombstone, extra="x")
    assert err.value.key == "extra"


def test_filter_drops_everything_it_is_applied_to() -> None:
    f = configured(Filter)
    assert f.apply(sink("v")) is None
    assert f.apply_batch([sink("a"), sink("b")]) == []


def test_filter_with_negated_predicate_as_the_runtime_applies_it() -> None:
    """transforms.f.predicate=isOrders, transforms.f.negate=true: keep only the orders topic."""
    f, p = configured(Filter, predicate="isOrders", negate="true"), configured(TopicNameMatches, pattern="orders")
    records = [sink(1, topic="orders"), sink(2, topic="audit")]
    negate = True
    kept = [r for r in records if p.test(r) == negate or f.apply(r) is not None]
    assert [r.value for r in kept] == [1]
