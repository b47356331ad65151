"""The Debezium keys that change the data: parsing, hstore, unknown types, money, custom keys."""

from __future__ import annotations

import decimal

import pytest

from sluice.connectors.api import ConfigError, Type
from sluice.connectors.source.postgres_cdc import catalog
from sluice.connectors.source.postgres_cdc import type_registry as registry
from sluice.connectors.source.postgres_cdc import types as t
from sluice.connectors.source.postgres_cdc.config import POSTGRES_CDC_UNIMPLEMENTED_KEYS, PostgresCdcConfig
from sluice.connectors.source.postgres_cdc.tables import Column, Table

HONOURED = (
    "hstore.handling.mode", "include.unknown.datatypes", "message.key.columns", "slot.max.retries",
    "slot.retry.delay.ms", "unavailable.value.placeholder", "money.fraction.digits",
)  # fmt: skip


def config(**extra: str) -> PostgresCdcConfig:
    return PostgresCdcConfig.parse({"database.dbname": "db", "topic.prefix": "p", **extra})


def test_the_keys_are_honoured_with_debeziums_defaults() -> None:
    assert not set(HONOURED) & set(POSTGRES_CDC_UNIMPLEMENTED_KEYS)
    assert set(HONOURED) <= PostgresCdcConfig.known_keys()
    cfg = config()
    assert (cfg.hstore_handling_mode, cfg.include_unknown_datatypes, cfg.message_key_columns) == ("json", False, "")
    assert (cfg.slot_max_retries, cfg.slot_retry_delay_ms, cfg.money_fraction_digits) == (6, 10_000, 2)
    assert cfg.placeholder_bytes == b"__debezium_unavailable_value"
    assert config(**{"unavailable.value.placeholder": "hex:00ff"}).placeholder_bytes == b"\x00\xff"


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("message.key.columns", "public.orders"),  # no columns
        ("message.key.columns", "public.orders:a:b"),
        ("message.key.columns", "public.(orders:id"),  # not a regex
        ("unavailable.value.placeholder", "hex:abc"),
        ("hstore.handling.mode", "text"),
        ("slot.max.retries", "-1"),
    ],
)
def test_bad_values_name_their_key(key: str, bad: str) -> None:
    with pytest.raises(ConfigError) as caught:
        config(**{key: bad})
    assert key in str(caught.value) or caught.value.key == key or key in caught.value.problems


def test_message_key_columns_follow_debeziums_format() -> None:
    cfg = config(**{"message.key.columns": r" public\.ORDERS : Region, cust.* ; (.*)\.items:sku ;"})
    columns = ["id", "customer", "region", "custom"]
    # Column regexes in the listed order, each adding its matches in table order; case-insensitive.
    assert catalog.message_key(cfg, "public", "orders", columns) == ["region", "customer", "custom"]
    assert catalog.message_key(cfg, "shop", "items", ["id", "sku"]) == ["sku"]
    assert catalog.message_key(cfg, "public", "other", columns) is None  # the primary key
    assert catalog.message_key(config(), "public", "orders", columns) is None
    with pytest.raises(ConfigError) as caught:
        catalog.message_key(cfg, "public", "orders", ["id", "customer"])
    assert caught.value.key == "message.key.columns"
    assert "'Region'" in str(caught.value) and "public.orders" in str(caught.value)


def test_a_chosen_key_replaces_the_primary_key_in_the_key_only() -> None:
    text = t.column_type(t.TEXT, -1, t.TypeModes())
    integer = t.column_type(t.INT4, -1, t.TypeModes())
    columns = [Column("id", t.INT4, -1, False, integer), Column("region", t.TEXT, -1, True, text)]
    table = Table(1, "public", "orders", columns, ["id"], "f", "p", [True, True], key_columns=["region"])
    assert table.key_schema is not None
    assert [(f.name, f.schema.type, f.schema.optional) for f in table.key_schema.fields] == [("region", Type.STRING, True)]
    row = {"id": 7, "region": None}
    assert table.key_of(row) == {"region": None} and table.pk_of(row) == {"id": 7}
    plain = Table(1, "public", "orders", columns, ["id"], "f", "p", [True, True])
    assert plain.pk_of is plain.key_of and not plain.same_shape(table)


def test_hstore_text_becomes_debeziums_json_or_map() -> None:
    raw = rb'"b"=>"2", "q\"x"=>"y\\z", "none"=>NULL'
    assert registry.parse_hstore(raw) == {"b": "2", 'q"x': "y\\z", "none": None}
    json_type = registry.hstore_type(t.TypeModes())
    assert json_type.schema.name == "io.debezium.data.Json" and json_type.schema.version == 1
    assert json_type.fn(b'"size"=>NULL, "color"=>"red"') == '{"size":null,"color":"red"}'
    assert json_type.fn(b"") == "{}" and json_type.fallback == "{}"
    map_type = registry.hstore_type(t.TypeModes(hstore_handling_mode="map"))
    assert map_type.schema.type is Type.MAP and map_type.schema.value_schema is not None
    assert map_type.schema.value_schema.optional and map_type.fn(b'"a"=>"1"') == {"a": "1"}


def test_hstore_keys_come_in_java_hashmap_order() -> None:
    # The order in which a java.util.HashMap holding these strings iterates them (Debezium builds one).
    assert registry._java_hash("banana") == 2898612069  # -1396355227 as a Java int
    assert registry._hashmap_order(["apple", "banana", "cherry"]) == ["banana", "apple", "cherry"]
    many = [f"k{i}" for i in range(13)]  # more than 12 entries: the table has 32 buckets
    assert registry._hashmap_order(many) == sorted(many, key=lambda k: (registry._java_hash(k) ^ registry._java_hash(k) >> 16) & 31)


def test_unknown_types_become_their_text_as_bytes() -> None:
    as_bytes = registry.unknown_type(t.TypeModes())
    assert as_bytes.schema.type is Type.BYTES and as_bytes.fn(b"0/16B6C50") == b"0/16B6C50"
    as_hex = registry.unknown_type(t.TypeModes(binary_handling_mode="hex"))
    assert as_hex.schema.type is Type.STRING and as_hex.fn(b"0/1") == "302f31"
    assert registry.unknown_type(t.TypeModes(binary_handling_mode="base64")).fn(b"0/1") == "MC8x"
    assert 3904 in registry.TEXT_OIDS and 3220 not in registry.TEXT_OIDS | registry.MAPPED_OIDS  # int4range; pg_lsn


def test_money_fraction_digits_and_the_placeholder() -> None:
    three = t.column_type(t.MONEY, -1, t.TypeModes(money_fraction_digits=3))
    assert three.schema.parameters == {"scale": "3"}
    assert three.fn(b"-$1,234.50") == decimal.Decimal("-1234.500")
    assert t.column_type(t.MONEY, -1, t.TypeModes(money_fraction_digits=1)).fn(b"$0.25") == decimal.Decimal("0.3")
    text = t.column_type(t.TEXT, -1, t.TypeModes())
    blob = t.column_type(t.BYTEA, -1, t.TypeModes())
    assert text.unavailable_as(b"??") == "??" and blob.unavailable_as(b"\x00") == b"\x00"
    assert text.unavailable == t.UNAVAILABLE
