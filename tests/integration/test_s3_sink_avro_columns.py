"""The S3 sink's Parquet objects from Avro values read into columns (the native Avro reader, with
the writer schema from a real Schema Registry): byte for byte what decoding the values writes.

The first batch of a schema id is decoded (it tells the sink the value schema decoding gives);
later batches of that id are read into columns when the reader decodes them exactly."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from sluice.converters.avro import AvroConverter
from sluice.converters.json import JsonConverter
from tests.envelope_batches import random_batch
from tests.unit.connectors.s3.test_sink_envelope import _objects

_JSON = JsonConverter()
_JSON.configure({"schemas.enable": "true"}, False)


@pytest.fixture
def avro_converter(schema_registry: Any) -> Iterator[AvroConverter]:
    converter = AvroConverter()
    converter.configure({"schema.registry.url": schema_registry.url}, False)
    yield converter
    converter.close()


@pytest.mark.parametrize("seed", range(10))
def test_avro_batches_make_the_same_parquet_objects_as_decoded(avro_converter: AvroConverter, seed: int) -> None:
    rng = random.Random(700 + seed)
    _, envelopes = random_batch(rng, 1000)
    schemas, values = _JSON.to_connect_batch("t", envelopes)
    raws = avro_converter.from_connect_batch("t", schemas, values)
    batches = [raws[i : i + 250] for i in range(0, 1000, 250)]
    fast, decoded = _objects(batches, raw=True, converter=avro_converter)  # type: ignore[arg-type]
    slow, _ = _objects(batches, raw=False, converter=avro_converter)  # type: ignore[arg-type]
    assert fast and sorted(fast) == sorted(slow)
    for key in slow:
        assert fast[key] == slow[key], key
    assert decoded in (1, 4)  # the first batch of the id, or every batch when the reader declines the schema
