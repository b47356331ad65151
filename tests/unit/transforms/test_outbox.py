"""The outbox EventRouter: Debezium's keys, defaults and reactions, on change events of an outbox table."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from sluice.connectors.api import (
    INT64_SCHEMA,
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    STRING_SCHEMA,
    ConfigError,
    ConnectError,
    DataError,
    Schema,
    Type,
)
from sluice.plugins.registry import PluginKind, PluginRegistry
from sluice.transforms import BUILTIN_TRANSFORMS, EventRouter
from sluice.transforms.outbox import java_regex

from .support import configured, source

JSON = Schema(Type.STRING, optional=True, name="io.debezium.data.Json", version=1)
ROW = Schema.struct(
    [
        ("id", STRING_SCHEMA),
        ("aggregatetype", STRING_SCHEMA),
        ("aggregateid", STRING_SCHEMA),
        ("type", STRING_SCHEMA),
        ("payload", JSON),
        ("created", OPTIONAL_INT64_SCHEMA),
        ("shard", OPTIONAL_INT64_SCHEMA),
    ],
    name="srv.public.outbox.Value",
    optional=True,
)
ENVELOPE = Schema.struct(
    [("before", ROW), ("after", ROW), ("op", STRING_SCHEMA), ("ts_ms", OPTIONAL_INT64_SCHEMA)],
    name="srv.public.outbox.Envelope",
)


def row(n: int = 1, aggregate: str = "Order", payload: str | None = '{"total": 12, "items": [{"sku": "a"}]}') -> dict:
    return {
        "id": f"e-{n}",
        "aggregatetype": aggregate,
        "aggregateid": f"o-{n}",
        "type": "OrderCreated",
        "payload": payload,
        "created": 1_600_000_000_000 + n,
        "shard": 3,
    }


def change(op: str, after: dict | None, *, schema: bool = True, before: dict | None = None) -> Any:
    value = {"before": before, "after": after, "op": op, "ts_ms": 1_700_000_000_555}
    return source(value, ENVELOPE if schema else None, topic="srv.public.outbox", key={"id": "x"})


def test_an_insert_becomes_the_event_with_debeziums_defaults() -> None:
    out = configured(EventRouter).apply(change("c", row()))
    assert out.topic == "outbox.event.Order"
    assert (out.key, out.key_schema) == ("o-1", STRING_SCHEMA)
    assert (out.value, out.value_schema) == ('{"total": 12, "items": [{"sku": "a"}]}', JSON)
    assert out.headers == (("id", "e-1"),)
    assert out.timestamp == 1_700_000_000_555  # the change event's ts_ms


def test_snapshot_reads_are_events_and_schemaless_records_work() -> None:
    out = configured(EventRouter).apply(change("r", row(2, "Customer"), schema=False))
    assert (out.topic, out.key, out.key_schema, out.value_schema) == ("outbox.event.Customer", "o-2", None, None)


def test_custom_columns_routing_and_timestamp() -> None:
    t = configured(
        EventRouter,
        **{
            "table.field.event.id": "aggregateid",
            "table.field.event.key": "type",
            "table.field.event.payload": "aggregatetype",
            "table.field.event.timestamp": "created",
            "route.by.field": "type",
            "route.topic.regex": r"(?<kind>[A-Z][a-z]+)(?<rest>.*)",
            "route.topic.replacement": "events.${kind}.$2",
        },
    )
    out = t.apply(change("c", row()))
    assert (out.topic, out.key, out.value) == ("events.Order.Created", "OrderCreated", "Order")
    assert out.headers == (("id", "o-1"),) and out.timestamp == 1_600_000_000_001


def test_routing_value_that_does_not_match_keeps_the_topic() -> None:
    t = configured(EventRouter, **{"route.topic.regex": "orders-(.*)", "route.topic.replacement": "o.$1"})
    assert t.apply(change("c", row())).topic == "srv.public.outbox"
    assert t.apply(change("c", row(aggregate="orders-eu"))).topic == "o.eu"


def test_additional_placement_header_envelope_partition() -> None:
    t = configured(
        EventRouter,
        **{"table.fields.additional.placement": "type:header:eventType,aggregatetype:envelope:kind,shard:partition"},
    )
    out = t.apply(change("c", row()))
    assert out.headers == (("id", "e-1"), ("eventType", "OrderCreated"))
    assert out.value == {"payload": '{"total": 12, "items": [{"sku": "a"}]}', "kind": "Order"}
    assert [(f.name, f.schema) for f in out.value_schema.fields] == [("payload", JSON), ("kind", STRING_SCHEMA)]
    assert out.partition == 3


def test_expanded_json_payload_and_schema_version() -> None:
    t = configured(EventRouter, **{"table.expand.json.payload": "true", "table.field.event.schema.version": "shard"})
    out = t.apply(change("c", row()))
    assert out.value == {"total": 12, "items": [{"sku": "a"}]}
    assert [f.name for f in out.value_schema.fields] == ["total", "items"]
    assert out.value_schema.field("total").schema.type is Type.INT64
    assert out.value_schema.field("items").schema.value_schema.field("sku").schema == OPTIONAL_STRING_SCHEMA
    assert out.value_schema.version == 3
    not_json = t.apply(change("c", row(payload="not json")))
    assert not_json.value == "not json"


def test_empty_payload_is_a_null_value_or_a_tombstone() -> None:
    plain = configured(EventRouter).apply(change("c", row(payload=None)))
    assert (plain.value, plain.value_schema, plain.key) == (None, JSON, "o-1")
    tomb = configured(EventRouter, **{"route.tombstone.on.empty.payload": "true"}).apply(change("c", row(payload=None)))
    assert (tomb.value, tomb.value_schema, tomb.key, tomb.topic) == (None, None, "o-1", "outbox.event.Order")


def test_deletes_tombstones_dropped_other_records_pass() -> None:
    t = configured(EventRouter)
    assert t.apply(change("d", None, before=row())) is None
    assert t.apply(source(None, None, topic="srv.public.outbox", key={"id": "x"})) is None
    heartbeat = source(
        {"ts_ms": 1}, Schema.struct([("ts_ms", INT64_SCHEMA)], name="io.debezium.connector.common.Heartbeat")
    )
    assert t.apply(heartbeat) is heartbeat


@pytest.mark.parametrize(("behavior", "level"), [("warn", logging.WARNING), ("error", logging.ERROR)])
def test_updates_are_dropped_with_the_invalid_op_behavior(
    behavior: str, level: int, caplog: pytest.LogCaptureFixture
) -> None:
    t = configured(EventRouter, **{"table.op.invalid.behavior": behavior})
    with caplog.at_level(logging.WARNING, logger="sluice.transforms.outbox"):
        assert t.apply(change("u", row(), before=row())) is None
    assert [r.levelno for r in caplog.records] == [level]
    assert "update of the outbox table" in caplog.records[0].getMessage()


def test_fatal_invalid_op_fails() -> None:
    t = configured(EventRouter, **{"table.op.invalid.behavior": "fatal"})
    with pytest.raises(ConnectError, match="fatal"):
        t.apply(change("u", row(), before=row()))


def test_missing_columns() -> None:
    with pytest.raises(DataError, match="'nope'"):
        configured(EventRouter, **{"table.field.event.id": "nope"}).apply(change("c", row()))
    placed = {"table.fields.additional.placement": "nope:header"}
    with pytest.raises(DataError, match="'nope'"):
        configured(EventRouter, **placed).apply(change("c", row()))
    lenient = configured(EventRouter, **placed, **{"table.fields.additional.error.on.missing": "false"})
    assert lenient.apply(change("c", row())).headers == (("id", "e-1"),)


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("table.fields.additional.placement", "type:body"),
        ("table.op.invalid.behavior", "ignore"),
        ("route.topic.regex", "(unclosed"),
        ("route.topic.replacement", "x.${open"),
    ],
)
def test_bad_settings_name_their_key(key: str, bad: str) -> None:
    with pytest.raises(ConfigError) as caught:
        configured(EventRouter, **{key: bad})
    assert caught.value.key == key or key in (caught.value.problems or {})


def test_java_named_groups_translate() -> None:
    assert java_regex("(?<routedByValue>.*)") == "(?P<routedByValue>.*)"
    assert java_regex("(?<=a)(?<!b)x") == "(?<=a)(?<!b)x"  # lookbehinds stay


def test_registered_under_debeziums_class_name() -> None:
    assert BUILTIN_TRANSFORMS["EventRouter"] is EventRouter
    for name in ("io.debezium.transforms.outbox.EventRouter", "EventRouter"):
        found = PluginRegistry().find(name, [PluginKind.TRANSFORMATION])
        assert found is not None and found.cls is EventRouter
