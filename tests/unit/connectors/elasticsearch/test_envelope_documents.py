"""Documents and ids from raw JsonConverter envelopes (written natively) against those from the
decoded keys and values.

A batch the runtime hands over raw (JsonConverter with ``schemas.enable=true``, no transform) must
give the bulk payloads, rejections and skips a batch of the same records decoded gives, byte for
byte, whatever the write method, ids, tombstones and schemas; the native reader only saves the
decoding. Where it cannot (a nested field, a struct key, an envelope written unusually), the batch
is decoded, with the same result.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
import struct
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from sluice.connectors.api import SinkRecordBatch, UnusableRawValues
from sluice.connectors.sink.elasticsearch import envelopes
from sluice.connectors.sink.elasticsearch.config import ElasticsearchSinkConfig
from sluice.connectors.sink.elasticsearch.documents import ActionBuilder, Built, Target, document_bytes
from sluice.converters.header import SimpleHeaderConverter
from sluice.converters.json import JsonConverter
from sluice.worker.runners.sink_batches import ReadColumns, SinkBatchBuilder
from tests.envelope_batches import DATE, DECIMAL, TIME, TIMESTAMP, envelope, random_payload, random_schema
from tests.unavailable import unavailable

TOPIC = "orders"
Message = tuple[bytes | None, bytes | None]  # (key, value) as consumed
INT64_KEY = {"type": "int64", "optional": False}


class CountingConverter(JsonConverter):
    """JsonConverter (schemas enabled) that counts the batches it decodes."""

    def __init__(self, **settings: str) -> None:
        super().__init__()
        self.configure({"schemas.enable": "true", **settings})
        self.decoded = 0

    def to_connect_batch(self, topic: str, datas: Sequence[bytes | None]) -> tuple[list[Any], list[Any]]:
        self.decoded += 1
        return super().to_connect_batch(topic, datas)


@pytest.fixture(autouse=True)
def _native() -> None:
    if not envelopes.available():
        unavailable("sluice_native is not installed: `make setup` builds it from native/ (needs cargo)")


def _raw_batch(messages: Sequence[Message], **value_settings: str) -> tuple[SinkRecordBatch, SinkBatchBuilder]:
    """The messages as the runtime hands them to a ``raw_typed`` task, and the batch builder."""
    keys, values = CountingConverter(), CountingConverter(**value_settings)
    headers = SimpleHeaderConverter()
    headers.configure({})
    builder = SinkBatchBuilder(keys, values, headers)
    raw_keys, raw_values = [k for k, _ in messages], [v for _, v in messages]
    return builder.build(TOPIC, raw_keys, raw_values, _consumed(len(messages)), values.wire_format(), keys.wire_format()), builder


def _consumed(n: int) -> ReadColumns:
    return ReadColumns([i % 2 for i in range(n)], list(range(n)), [1_700_000_000_000] * n, [None] * n)


def _batches(messages: Sequence[Message], **value_settings: str) -> tuple[SinkRecordBatch, SinkRecordBatch, list[CountingConverter]]:
    """The same messages as the runtime hands them to a ``raw_typed`` task, and decoded; the
    converters count only what the raw batch decodes."""
    raw, builder = _raw_batch(messages, **value_settings)
    decoded = builder.build(TOPIC, [k for k, _ in messages], [v for _, v in messages], _consumed(len(messages)))
    converters = [builder.key_converter, builder.value_converter]
    for converter in converters:
        assert isinstance(converter, CountingConverter)
        converter.decoded = 0
    return raw, decoded, converters  # type: ignore[return-value]


def _build(batch: SinkRecordBatch, **settings: str) -> Built:
    cfg = ElasticsearchSinkConfig.parse({"connection.url": "http://h:9200", **settings})
    return ActionBuilder(cfg, 3).build(TOPIC, batch, Target("idx"))


def _same(raw: SinkRecordBatch, decoded: SinkRecordBatch, **settings: str) -> Built:
    fast, slow = _build(raw, **settings), _build(decoded, **settings)
    assert fast.payloads == slow.payloads
    assert [(r.index, r.reason, r.null) for r in fast.rejected] == [(r.index, r.reason, r.null) for r in slow.rejected]
    assert fast.skipped == slow.skipped
    return fast


def _key(schema: dict[str, Any], payload: Any) -> bytes:
    """An envelope of any payload (a key's, or a null)."""
    return orjson.dumps({"schema": schema, "payload": payload})


def _random_messages(rng: random.Random, rows: int, schemas: int = 1, replace_null: bool = True) -> list[Message]:
    """Records of ``schemas`` random flat struct schemas (a schema change every rows/schemas),
    int64 keys repeating, a tombstone now and then."""
    out: list[Message] = []
    shapes = [random_schema(rng) for _ in range(schemas)]
    for i in range(rows):
        schema = shapes[i * schemas // rows]
        key = _key(INT64_KEY, rng.choice([i % 40, -i, 2**63 - 1 - i]))
        value = None if i % 29 == 7 else envelope(schema, random_payload(rng, schema, replace_null=replace_null))
        out.append((key, value))
    return out


SETTINGS = [
    {},
    {"write.method": "upsert"},
    {"behavior.on.null.values": "delete"},
    {"behavior.on.null.values": "fail"},
    {"key.ignore": "true", "behavior.on.null.values": "ignore"},
    {"use.autogenerated.ids": "true", "behavior.on.null.values": "ignore"},
]


@pytest.mark.parametrize("settings", SETTINGS)
def test_raw_envelopes_make_the_decoded_batches_payloads_without_decoding(settings: dict[str, str]) -> None:
    for seed in range(6):
        rng = random.Random(seed)
        raw, decoded, converters = _batches(_random_messages(rng, 300, schemas=1 + seed % 3))
        built = _same(raw, decoded, **settings)
        assert built.count > 0
        assert [c.decoded for c in converters] == [0, 0]  # neither keys nor values were decoded


def test_without_replacing_nulls_by_defaults_the_same_documents() -> None:
    rng = random.Random(7)
    raw, decoded, converters = _batches(
        _random_messages(rng, 300, schemas=2, replace_null=False), **{"replace.null.with.default": "false"}
    )
    _same(raw, decoded)
    assert [c.decoded for c in converters] == [0, 0]


def _decimal_base64(unscaled: int) -> str:
    """Connect's Decimal bytes (as short as Java's ``BigInteger.toByteArray``) in base64."""
    size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


def _double_bits(rng: random.Random) -> float:
    while True:
        x: float = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if x == x and abs(x) != float("inf"):
            return x


def _java_double(x: float) -> str:
    """A double as Java's ``Double.toString`` would roughly write it (exponent form with ``E``)."""
    text = repr(x)
    if "e" in text:
        mantissa, exponent = text.split("e")
        return f"{mantissa if '.' in mantissa else mantissa + '.0'}E{int(exponent)}"
    return text


def test_numbers_decimals_and_times_at_their_edges() -> None:
    rng = random.Random(11)
    fields = [
        {"field": "d", "type": "double", "optional": True},
        {"field": "f", "type": "float", "optional": True},
        {"field": "amount", "type": "bytes", "name": DECIMAL, "optional": True, "parameters": {"scale": "2"}},
        {"field": "big", "type": "bytes", "name": DECIMAL, "optional": True, "parameters": {"scale": "30"}},
        {"field": "whole", "type": "bytes", "name": DECIMAL, "optional": True, "parameters": {"scale": "0"}},
        {"field": "at", "type": "int64", "name": TIMESTAMP, "optional": True},
        {"field": "day", "type": "int32", "name": DATE, "optional": True},
        {"field": "t", "type": "int32", "name": TIME, "optional": True},
        {"field": "b", "type": "bytes", "optional": True},
        {"field": "s", "type": "string", "optional": True},
    ]
    schema = orjson.dumps({"type": "struct", "fields": fields, "optional": False})
    doubles = [0.0, -0.0, 1.0, 1e15, 1e16, 1e-5, 1e-6, 5e-324, 1.7976931348623157e308, 0.1 + 0.2, 2.5e-7, 123456789.0]
    doubles += [_double_bits(rng) for _ in range(400)] + [rng.uniform(-1e9, 1e9) for _ in range(200)]
    decimals = [0, 1, -1, 5, -50, 10**15 - 1, 10**15, 10**17 + 3, -(10**20), 2**127 - 1, -(2**127)]
    decimals += [rng.randrange(-(10**18), 10**18) for _ in range(200)] + [rng.randrange(-999, 999) for _ in range(50)]
    stamps = [0, -1, 1, -62_135_596_800_000, 253_402_300_799_999, 2_147_483_648_000, -2_208_988_800_001]
    stamps += [rng.randrange(-(2**41), 2**42) for _ in range(100)]
    strings = ['plain', 'quote " and \\ back', "tab\tnew\nline", "\u001b esc", "é€😀", "\u2028", ""]
    messages: list[Message] = []
    for i, x in enumerate(doubles):
        unscaled = decimals[i % len(decimals)]
        b64 = _decimal_base64(unscaled)
        members = [
            f'"d":{_java_double(x) if i % 2 else repr(x)}',
            f'"f":{orjson.dumps(float(struct.unpack("<f", struct.pack("<f", x if abs(x) < 3e38 else 1.5))[0])).decode()}',
            f'"amount":"{b64}"',
            f'"big":"{b64}"',
            f'"whole":"{b64}"',
            f'"at":{stamps[i % len(stamps)]}',
            f'"day":{[0, -1, -719_162, 2_932_896, 24_855, -25_000][i % 6]}',
            f'"t":{[0, 1, 86_399_999, 45_296_789, 1000][i % 5]}',
            f'"b":"{base64.b64encode(bytes(range(i % 7))).decode()}"',
            f'"s":{orjson.dumps(strings[i % len(strings)]).decode()}',
        ]
        messages.append((_key(INT64_KEY, i), b'{"schema":' + schema + b',"payload":{' + ",".join(members).encode() + b"}}"))
    # Jackson's spellings: non-finite doubles as strings, escapes orjson would not write.
    special = [
        '"d":"NaN","f":"Infinity"',
        '"d":"-Infinity","s":"\\u001B\\uD83D\\uDE00\\/x"',
        '"d":1E2,"f":-0,"s":"\\u00e9"',
        '"d":1.0E-7,"f":7',
    ]
    for j, spelled in enumerate(special):
        value = b'{"schema":' + schema + b',"payload":{' + spelled.encode() + b"}}"
        messages.append((_key(INT64_KEY, 10_000 + j), value))
    raw, decoded, converters = _batches(messages)
    _same(raw, decoded)
    assert [c.decoded for c in converters] == [0, 0]


STRING_KEY = {"type": "string", "optional": True}


def test_keys_of_other_schemas() -> None:
    value_schema = random_schema(random.Random(3))
    rng = random.Random(4)

    def value() -> bytes:
        return envelope(value_schema, random_payload(rng, value_schema))

    int8_key = {"type": "int8", "optional": False}
    messages: list[Message] = [
        (_key(STRING_KEY, "a"), value()),
        (_key(STRING_KEY, "é\n\"x\""), value()),
        (_key(STRING_KEY, None), value()),  # a null key: refused as an id, record by record
        (None, value()),
        (_key(int8_key, -128), value()),
        (b'{"schema":{"type":"int32","optional":false},"payload":-0}', value()),
        (b' {"schema" : {"optional":false,"type":"int64"} , "payload" : 42 } ', value()),
    ]
    raw, decoded, converters = _batches(messages)
    built = _same(raw, decoded)
    assert len(built.rejected) == 2
    assert [c.decoded for c in converters] == [0, 0]


@pytest.mark.parametrize(
    "key",
    [
        envelope({"type": "struct", "fields": [{"field": "id", "type": "int64"}], "optional": False}, {"id": 1}),
        _key({"type": "int32", "name": DATE, "optional": False}, 5),
        _key({"type": "boolean", "optional": False}, True),
        _key({"type": "int64", "optional": True, "default": 7}, None),
    ],
    ids=["struct", "date", "boolean", "null-with-default"],
)
def test_keys_that_are_decoded_give_the_decoded_ids_or_rejections(key: bytes) -> None:
    """Confluent's sink takes only primitive keys as ids; Sluice keeps its decoded path's answer
    (a struct key is refused, record by record) whatever comes raw."""
    schema = random_schema(random.Random(5))
    messages: list[Message] = [(key, envelope(schema, random_payload(random.Random(i), schema))) for i in range(5)]
    raw, decoded, converters = _batches(messages)
    _same(raw, decoded)
    assert converters[0].decoded == 1


NESTED = {
    "type": "struct",
    "optional": False,
    "fields": [
        {"field": "id", "type": "int64"},
        {"field": "tags", "type": "array", "items": {"type": "string"}},
    ],
}
FLAT = {"type": "struct", "optional": False, "fields": [{"field": "id", "type": "int64"}, {"field": "n", "type": "int8"}]}
FLAT_TEXT = orjson.dumps(FLAT)
WIDE = {
    "type": "struct",
    "optional": False,
    "fields": [{"field": "x", "type": "bytes", "name": DECIMAL, "parameters": {"scale": "3"}}],
}


@pytest.mark.parametrize(
    "value",
    [
        envelope(NESTED, {"id": 1, "tags": ["a"]}),
        b'{"payload":{"id":1,"n":2},"schema":' + FLAT_TEXT + b"}",  # payload first
        b'{"schema":' + FLAT_TEXT + b',"payload":{"id":1,"n":2,"n":3}}',  # a duplicate member
        b'{"schema":' + FLAT_TEXT + b',"payload":{"id":1.0,"n":2}}',  # an integral double
        _key({**FLAT, "optional": True}, None),  # a null struct: the decoded value is a tombstone
        b'{"schema":null,"payload":{"id":1}}',
        envelope(WIDE, {"x": _decimal_base64(-(2**130) + 7)}),  # wider than 128 bits
    ],
    ids=["nested", "payload-first", "duplicate", "integral-double", "null-payload", "no-schema", "wide-decimal"],
)
def test_values_the_reader_does_not_take_are_decoded_with_the_same_documents(value: bytes) -> None:
    flat = envelope(FLAT, {"id": 5, "n": -3, "other": {"x": [1, 2]}})  # unknown members are ignored
    messages: list[Message] = [(_key(INT64_KEY, 1), flat), (_key(INT64_KEY, 2), value)]
    raw, decoded, converters = _batches(messages)
    _same(raw, decoded)
    assert converters[1].decoded == 1


def test_a_value_the_converter_refuses_gives_the_raw_batch_back() -> None:
    """What the decoded path cannot convert, the raw path does not write either: reading the batch
    raises UnusableRawValues, and the runtime delivers its records again decoded, under errors.*."""
    messages: list[Message] = [
        (_key(INT64_KEY, 1), envelope(FLAT, {"id": 1, "n": 2})),
        (_key(INT64_KEY, 2), envelope(FLAT, {"id": 2, "n": 300})),  # out of int8's range
    ]
    raw, _ = _raw_batch(messages)
    with pytest.raises(UnusableRawValues):
        _build(raw)


def test_times_keep_the_leading_zeros_of_their_fraction() -> None:
    """Both paths write 80 ms past a second as ``.080000``: orjson alone writes a ``time`` with
    10,000-99,999 µs as ``.80000``, which the index's time format refuses."""
    assert document_bytes({"t": dt.time(6, 26, 46, 80_000)}) == b'{"t":"06:26:46.080000"}'
    schema = {"type": "struct", "optional": False, "fields": [{"field": "t", "type": "int32", "name": TIME}]}
    messages: list[Message] = [(_key(INT64_KEY, ms), envelope(schema, {"t": ms})) for ms in (80, 10, 99, 100, 0, 5)]
    raw, decoded, _ = _batches(messages)
    payloads = [payload for lane in _same(raw, decoded).payloads for payload in lane]
    assert any(payload.endswith(b'"_id":"80"}}\n{"t":"00:00:00.080000"}\n') for payload in payloads)
