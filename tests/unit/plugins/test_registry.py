from __future__ import annotations

import pytest

from sluice.connectors.api import ConfigError
from sluice.plugins import PluginKind, PluginRegistry


@pytest.fixture(scope="module")
def registry() -> PluginRegistry:
    return PluginRegistry()


@pytest.mark.parametrize(
    "name",
    [
        "FileStreamSource",
        "FileStreamSourceConnector",
        "org.apache.kafka.connect.file.FileStreamSourceConnector",
        "sluice.connectors.source.file.connector.FileStreamSourceConnector",
        "sluice.connectors.source.file.connector:FileStreamSourceConnector",
    ],
)
def test_connectors_resolve_by_every_name_connect_users_write(registry: PluginRegistry, name: str) -> None:
    info = registry.connector(name)
    assert info.kind is PluginKind.SOURCE and info.cls.__name__ == "FileStreamSourceConnector"


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("org.apache.kafka.connect.json.JsonConverter", "JsonConverter"),
        ("org.apache.kafka.connect.storage.StringConverter", "StringConverter"),
        ("org.apache.kafka.connect.converters.ByteArrayConverter", "ByteArrayConverter"),
        ("JsonConverter", "JsonConverter"),
    ],
)
def test_converters_accept_connect_class_names(registry: PluginRegistry, name: str, cls: str) -> None:
    assert registry.converter(name, "value.converter").__name__ == cls


def test_unknown_connector_class_lists_the_known_ones(registry: PluginRegistry) -> None:
    with pytest.raises(ConfigError) as caught:
        registry.connector("io.confluent.connect.hdfs.HdfsSinkConnector")
    message = str(caught.value)
    assert caught.value.key == "connector.class"
    assert "io.confluent.connect.hdfs.HdfsSinkConnector" in message
    assert "FileStreamSink" in message and "FileStreamSource" in message


def test_a_converter_is_not_a_connector(registry: PluginRegistry) -> None:
    with pytest.raises(ConfigError):
        registry.connector("JsonConverter")


def test_listing_has_types_and_versions(registry: PluginRegistry) -> None:
    kinds = {p.kind for p in registry.plugins()}
    assert {PluginKind.SOURCE, PluginKind.SINK, PluginKind.CONVERTER, PluginKind.HEADER_CONVERTER} <= kinds
    assert all(p.version != "unknown" for p in registry.plugins())
    assert {p.kind for p in registry.plugins([PluginKind.SOURCE, PluginKind.SINK])} == {
        PluginKind.SOURCE,
        PluginKind.SINK,
    }
