"""``JsonData``, the JsonConverter's writing side that connectors use without the plugin: the same
bytes as Kafka Connect's JsonConverter for every recorded vector, and the converter's settings."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from sluice.connectors.api import ConfigError, DataError, Schema
from sluice.connectors.api.schema import INT64_SCHEMA
from sluice.converters.json_data import JsonData
from tests.unit.converters.test_json_converter import CASES, VECTOR_LINES, _vector_id


@pytest.mark.parametrize("line", VECTOR_LINES, ids=_vector_id)
def test_bytes_identical_to_kafka_connect(line: dict[str, Any]) -> None:
    schema, value = CASES[line["case"]]
    data = JsonData(line["config"])
    if "error" in line:
        with pytest.raises(DataError) as caught:
            data.value_json(schema, value)
        assert str(caught.value) == line["error"]
        return
    expected = None if line["bytes_b64"] is None else base64.b64decode(line["bytes_b64"])
    assert data.value_json(schema, value) == expected


def test_the_envelope_schema_is_the_one_the_value_carries() -> None:
    schema = Schema.struct([("id", INT64_SCHEMA)], name="shop.Key")
    data = JsonData()
    assert data.value_json(schema, {"id": 7}) == b'{"schema":' + data.as_json_schema(schema) + b',"payload":{"id":7}}'


def test_settings_are_the_converter_keys_and_bad_ones_are_refused() -> None:
    assert JsonData({"decimal.format": "numeric"}).config.decimal_format == "NUMERIC"
    with pytest.raises(ConfigError) as caught:
        JsonData({"schemas.enabled": "false"})
    assert caught.value.key == "schemas.enabled"
