"""The JDBC sink's raw fast path on JSON with schemas, against real PostgreSQL: seeded random
batches of every Connect type the sink writes land exactly as the decoded path writes them.

Each case writes the same envelopes (``schemas.enable=true``) twice, into two tables the sink
creates from the schema (``auto.create``): once as the runtime hands them to the task (raw, so the
fast path may take them) and once decoded up front (so only the ordinary path can). The tables
must hold the same rows, compared through PostgreSQL's text form of each row. The first batch a
task writes to a table takes the ordinary path (it reads the column types), so each case writes a
one-record batch first; after that the fast path must have taken the batch unless its schema has
a float32 field (written from its double's text and rounded by the server: left to the ordinary path).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import pytest

from sluice.connectors.api import SinkRecordBatch
from sluice.connectors.sink.jdbc.task import JdbcSinkTask
from sluice.converters import json_arrow
from sluice.converters.avro import AvroConverter
from sluice.converters.json import JsonConverter
from tests.envelope_batches import envelope, random_batch, random_payload, random_schema
from tests.integration.jdbc_fast_pair import FastAndDecoded, pairs

TOPIC = "rows"

_CONVERTER = JsonConverter()
_CONVERTER.configure({"schemas.enable": "true"}, False)


def _batch(raws: Sequence[bytes], first_offset: int, *, raw: bool, converter: Any = _CONVERTER) -> SinkRecordBatch:
    """A consumed batch as the sink runner builds it: raw values and their wire format when ``raw``."""
    raws = list(raws)
    n = len(raws)
    columns = {
        "partition": [0] * n,
        "kafka_offset": list(range(first_offset, first_offset + n)),
        "timestamp": [None] * n,
        "headers": [None] * n,
        "timestamp_type": [0] * n,
    }
    if raw:
        decode = partial(converter.to_connect_batch, TOPIC, raws)
        return SinkRecordBatch(
            TOPIC,
            None,
            None,
            [None] * n,
            [None] * n,
            columns.__getitem__,
            raw_values=raws,
            decode=decode,
            raw_format=converter.wire_format(),
            writer_schema=converter.writer_schema,
        )
    schemas, values = converter.to_connect_batch(TOPIC, raws)
    return SinkRecordBatch(TOPIC, values, schemas, [None] * n, [None] * n, columns.__getitem__)


class Pair(FastAndDecoded[bytes]):
    """Two tables written with the same records: through the fast path (if it applies) and decoded."""

    def __init__(self, url: str) -> None:
        super().__init__(url, TOPIC, {"auto.create": "true"})

    def write(self, batches: Sequence[Sequence[bytes]], converter: Any = _CONVERTER, **config: str) -> JdbcSinkTask:
        return self.write_with(lambda raws, offset, raw: _batch(raws, offset, raw=raw, converter=converter), batches, config)


@pytest.fixture
def pair(postgres_db: str) -> Iterator[Any]:
    if not json_arrow.available():
        pytest.fail("sluice_native is not installed: `make setup` builds it from native/ (needs cargo)")
    yield from pairs(partial(Pair, postgres_db))


def _has_float32(schema: dict[str, Any]) -> bool:
    return any(f["type"] == "float" for f in schema["fields"])


@pytest.mark.parametrize("seed", range(24))
def test_random_batches_land_exactly_as_decoded(pair: Any, seed: int) -> None:
    rng = random.Random(seed)
    schema, raws = random_batch(rng, 300)
    p = pair()
    fast = p.write([raws[:1], raws[1:]])
    rows = p.assert_same()
    assert len(rows) == len(raws)
    if not _has_float32(schema):
        assert fast.records_from_json == len(raws) - 1


@pytest.mark.parametrize("seed", range(6))
def test_upserts_keep_the_last_row_of_each_key_as_decoded(pair: Any, seed: int) -> None:
    rng = random.Random(1000 + seed)
    schema = random_schema(rng)
    schema["fields"].insert(0, {"field": "id", "type": "int64", "optional": False})
    schema["fields"] = [f for f in schema["fields"] if f["type"] != "float"]
    rounds = []
    for r in range(3):  # each batch has distinct keys; later batches rewrite earlier keys
        ids = rng.sample(range(500), 150)
        rounds.append([envelope(schema, {**random_payload(rng, schema), "id": i}) for i in ids])
        del r
    p = pair()
    fast = p.write([rounds[0][:1], *rounds], **{"insert.mode": "upsert", "pk.mode": "record_value", "pk.fields": "id"})
    p.assert_same()
    assert fast.records_from_json >= 300


def test_a_record_with_another_schema_sends_its_batch_the_decoded_way(pair: Any) -> None:
    rng = random.Random(99)
    schema = {
        "type": "struct",
        "optional": False,
        "fields": [
            {"field": "id", "type": "int64", "optional": False},
            {"field": "name", "type": "string", "optional": True},
        ],
    }
    wider = {**schema, "fields": [*schema["fields"], {"field": "extra", "type": "int32", "optional": True}]}
    _, raws = random_batch(rng, 50, schema)
    mixed = list(raws)
    mixed[20] = envelope(wider, {"id": 7, "name": "other", "extra": 3})
    p = pair()
    fast = p.write([raws[:1], mixed], **{"auto.evolve": "true"})
    rows = p.assert_same()
    assert len(rows) == 51
    assert any("other" in row and ",3)" in row for row in rows)  # nothing of the odd record is lost
    assert fast.records_from_json == 0


@pytest.fixture
def avro_converter(schema_registry: Any) -> Iterator[AvroConverter]:
    converter = AvroConverter()
    converter.configure({"schema.registry.url": schema_registry.url}, False)
    yield converter
    converter.close()


@pytest.mark.parametrize("seed", range(12))
def test_avro_batches_land_exactly_as_decoded(pair: Any, avro_converter: AvroConverter, seed: int) -> None:
    """The same random rows as Avro with a registry: the batch is read by the native Avro reader
    when it can decode it exactly (else decoded); the rows are the decoded path's either way."""
    rng = random.Random(500 + seed)
    _, envelopes = random_batch(rng, 200)
    schemas, values = _CONVERTER.to_connect_batch(TOPIC, envelopes)
    raws = avro_converter.from_connect_batch(TOPIC, schemas, values)
    p = pair()
    fast = p.write([raws[:1], raws[1:]], converter=avro_converter)  # type: ignore[list-item]
    assert len(p.assert_same()) == len(raws)
    assert fast.records_from_json in (0, len(raws) - 1)
