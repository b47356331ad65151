"""JSON with schemas read into typed Arrow columns: the same table as decoding the records gives."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from sluice.connectors.s3_common.parquet_format import _rows_to_table, arrow_schema
from sluice.converters import json_arrow
from sluice.converters.connect_arrow import EnvelopeReader
from sluice.converters.json import JsonConverter
from tests.envelope_batches import envelope, random_batch, random_payload, random_schema
from tests.unavailable import unavailable

if not json_arrow.available():
    unavailable("the native parser (sluice_native) is not installed: `make setup` builds it from native/ (needs cargo)", allow_module_level=True)


def _decoded(raws: list[bytes], replace_null: bool = True) -> tuple[object, pa.Table]:
    converter = JsonConverter()
    converter.configure({"schemas.enable": True, "replace.null.with.default": replace_null}, False)
    schemas, values = converter.to_connect_batch("t", raws)
    return schemas[0], _rows_to_table(pa, values, arrow_schema(schemas[0]))


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("replace_null", [True, False])
def test_random_batches_read_as_decoding_gives_them(seed: int, replace_null: bool) -> None:
    rng = random.Random(seed)
    _, raws = random_batch(rng, rng.randrange(1, 200), replace_null=replace_null)
    schema, expected = _decoded(raws, replace_null)
    read = EnvelopeReader(replace_null).read(raws)
    assert read is not None, "every generated batch is one the fast path takes"
    table, read_schema = read
    assert read_schema == schema
    assert table.schema == expected.schema
    assert table.equals(expected)


def test_a_record_with_another_schema_sends_the_batch_to_the_decoder() -> None:
    rng = random.Random(7)
    schema, raws = random_batch(rng, 20)
    other = random_schema(rng)
    raws[5] = envelope(other, random_payload(rng, other))
    assert EnvelopeReader().read(raws) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ({"type": "int32", "optional": False}, 2**31),  # out of range: the converter refuses it
        ({"type": "int8", "optional": False}, 1.0),  # an integral double: decoded as 1, not read here
        ({"type": "int64", "optional": False}, None),  # a null in a required field
        ({"type": "string", "optional": True}, 5),  # another JSON type
        ({"type": "bytes", "optional": True}, "not base64!"),
        ({"type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Time"}, 86_400_000),
        (
            {
                "type": "bytes",
                "name": "org.apache.kafka.connect.data.Decimal",
                "parameters": {"scale": "0", "connect.decimal.precision": "2"},
                "optional": True,
            },
            "AQAA",
        ),
        ({"type": "array", "items": {"type": "int32"}, "optional": True}, [1]),
    ],
)
def test_what_decoding_would_refuse_or_read_otherwise_is_left_to_it(field: dict, value: object) -> None:
    schema = {"type": "struct", "fields": [{**field, "field": "x"}], "optional": False}
    assert EnvelopeReader().read([envelope(schema, {"x": value})]) is None


def test_a_member_the_schema_lacks_is_left_to_the_decoder() -> None:
    schema = {"type": "struct", "fields": [{"type": "int32", "optional": False, "field": "x"}], "optional": False}
    assert EnvelopeReader().read([envelope(schema, {"x": 1, "y": 2})]) is None
