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

    def write(self, batches: Sequence[Sequence[Message]], held: bool = False, **config: str) -> JdbcSinkTask:
        def make(messages: Sequence[Message], offset: int, raw: bool) -> SinkRecordBatch:
            batch = self.batch(messages, offset, raw=raw)
            assert (batch.raw_keys is not None) is raw
            return batch

        return self.write_with(make, batches, config, held=held)


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


class Changes:
    """A CDC topic's records for a key shape: upserts (a random row per key, its key fields in the
    value) and tombstones (the key, a null value)."""

    def __init__(self, rng: random.Random, shape: str, keys: int) -> None:
        self.rng = rng
        self.key_schema, self.value_schema = _key_schema(shape), _value_schema(rng, shape, True)
        self.keys = _key_payloads(rng, shape, keys, set())

    def upserts(self, keys: Sequence[Any]) -> list[Message]:
        return _messages(self.rng, self.key_schema, self.value_schema, keys)

    def tombstones(self, keys: Sequence[Any]) -> list[Message]:
        return [(envelope(self.key_schema, key), None) for key in keys]


def _config(shape: str, **config: str) -> dict[str, str]:
    return {**config, "pk.fields": "id"} if shape == "primitive-string" else config


@pytest.mark.parametrize("mode", ["insert", "upsert"])
def test_repeated_keys_in_a_batch_land_as_decoded(pair: Any, mode: str) -> None:
    """A key several times in one batch: ``upsert`` keeps its last record, in the batch's order;
    ``insert`` writes every record, so the primary key the sink made rejects the repeats, and the
    same records reach the errant record reporter. The fast path takes the batches either way."""
    changes = Changes(random.Random(zlib.crc32(mode.encode())), "int64", 60)
    keys, rng = changes.keys, changes.rng
    repeated = [rng.choice(keys[:20]) for _ in range(100)]
    batches = [changes.upserts(keys[:1]), changes.upserts(repeated)]
    batches.append(changes.upserts([*rng.sample(keys, 60), *keys[:10]]))
    p = pair()
    fast = p.write(batches, **{"insert.mode": mode})
    rows = p.assert_same()
    assert fast.records_from_json == 100 + 70
    if mode == "upsert":
        assert len(rows) == 60
    else:
        reported = [[r.kafka_offset for r, _ in p.reporters[t].reported] for t in (p.fast_table, p.slow_table)]
        assert reported[0] == reported[1] and len(reported[0]) == 101 + 70 - len(rows)


@pytest.mark.parametrize(
    ("shape", "held"),
    [("int64", False), ("two-fields", False), ("primitive-int64", False), ("primitive-string", False), ("int64", True)],
)
def test_tombstones_delete_their_keys_on_the_fast_path(pair: Any, shape: str, held: bool) -> None:
    """``delete.enabled`` in ``upsert`` mode, a CDC topic's shape: the last record of each key in a
    batch decides, an upsert or a delete, whatever came before it. A batch deletes rows written
    earlier, keys written then deleted, deleted then written again, deleted twice, and keys never
    written; another holds tombstones only; in a third every tombstone is followed by its key's row.
    ``held``: the batches are consecutive polls the task joins into one chunk, so the last record of
    a key across them decides."""
    changes = Changes(random.Random(zlib.crc32(shape.encode())), shape, 80)
    keys, upserts, tombstones = changes.keys, changes.upserts, changes.tombstones
    written = upserts(keys[:40])
    mixed = [
        *tombstones(keys[0:5]),
        *upserts(keys[5:10]),
        *tombstones(keys[5:10]),
        *tombstones(keys[10:15]),
        *upserts(keys[10:15]),
        *tombstones(keys[60:65]),
        *upserts(keys[40:50]),
        *tombstones(keys[15:17]),
        *tombstones(keys[15:17]),
    ]
    only_tombstones = tombstones([*keys[20:25], *keys[70:72]])
    rewritten = [*tombstones(keys[30:33]), *upserts(keys[30:33])]
    p = pair()
    batches = [upserts(keys[:1]), written, mixed, only_tombstones, rewritten]
    fast = p.write(batches, held, **_config(shape, **{"insert.mode": "upsert", "delete.enabled": "true"}))
    rows = p.assert_same()
    assert fast.records_from_json == sum(map(len, batches[1:]))
    assert len(rows) == 40 - (5 + 5 + 2 + 5) + 10
    names = [name for name, _ in KEYS[shape]]  # the key's fields, also fields of the value
    ids = [tuple(key[n] for n in names) if isinstance(key, dict) else (key,) for key in keys]
    present = set(sql(p.url, f'SELECT {", ".join(names)} FROM "{p.fast_table}"'))
    assert not present & {*ids[0:10], *ids[15:17], *ids[20:25]}
    assert {*ids[10:15], *ids[30:33], *ids[40:50]} <= present
    assert fast.tombstones_ignored == 0


@pytest.mark.parametrize("mode", ["insert", "upsert"])
def test_tombstones_without_delete_enabled_are_left_out_counted_and_logged(
    pair: Any, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``delete.enabled=false``: the fast path writes the batch without its tombstones, and the
    task counts them and logs their offsets once it commits, as the ordinary path does."""
    changes = Changes(random.Random(zlib.crc32(mode.encode())), "int64", 40)
    keys = changes.keys
    batch = [*changes.upserts(keys[1:10]), *changes.tombstones(keys[1:3])]
    batch += [*changes.upserts(keys[10:20]), *changes.tombstones(keys[30:31])]
    p = pair()
    with caplog.at_level("WARNING"):
        fast = p.write([changes.upserts(keys[:1]), batch], **{"insert.mode": mode})
    assert len(p.assert_same()) == 20
    assert fast.records_from_json == len(batch)
    assert [task.tombstones_ignored for task in p.tasks] == [3, 3]
    logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Ignored")]
    line = f"Ignored 3 tombstone(s) (null values) of topic {TOPIC}, at offsets 10, 11, 22: delete.enabled is false"
    assert logged == [line, line]


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
    task.put(p.batch(bad, 1, raw=True))  # held back ...
    task.put(p.batch([], 101, raw=True))  # ... until the consumer caught up; the helper cannot take it, nor can the ordinary path
    task.put(p.batch(rounds[2], 101, raw=True))  # held back: the helper is not done yet
    with pytest.raises(UnusableRawValues) as given_back:  # writing it finds the chunk before unconvertible
        task.put(p.batch([], 201, raw=True))
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
