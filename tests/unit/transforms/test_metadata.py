from __future__ import annotations

import pytest

from sluice.connectors.api import INT64_SCHEMA, ConfigError, DataError, Schema
from sluice.transforms import SetSchemaMetadataKey, SetSchemaMetadataValue

from .support import configured, sink

SCHEMA = Schema.struct([("id", INT64_SCHEMA)], name="old", version=1)


def test_set_schema_name_and_version() -> None:
    out = configured(SetSchemaMetadataValue, schema_name="order-value", schema_version="2").apply(
        sink({"id": 1}, SCHEMA)
    )
    assert out.value_schema == Schema.struct([("id", INT64_SCHEMA)], name="order-value", version=2)
    assert out.value == {"id": 1}
    only_name = configured(SetSchemaMetadataKey, schema_name="k").apply(sink("v", key=1, key_schema=INT64_SCHEMA))
    assert only_name.key_schema == INT64_SCHEMA.with_(name="k") and only_name.key == 1


def test_set_schema_metadata_on_tombstone_and_schemaless() -> None:
    out = configured(SetSchemaMetadataValue, schema_version=3).apply(sink(None, SCHEMA))
    assert out.value is None and out.value_schema == SCHEMA.with_(version=3)
    with pytest.raises(DataError, match="SetSchemaMetadata.*schema is required"):
        configured(SetSchemaMetadataValue, schema_name="x").apply(sink({"id": 1}))
    with pytest.raises(ConfigError, match="Neither schema name nor version"):
        configured(SetSchemaMetadataValue)
