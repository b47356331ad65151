from __future__ import annotations

import pytest

from sluice.connectors.api import ConfigError, DataError
from sluice.transforms import RegexRouter, TimestampRouter
from sluice.transforms.routing import java_replacement

from .support import configured, sink, source


def test_regex_router_as_in_connect_docs() -> None:
    t = configured(RegexRouter, regex=r"([^.]+)\.([^.]+)\.([^.]+)", replacement="$3")
    assert t.apply(sink("v", topic="server.inventory.customers")).topic == "customers"
    untouched = sink("v", topic="no-dots")
    assert t.apply(untouched) is untouched


def test_regex_router_needs_a_full_match_and_supports_named_groups() -> None:
    t = configured(RegexRouter, regex="(?P<name>orders)-(\\d+)", replacement="${name}_v$2")
    assert t.apply(source("v", topic="orders-7")).topic == "orders_v7"
    assert t.apply(source("v", topic="x-orders-7")).topic == "x-orders-7"


def test_regex_router_batch_uses_cached_routes() -> None:
    t = configured(RegexRouter, regex="(.*)-raw", replacement="$1-clean")
    records = [sink(i, topic="a-raw") for i in range(3)] + [sink(9, topic="b")]
    assert [r.topic for r in t.apply_batch(records)] == ["a-clean"] * 3 + ["b"]
    assert [r.value for r in t.apply_batch(records)] == [0, 1, 2, 9]


def test_java_replacement_escapes() -> None:
    assert java_replacement(r"a\$1$1") == r"a\$1\g<1>"
    with pytest.raises(ConfigError) as err:
        configured(RegexRouter, regex="(a)", replacement="$2")
    assert err.value.key == "replacement"
    with pytest.raises(ConfigError) as err:
        configured(RegexRouter, regex="(", replacement="x")
    assert err.value.key == "regex"


def test_timestamp_router_defaults_and_formats() -> None:
    t = configured(TimestampRouter)
    assert t.apply(sink("v", topic="logs")).topic == "logs-20231114"
    t = configured(TimestampRouter, topic_format="foo-${topic}-${timestamp}", timestamp_format="yyyy-MM-dd'T'HH")
    assert t.apply(sink("v", topic="logs")).topic == "foo-logs-2023-11-14T22"
    assert t.apply(sink("v", topic="logs", timestamp=1_700_000_000_000 + 3_600_000)).topic == "foo-logs-2023-11-14T23"


def test_timestamp_router_errors() -> None:
    with pytest.raises(DataError, match="timestamp missing"):
        configured(TimestampRouter).apply(sink("v", timestamp=None))
    with pytest.raises(ConfigError) as err:
        configured(TimestampRouter, timestamp_format="yyyyQQ")
    assert err.value.key == "timestamp.format"
