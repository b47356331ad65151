"""Connect's converters as header converters (issue #37): found by their Connect class names, and
writing a header's attached schema as Connect does (``tests/integration/test_unwrap_vectors.py``
compares these bytes with Connect's own)."""

from __future__ import annotations

import pytest

from sluice.connectors.api import (
    OPTIONAL_INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    ConfigError,
    SchemaAndValue,
    header_data,
)
from sluice.converters.bytes import ByteArrayConverter
from sluice.converters.header import SimpleHeaderConverter
from sluice.converters.json import JsonConverter
from sluice.converters.string import StringConverter
from sluice.plugins.registry import PluginKind, PluginRegistry


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry()


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("org.apache.kafka.connect.json.JsonConverter", JsonConverter),
        ("org.apache.kafka.connect.storage.StringConverter", StringConverter),
        ("org.apache.kafka.connect.converters.ByteArrayConverter", ByteArrayConverter),
        ("org.apache.kafka.connect.storage.SimpleHeaderConverter", SimpleHeaderConverter),
        ("JsonConverter", JsonConverter),
    ],
)
def test_connect_class_names_are_header_converters(registry: PluginRegistry, name: str, cls: type) -> None:
    assert registry.header_converter(name, "header.converter") is cls


def test_json_converter_is_listed_as_both_kinds_and_unknown_names_are_refused(registry: PluginRegistry) -> None:
    kinds = {p.kind for p in registry.plugins() if p.cls is JsonConverter}
    assert kinds == {PluginKind.CONVERTER, PluginKind.HEADER_CONVERTER}
    with pytest.raises(ConfigError) as err:
        registry.header_converter("org.example.NoSuchConverter", "header.converter")
    assert err.value.key == "header.converter"
    assert "JsonConverter" in str(err.value) and "SimpleHeaderConverter" in str(err.value)


def test_json_header_converter_writes_the_attached_schema() -> None:
    converter = JsonConverter()
    converter.configure({"converter.type": "header"})
    op = SchemaAndValue(OPTIONAL_STRING_SCHEMA, "c")
    assert (
        converter.from_connect_header("t", "__op", None, op)
        == b'{"schema":{"type":"string","optional":true},"payload":"c"}'
    )
    assert converter.from_connect_header("t", "h", None, "plain") == b'{"schema":null,"payload":"plain"}'
    converter.configure({"converter.type": "header", "schemas.enable": "false"})
    assert converter.from_connect_header("t", "__op", None, op) == b'"c"'
    assert converter.to_connect_header("t", "__op", b'"c"') == SchemaAndValue(None, "c")


def test_other_header_converters_use_the_attached_schema_too() -> None:
    lsn = SchemaAndValue(OPTIONAL_INT64_SCHEMA, 123456)
    assert SimpleHeaderConverter().from_connect_header("t", "__lsn", None, lsn) == b"123456"
    assert StringConverter().from_connect_header("t", "__lsn", None, lsn) == b"123456"
    assert ByteArrayConverter().from_connect_header("t", "b", None, SchemaAndValue(None, b"\x01")) == b"\x01"
    assert header_data(lsn) == 123456 and header_data("x") == "x"
