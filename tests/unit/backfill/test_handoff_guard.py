"""The hand-off guard: a backfill into a CDC connector's topic without ``target.cdc`` is refused at
submit (400 on ``target.topic`` pointing at ``target.cdc``); with a transformed connector it is
accepted with a warning; everything else passes untouched."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from sluice.connectors.api import NotFoundError
from sluice.connectors.backfill.cdc_owner import cdc_topic_owner
from sluice.worker.backfill import BackfillManager, MemoryBackfillStore
from sluice.worker.backfill.handoff_guard import HandoffGuard
from sluice.worker.backfill.models import parse_spec
from sluice.worker.herder import BadRequest, Forbidden

CDC = {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "database.hostname": "db",
    "database.port": "5432",
    "database.user": "cdc",
    "database.password": "[hidden]",
    "database.dbname": "shop",
    "topic.prefix": "shop",
    "slot.name": "shop_cdc",
}


class Directory:
    """The herder's read side, from a dict of connector configs (and topics written)."""

    def __init__(self, configs: dict[str, dict[str, Any]], written: dict[str, list[str]] | None = None) -> None:
        self.configs = configs
        self.written = written or {}
        self.tracking = True

    def connectors(self) -> list[str]:
        return sorted(self.configs)

    def connector_config(self, name: str) -> dict[str, Any]:
        if name not in self.configs:
            raise NotFoundError(name)
        return dict(self.configs[name])

    def connector_topics(self, name: str) -> list[str]:
        if not self.tracking:
            raise Forbidden("Topic tracking is disabled.")
        return self.written.get(name, [])


def jdbc_spec(topic: str | None = "shop.public.orders", table: str = "orders", **target: Any) -> dict[str, Any]:
    tgt: dict[str, Any] = {"topic": topic} if topic else {}
    return {
        "id": "orders",
        "kind": "jdbc_to_topic",
        "source": {"connection.url": "jdbc:postgresql://db:5432/shop", "table": table, "cdc.slot.name": "shop_cdc"},
        "target": {**tgt, **target},
    }


def check(directory: Directory, raw: dict[str, Any]) -> list[str]:
    return HandoffGuard(directory).check(parse_spec(raw))


def test_the_cdc_connectors_table_topic_is_refused_naming_the_key_and_target_cdc() -> None:
    with pytest.raises(BadRequest) as caught:
        check(Directory({"shop-cdc": CDC}), jdbc_spec())
    message = str(caught.value)
    assert message.startswith(
        "Invalid backfill spec: target.topic: shop.public.orders is the topic of the PostgreSQL CDC connector shop-cdc"
    )
    assert "topic.prefix shop + table public.orders" in message
    assert "two keys in two partitions" in message
    assert 'target.cdc instead: {"name": "shop-cdc"' in message


def test_the_topic_is_matched_by_its_own_name_when_the_backfill_reads_another_table() -> None:
    with pytest.raises(BadRequest, match="table public.orders"):
        check(Directory({"shop-cdc": CDC}), jdbc_spec(table="archive.orders_2019"))


def test_a_table_the_connector_does_not_capture_or_another_prefix_passes() -> None:
    only_customers = {**CDC, "table.include.list": "public.customers"}
    assert check(Directory({"shop-cdc": only_customers}), jdbc_spec()) == []
    assert check(Directory({"shop-cdc": CDC}), jdbc_spec(topic="orders-from-jdbc")) == []
    assert check(Directory({"other": {**CDC, "topic.prefix": "billing"}}), jdbc_spec()) == []


def test_other_connectors_and_other_kinds_are_not_looked_at() -> None:
    jdbc_source = {"connector.class": "JdbcSource", "topic.prefix": "shop.public.", "connection.url": "x"}
    assert check(Directory({"jdbc": jdbc_source}), jdbc_spec(topic="shop.public.orders")) == []
    replay = {
        "id": "r",
        "kind": "topic_to_sink",
        "source": {"topic": "shop.public.orders"},
        "target": {"config": {"connector.class": "JdbcSink"}},
    }
    assert check(Directory({"shop-cdc": CDC}), replay) == []


def test_a_target_cdc_spec_is_accepted() -> None:
    handoff = jdbc_spec(topic=None, cdc={"name": "shop-cdc", "config": CDC})
    assert check(Directory({"shop-cdc": CDC}), handoff) == []


def test_a_regex_router_reaching_the_topic_warns_because_target_cdc_cannot_apply_transforms() -> None:
    routed = {
        **CDC,
        "transforms": "route",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": r"shop\.public\.(.*)",
        "transforms.route.replacement": "cdc-$1",
    }
    warnings = check(Directory({"shop-cdc": routed}), jdbc_spec(topic="cdc-orders"))
    assert len(warnings) == 1
    assert "cdc-orders is written by the PostgreSQL CDC connector shop-cdc" in warnings[0]
    assert "renamed by its transform route" in warnings[0]
    assert "target.cdc cannot reproduce" in warnings[0]
    # The router renames every table of the prefix: the unrouted name is no longer the connector's.
    assert check(Directory({"shop-cdc": routed}), jdbc_spec()) == []


def test_a_topic_the_connector_has_written_counts_whatever_routed_it() -> None:
    unwrapped = {
        **CDC,
        "transforms": "unwrap",
        "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
    }
    directory = Directory({"shop-cdc": unwrapped}, {"shop-cdc": ["orders-flat"]})
    assert "it has written to that topic" in check(directory, jdbc_spec(topic="orders-flat"))[0]
    directory.tracking = False  # topic tracking off: the naming rule alone
    assert check(directory, jdbc_spec(topic="orders-flat")) == []
    assert check(directory, jdbc_spec())  # shop.public.orders by naming, transformed: a warning


def test_a_predicate_makes_a_router_optional() -> None:
    routed = {
        **CDC,
        "transforms": "route",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": r"shop\.public\.(.*)",
        "transforms.route.replacement": "cdc-$1",
        "transforms.route.predicate": "some",
    }
    assert cdc_topic_owner("shop.public.orders", "orders", "c", routed) is not None
    assert cdc_topic_owner("cdc-orders", "orders", "c", routed) is not None


def test_an_unparseable_config_still_matches_by_prefix() -> None:
    referenced = {**CDC, "database.port": "${file:/secrets.properties:port}", "table.include.list": "(unclosed"}
    owner = cdc_topic_owner("shop.public.orders", "orders", "c", referenced)
    assert owner is not None and not owner.transformed
    assert cdc_topic_owner("shop.pg_catalog.x", "x", "c", referenced) is None


def test_the_manager_refuses_before_storing_and_returns_warnings() -> None:
    ran = threading.Event()

    def runner(provider: Any, spec: Any, tracker: Any, bootstrap: str) -> dict[str, Any]:
        ran.set()
        return {}

    m = BackfillManager(MemoryBackfillStore(), runner=runner)
    m.handoff_guard = HandoffGuard(Directory({"shop-cdc": CDC}))
    m.start()
    try:
        with pytest.raises(BadRequest, match="target.cdc"):
            m.submit(jdbc_spec())
        assert m.list() == [] and not ran.is_set()
        unwrapped = {
            **CDC,
            "transforms": "unwrap",
            "transforms.unwrap.type": "io.debezium.transforms.ExtractNewRecordState",
        }
        m.handoff_guard = HandoffGuard(Directory({"shop-cdc": unwrapped}))
        info = m.submit({**jdbc_spec(), "schedule": {"cron": "0 3 * * *"}})
        assert info["id"] == "orders" and "target.cdc cannot reproduce" in info["warnings"][0]
    finally:
        m.stop()
