"""The JDBC sink's raw fast path with ``pk.mode=record_key``, against real PostgreSQL: keyed batches
(a CDC topic's shape: keys and values JSON with schemas, or Avro) land exactly as the decoded path
writes them.

Each case builds the same consumed keys and values into batches with the runtime's own builder
(:class:`~sluice.worker.runners.sink_batches.SinkBatchBuilder`) twice, and writes them into two
tables the sink creates (``auto.create``): once as the runtime hands them to a ``raw_typed`` task
(raw values and raw keys, so the fast path may take them) and once decoded up front (so only the
ordinary path can). The tables must hold the same rows, compared through PostgreSQL's text form of
each row. The first batch a task writes to a table takes the ordinary path (it reads the column
types), so each case writes a one-record batch first; after that the fast path must have taken
every batch it can (``records_from_json``), so a case cannot pass by falling back.
"""

from __future__ import annotations

import random
import uuid
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
import pytest

from sluice.connectors.api import Converter, SinkRecordBatch, TopicPartition, UnusableRawValues
from sluice.connectors.sink.jdbc.task import JdbcSinkTask
from sluice.converters import json_arrow
from sluice.converters.avro import AvroConverter
from sluice.converters.header import SimpleHeaderConverter
from sluice.converters.json import JsonConverter
from sluice.worker.runners.sink_batches import ReadColumns, SinkBatchBuilder
from tests.envelope_batches import envelope, random_field, random_payload, random_payload_value
from tests.integration.jdbc_fast_pair import FastAndDecoded, pairs
from tests.integration.jdbc_helpers import sql

TOPIC = "cdc"
Message = tuple[bytes | None, bytes | None]  # (key, value) as consumed


def _json_converter(is_key: bool) -> JsonConverter:
    converter = JsonConverter()
    converter.configure({"schemas.enable": "true"}, is_key)
    return converter


_HEADERS = SimpleHeaderConverter()
_HEADERS.configure({})
_KEYS, _VALUES = _json_converter(True), _json_converter(False)

#: Key shapes: the key schema's fields (a struct), or one primitive type ("primitive-…").
KEYS = {
    "int64": [("id", "int64")],
    "int32": [("id", "int32")],
    "string": [("id", "string")],
    "two-fields": [("id", "int64"), ("region", "string")],
    "primitive-int64": [("id", "int64")],
    "primitive-string": [("id", "string")],
}


def _key_schema(shape: str) -> dict[str, Any]:
    fields = KEYS[shape]
    if shape.startswith("primitive-"):
        return {"type": fields[0][1], "optional": False}
    members = [{"field": name, "type": kind, "optional": False} for name, kind in fields]
    return {"type": "struct", "fields": members, "optional": False, "name": "key"}


def _key_payloads(rng: random.Random, shape: str, count: int, taken: set[Any]) -> list[Any]:
    """``count`` distinct key payloads of ``shape``, none of them in ``taken`` (which grows)."""
    payloads: list[Any] = []
    while len(payloads) < count:
        fields = {name: random_payload_value(rng, {"type": kind}) for name, kind in KEYS[shape]}
        identity = tuple(fields.values())
        if identity in taken:
            continue
        taken.add(identity)
        payloads.append(fields["id"] if shape.startswith("primitive-") else fields)
    return payloads


_PLAIN = ("int32", "int64", "double", "boolean", "string")


def _value_schema(rng: random.Random, shape: str, key_in_value: bool, plain: bool = False) -> dict[str, Any]:
    """Ten random fields (no float32: written from its double's text, left to the ordinary path;
    ``plain``: no logical types or bytes either), and the key's fields first when ``key_in_value``
    (a change event's row has its key too)."""
    fields = []
    while len(fields) < 10:
        field = random_field(rng, len(fields))
        if field["type"] != "float" and not (plain and (field["type"] not in _PLAIN or "name" in field)):
            fields.append(field)
    if key_in_value:
        fields[:0] = [{"field": name, "type": kind, "optional": False} for name, kind in KEYS[shape]]
    return {"type": "struct", "fields": fields, "optional": False, "name": "row"}


def _messages(
    rng: random.Random, key_schema: dict[str, Any], value_schema: dict[str, Any], keys: Sequence[Any]
) -> list[Message]:
    out: list[Message] = []
    for key in keys:
        payload = random_payload(rng, value_schema)
        for name in (f["field"] for f in value_schema["fields"]):
            if isinstance(key, dict) and name in key:
                payload[name] = key[name]
            elif not isinstance(key, dict) and name == "id":
                payload[name] = key
        out.append((envelope(key_schema, key), envelope(value_schema, payload)))
    return out


class Pair(FastAndDecoded[Message]):
    """Two tables written with the same messages: raw (the fast path may take them) and decoded."""

    def __init__(self, url: str, keys: Converter, values: Converter) -> None:
        super().__init__(url, TOPIC, {"auto.create": "true", "pk.mode": "record_key"})
        self.builder = SinkBatchBuilder(keys, values, _HEADERS)

    def batch(self, messages: Sequence[Message], first_offset: int, *, raw: bool) -> SinkRecordBatch:
        """The batch the runtime builds: for a ``raw_typed`` task (``raw``) or a decoded one."""
        n = len(messages)
        consumed = ReadColumns([0] * n, range(first_offset, first_offset + n), [None] * n, [None] * n)
        keys, values = [k for k, _ in messages], [v for _, v in messages]
        if not raw:
            return self.builder.build(TOPIC, keys, values, consumed)
        value_wire, key_wire = self.builder.value_converter.wire_format(), self.builder.key_converter.wire_format()
        return self.builder.build(TOPIC, keys, values, consumed, value_wire, key_wire)

    def write(self, batches: Sequence[Sequence[Message]], **config: str) -> JdbcSinkTask:
        def make(messages: Sequence[Message], offset: int, raw: bool) -> SinkRecordBatch:
            batch = self.batch(messages, offset, raw=raw)
            assert (batch.raw_keys is not None) is raw
            return batch

        return self.write_with(make, batches, config)


@pytest.fixture
def pair(postgres_db: str) -> Iterator[Any]:
    if not json_arrow.available():
        pytest.fail("sluice_native is not installed: `make setup` builds it from native/ (needs cargo)")
    yield from pairs(lambda keys=_KEYS, values=_VALUES: Pair(postgres_db, keys, values))


def _rounds(
    rng: random.Random, shape: str, upsert: bool, key_in_value: bool, plain: bool = False
) -> list[list[Message]]:
    """A one-record batch, then three of 100 records with distinct keys each; with ``upsert``
    later batches rewrite keys of earlier ones, else every key is new."""
    key_schema, value_schema = _key_schema(shape), _value_schema(rng, shape, key_in_value, plain)
    taken: set[Any] = set()
    pool = _key_payloads(rng, shape, 150, taken) if upsert else []
    rounds = []
    for size in (1, 100, 100, 100):
        keys = rng.sample(pool, size) if upsert else _key_payloads(rng, shape, size, taken)
        rounds.append(_messages(rng, key_schema, value_schema, keys))
    return rounds


@pytest.mark.parametrize("key_in_value", [True, False], ids=["key-in-value", "value-only"])
@pytest.mark.parametrize("mode", ["insert", "upsert"])
@pytest.mark.parametrize("shape", list(KEYS))
def test_keyed_batches_land_exactly_as_decoded(pair: Any, shape: str, mode: str, key_in_value: bool) -> None:
    rng = random.Random(zlib.crc32(f"{shape}/{mode}/{key_in_value}".encode()))
    rounds = _rounds(rng, shape, mode == "upsert", key_in_value)
    config = {"insert.mode": mode}
    if shape == "primitive-string":
        config["pk.fields"] = "id"  # the column's name (primitive-int64 keeps the default, __connect_key)
    p = pair()
    fast = p.write(rounds, **config)
    rows = p.assert_same()
    assert len(rows) == (301 if mode == "insert" else len({m[0] for r in rounds for m in r}))
    assert fast.records_from_json == 300


def test_pk_fields_name_some_fields_of_a_struct_key(pair: Any) -> None:
    rng = random.Random(7)
    rounds = _rounds(rng, "two-fields", True, True)
    p = pair()
    fast = p.write(rounds, **{"insert.mode": "upsert", "pk.fields": "region,id"})
    p.assert_same()
    assert fast.records_from_json == 300


def test_tombstones_and_repeated_keys_send_their_batch_the_decoded_way(pair: Any) -> None:
    """A batch with a tombstone (a delete, with ``delete.enabled``) goes the ordinary way, and the
    batch after it the fast way again; so does a batch with a key twice (upsert keeps the last)."""
    rng = random.Random(11)
    rounds = _rounds(rng, "int64", True, True)
    later = {k for r in rounds[2:] for k, _ in r}
    deleted = next(k for k, _ in rounds[1] if k not in later)
    with_tombstone = [*rounds[2][:50], (deleted, None), *rounds[2][50:]]
    repeated = [*rounds[3], (rounds[3][0][0], rounds[3][5][1])]
    p = pair()
    fast = p.write(
        [rounds[0], rounds[1], with_tombstone, rounds[2], repeated],
        **{"insert.mode": "upsert", "delete.enabled": "true"},
    )
    p.assert_same()
    assert fast.records_from_json == 100 + 100  # rounds[1], rounds[2]: not the tombstone's nor the repeated key's
    gone = orjson.loads(deleted)["payload"]["id"]  # type: ignore[arg-type]
    assert sql(p.url, f'SELECT count(*) FROM "{p.fast_table}" WHERE id = {gone}') == [(0,)]


def test_a_key_that_does_not_convert_is_given_back_to_the_runtime(pair: Any) -> None:
    """The fast path cannot read the batch (a key of another JSON type), nor can the converter:
    nothing of the batch is written, and it is given back from its first record so that the
    runtime delivers it again decoded, record by record."""
    rng = random.Random(5)
    rounds = _rounds(rng, "int64", False, False)
    bad = list(rounds[1])
    bad[3] = (b'{"schema":{"type":"struct","fields":[{"field":"id","type":"int64","optional":false}],'
              b'"optional":false,"name":"key"},"payload":{"id":"three"}}', bad[3][1])  # fmt: skip
    p = pair()
    task = p.task(p.fast_table, {})
    task.put(p.batch(rounds[0], 0, raw=True))
    task.put(p.batch(bad, 1, raw=True))  # the helper cannot take it, nor can the ordinary path
    with pytest.raises(UnusableRawValues) as given_back:
        task.put(p.batch(rounds[2], 101, raw=True))
    assert given_back.value.offsets == {TopicPartition(TOPIC, 0): 1}
    assert task.pre_commit({TopicPartition(TOPIC, 0): 201}) == {TopicPartition(TOPIC, 0): 1}
    assert len(p.rows(p.fast_table)) == 1


@pytest.fixture
def avro(schema_registry: Any) -> Iterator[tuple[AvroConverter, AvroConverter]]:
    converters = AvroConverter(), AvroConverter()
    for converter, is_key in zip(converters, (True, False)):
        converter.configure({"schema.registry.url": schema_registry.url}, is_key)
    yield converters
    for converter in converters:
        converter.close()


@pytest.mark.parametrize("shape", ["int64", "two-fields", "primitive-int64", "primitive-string"])
def test_avro_keys_land_exactly_as_decoded(pair: Any, avro: tuple[AvroConverter, AvroConverter], shape: str) -> None:
    """Keyed rows of plain fields as Avro with a registry (a topic of its own per case: subjects
    are per topic), struct keys read as records and primitive keys as a record of one field."""
    rng = random.Random(zlib.crc32(shape.encode()))
    rounds = _rounds(rng, shape, True, True, plain=True)
    keys, values = avro
    p = pair(keys, values)
    topic = f"avro_{uuid.uuid4().hex[:8]}"
    as_avro = []
    for messages in rounds:
        key_schemas, key_data = _KEYS.to_connect_batch(topic, [k for k, _ in messages])
        schemas, data = _VALUES.to_connect_batch(topic, [v for _, v in messages])
        as_avro.append(
            list(
                zip(
                    keys.from_connect_batch(topic, key_schemas, key_data),
                    values.from_connect_batch(topic, schemas, data),
                )
            )
        )
    fast = p.write(as_avro, **{"insert.mode": "upsert"})
    p.assert_same()
    assert fast.records_from_json == 300
