"""The catalog the runtime registers: names, aliases, versions and configs of every built-in."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sluice.connectors.api import STRING_SCHEMA, PluginConfig, SinkRecord, SourceRecord
from sluice.transforms import BUILTIN_PREDICATES, BUILTIN_TRANSFORMS, CastValue, ExtractNewRecordState
from sluice.transforms._support import with_key, with_topic, with_value

ENTRY_POINT_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
CONNECT_SMTS = {
    "Cast$Key", "Cast$Value", "DropHeaders", "ExtractField$Key", "ExtractField$Value", "Filter", "Flatten$Key",
    "Flatten$Value", "HeaderFrom$Key", "HeaderFrom$Value", "HoistField$Key", "HoistField$Value",
    "InsertField$Key", "InsertField$Value", "InsertHeader", "MaskField$Key", "MaskField$Value", "RegexRouter",
    "ReplaceField$Key", "ReplaceField$Value", "SetSchemaMetadata$Key", "SetSchemaMetadata$Value",
    "TimestampConverter$Key", "TimestampConverter$Value", "TimestampRouter", "ValueToKey",
}  # fmt: skip


def test_every_connect_smt_is_there_under_its_connect_name() -> None:
    aliases = {alias for cls in BUILTIN_TRANSFORMS.values() for alias in cls.aliases}  # type: ignore[attr-defined]
    assert {f"org.apache.kafka.connect.transforms.{name}" for name in CONNECT_SMTS} <= aliases
    assert "io.debezium.transforms.ExtractNewRecordState" in ExtractNewRecordState.aliases
    assert {cls.aliases[0].rsplit(".", 1)[-1] for cls in BUILTIN_PREDICATES.values()} == {  # type: ignore[attr-defined]
        "TopicNameMatches", "HasHeaderKey", "RecordIsTombstone"
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted({**BUILTIN_TRANSFORMS, **BUILTIN_PREDICATES}))
def test_plugin_metadata(name: str) -> None:
    cls: Any = {**BUILTIN_TRANSFORMS, **BUILTIN_PREDICATES}[name]
    assert ENTRY_POINT_NAME.match(name) and cls.__name__ == name
    assert cls.version == "0.1.0" and cls.__doc__
    assert issubclass(cls.Config, PluginConfig)
    for field in cls.Config.model_fields.values():
        assert field.description, f"{name}.{field.alias} has no description"


def test_variants_report_errors_under_connect_names() -> None:
    assert CastValue().label == "Cast$Value"


@pytest.mark.parametrize("cls", [SourceRecord, SinkRecord])
def test_record_copies_change_only_what_they_name(cls: Any) -> None:
    """The fast copies rely on topic coming first and each schema right after its data."""
    assert cls._fields[0] == "topic"
    assert cls._fields[cls._fields.index("value") + 1] == "value_schema"
    assert cls._fields[cls._fields.index("key") + 1] == "key_schema"
    record = cls(topic="t", value=1, key=2, partition=0, **({"kafka_offset": 5} if cls is SinkRecord else {}))
    assert with_value(record, STRING_SCHEMA, "v") == record.replace(value="v", value_schema=STRING_SCHEMA)
    assert with_key(record, STRING_SCHEMA, "k") == record.replace(key="k", key_schema=STRING_SCHEMA)
    if cls is SinkRecord:
        # A routed sink record keeps the coordinates it was consumed from (KIP-793).
        routed = record.replace(topic="u", original_topic="t", original_partition=0, original_offset=5)
        assert with_topic(record, "u") == routed
        assert with_topic(with_topic(record, "u"), "w") == routed.replace(topic="w")
        assert with_topic(record, "u").topic_partition.topic == "t"
    else:
        assert with_topic(record, "u") == record.replace(topic="u")
    assert type(with_topic(record, "u")) is cls
