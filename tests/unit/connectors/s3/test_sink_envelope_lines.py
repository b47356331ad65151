"""The S3 sink's JSON lines from JSON with schemas taken raw: the payloads' bytes, holding exactly
the JSON values decoding writes (``connectors/sink/s3/envelope_lines.py``).

Every batch is put twice, into two buckets: raw, as the runtime hands it to the task, and decoded up
front. The objects must have the same names and, line by line, the same JSON values (the same
bytes when the envelopes are spelled as JsonConverter spells them); and the raw batches must have
been decoded exactly when a payload's bytes are not what decoding writes.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import random
from typing import Any

import orjson
import pytest

from sluice.connectors.api import (
    INT16_SCHEMA,
    INT64_SCHEMA,
    OPTIONAL_STRING_SCHEMA,
    Schema,
    SinkRecordBatch,
    TopicPartition,
)
from sluice.connectors.api.schema import Date, Decimal, Timestamp
from sluice.connectors.s3_common.storage import MemoryStorage
from sluice.connectors.sink.s3.task import S3SinkTask
from sluice.converters import json_arrow
from sluice.converters.json import JsonConverter
from tests.envelope_batches import DECIMAL, envelope, random_batch, random_payload, random_schema
from tests.unavailable import unavailable
from tests.unit.connectors.s3.test_sink_envelope import _CONVERTER, _objects

if not json_arrow.available():
    unavailable(
        "the native parser (sluice_native) is not installed: `make setup` builds it from native/ (needs cargo)",
        allow_module_level=True,
    )

JSON = {"format.class": "json"}
_KEYS = JsonConverter()
_KEYS.configure({"schemas.enable": "true"}, True)
ROW = {
    "type": "struct",
    "fields": [
        {"type": "int64", "optional": False, "field": "id"},
        {
            "type": "bytes",
            "optional": True,
            "name": DECIMAL,
            "version": 1,
            "parameters": {"scale": "2", "connect.decimal.precision": "12"},
            "field": "amount",
        },
        {"type": "double", "optional": True, "field": "score"},
        {"type": "bytes", "optional": True, "field": "blob"},
        {"type": "string", "optional": True, "field": "note"},
        {"type": "int32", "optional": True, "default": 7, "field": "qty"},
    ],
    "optional": False,
    "name": "row",
}


def _b64(unscaled: int, size: int | None = None) -> str:
    width = size or (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return base64.b64encode(unscaled.to_bytes(width, "big", signed=True)).decode()


def _payload(i: int, **changes: Any) -> dict[str, Any]:
    payload = {"id": i, "amount": _b64(i * 37 - 500), "score": i / 3, "blob": "AAE=", "note": f"n{i}", "qty": i}
    payload.update(changes)
    return payload


def _rows(n: int = 120, **changes: Any) -> list[bytes]:
    return [envelope(ROW, _payload(i, **changes)) for i in range(n)]


def _lines(objects: dict[str, bytes]) -> dict[str, list[Any]]:
    return {key: [orjson.loads(line) for line in data.splitlines()] for key, data in objects.items()}


def _both(batches: list[list[Any]], **config: Any) -> tuple[dict[str, bytes], dict[str, bytes], int]:
    """The objects of the raw and of the decoded path, and how many raw batches were decoded."""
    settings = {**JSON, "flush.size": "50", **config}
    fast, decoded = _objects(batches, raw=True, **settings)
    slow, _ = _objects(batches, raw=False, **settings)
    assert sorted(fast) == sorted(slow) and fast
    assert _lines(fast) == _lines(slow)
    return fast, slow, decoded


def test_envelopes_as_the_converter_writes_them_become_their_payloads_byte_for_byte() -> None:
    """Connect-written envelopes of every logical type (negative decimals, timestamps before 1970
    and after 2038, dates, int16, nulls): no batch decoded, the same bytes as decoding writes."""
    converter = JsonConverter()
    converter.configure({"schemas.enable": "true"}, False)
    schema = Schema.struct(
        [
            ("id", INT64_SCHEMA),
            ("amount", Decimal.schema(2)),
            ("at", Timestamp.SCHEMA),
            ("day", Date.SCHEMA),
            ("qty", INT16_SCHEMA),
            ("note", OPTIONAL_STRING_SCHEMA),
        ],
        name="row",
    )
    values = [
        {
            "id": i,
            "amount": decimal.Decimal((-1) ** i * i * 104_729).scaleb(-2),
            "at": dt.datetime(1900 + i * 3, 1 + i % 12, 1, tzinfo=dt.UTC),  # 1900 to 2197
            "day": dt.date(1950 + i, 1, 1),
            "qty": -32768 + i * 655,
            "note": None if i % 4 == 0 else f"note {i}",
        }
        for i in range(100)
    ]
    raws = converter.from_connect_batch("t", [schema] * 100, values)
    fast, slow, decoded = _both([raws[:60], raws[60:]])  # type: ignore[list-item]
    assert fast == slow
    assert decoded == 0


@pytest.mark.parametrize("seed", range(30))
def test_random_batches_make_the_same_json_values_as_decoded(seed: int) -> None:
    """Every Connect type, nulls, missing members and defaults (``tests/envelope_batches.py``)."""
    rng = random.Random(seed)
    _, raws = random_batch(rng, 400)
    _both([raws[i : i + 100] for i in range(0, 400, 100)], partitions=1 + seed % 2)


@pytest.mark.parametrize("seed", range(30))
def test_random_batches_with_every_member_take_the_fast_path(seed: int) -> None:
    """Every member written (a null as ``null``): no batch decoded, unless a float field holds a
    value beyond ±2^53 (the generator writes 1e300 and 3e38) or a field with a default a null."""
    rng = random.Random(1000 + seed)
    schema = random_schema(rng)
    names = [f["field"] for f in schema["fields"]]
    payloads = [random_payload(rng, schema, null_rate=0.3) for _ in range(400)]
    payloads = [{name: p.get(name) for name in names} for p in payloads]
    _, _, decoded = _both([[envelope(schema, p) for p in payloads[i : i + 100]] for i in range(0, 400, 100)])
    floats = any(f["type"] in ("float", "double") for f in schema["fields"])
    defaults = {f["field"] for f in schema["fields"] if "default" in f}
    replaced = any(p[name] is None for p in payloads for name in defaults)
    assert decoded == 0 or floats or replaced


@pytest.mark.parametrize(
    ("name", "changes", "fast"),
    [
        ("as written", {}, True),
        ("an explicit null in an optional field", {"note": None, "blob": None, "amount": None}, True),
        ("a missing optional member", {"note": ...}, False),
        ("a null where decoding writes the default", {"qty": None}, False),
        ("a member the schema lacks", {"other": 1}, False),
        ("a decimal with a redundant sign byte", {"amount": _b64(5, 3)}, False),
        ("a negative decimal with a redundant sign byte", {"amount": _b64(-5, 2)}, False),
        ("a decimal as a number", {"amount": 1.5}, False),
        ("bytes with stray bits", {"blob": "AAF="}, False),
        ("an integer in a float field beyond 2^53", {"score": 2**53 + 1}, False),
        ("an integer in a float field", {"score": 3}, True),
        ("an int beyond the field's range", {"qty": 2**40}, False),
    ],
)
def test_a_payload_decoding_would_write_otherwise_sends_its_batch_down_the_decoded_path(
    name: str, changes: dict[str, Any], fast: bool
) -> None:
    rows = _rows()
    changed = {k: v for k, v in changes.items() if v is not ...}
    payload = {k: v for k, v in _payload(17, **changed).items() if changes.get(k, 0) is not ...}
    rows[17] = envelope(ROW, payload)
    if name == "an int beyond the field's range":  # decoding refuses it: the runtime's errors.* decide
        with pytest.raises(Exception, match="do not convert"):
            _objects([rows[:60], rows[60:]], raw=True, **JSON, **{"flush.size": "50"})
        return
    _, _, decoded = _both([rows[:60], rows[60:]])
    assert decoded == (0 if fast else 1), name


@pytest.mark.parametrize(
    "spelling",
    [
        lambda p: b'{"schema": ' + orjson.dumps(ROW) + b', "payload": ' + orjson.dumps(p) + b"}",
        lambda p: b'{"payload":' + orjson.dumps(p) + b',"schema":' + orjson.dumps(ROW) + b"}",
        lambda p: orjson.dumps({"schema": ROW, "payload": p}) + b" ",
    ],
)
def test_envelopes_spelled_otherwise_are_decoded(spelling: Any) -> None:
    rows = [spelling(_payload(i)) for i in range(60)]
    _, _, decoded = _both([rows])
    assert decoded == 1


def test_a_schema_change_mid_topic_rotates_as_decoding_does() -> None:
    other = {**ROW, "fields": [*ROW["fields"], {"type": "boolean", "optional": True, "field": "flag"}]}
    first = _rows(30)
    second = [envelope(other, {**_payload(i), "flag": i % 2 == 0}) for i in range(30, 70)]
    mixed = first[20:] + second[:15]  # one batch of two schemas: decoded
    fast, _, decoded = _both([first[:20], mixed, second[15:]], **{"flush.size": "1000"})
    assert decoded == 1
    # The first schema's 30 records, then the second's (the last 25 still in the open object).
    assert [len(lines) for _, lines in sorted(_lines(fast).items())] == [30]


@pytest.mark.parametrize("nulls", ["ignore", "write"])
def test_tombstones_among_envelopes_stay_on_the_fast_path(nulls: str) -> None:
    rows: list[bytes | None] = list(_rows(120))
    rows[5] = rows[33] = rows[34] = None
    _, _, decoded = _both([rows[:25], rows[25:]], **{"behavior.on.null.values": nulls})
    assert decoded == 0


def test_decimals_written_as_numbers_are_decoded() -> None:
    """``json.decimal.format=NUMERIC``: the lines hold numbers, the envelopes base64."""
    fast, _, decoded = _both([_rows()], **{"json.decimal.format": "NUMERIC"})
    assert decoded == 1
    assert _lines(fast)["topics/t/partition=0/t+0+0000000000.json"][3]["amount"] == pytest.approx(-3.89)


def test_payloads_spelled_by_another_producer_keep_their_spelling_and_their_values() -> None:
    """Escapes, exponents, spaces and member order as a non-Connect producer may write them: the
    same JSON values as decoding writes, in the producer's spelling."""
    schema = orjson.dumps(ROW)
    payload = b'{ "qty" : 3, "note":"caf\\u00e9 \\"quoted\\"\\n", "score":1.5E2,"blob":null, "amount":"AQ==", "id":9 }'
    rows = [b'{"schema":' + schema + b',"payload":' + payload + b"}"] * 60
    fast, slow, decoded = _both([rows])
    assert decoded == 0 and fast != slow
    assert next(iter(fast.values())).splitlines()[0] == payload


KEY = {"type": "struct", "fields": [{"type": "int64", "optional": False, "field": "id"}], "optional": False}


def _keyed_objects(
    batches: list[list[tuple[bytes | None, bytes | None]]], *, raw: bool, fmt: str
) -> tuple[dict[str, bytes], list[str]]:
    """The objects (and ``.keys`` sidecars) of keyed batches, put raw as the runtime hands a
    ``raw_typed`` task keys with schemas, or decoded; and which of values and keys were decoded."""
    storage = MemoryStorage("bkt")
    S3SinkTask.storage_factory = lambda cfg: storage
    decoded: list[str] = []

    def batch(pairs: list[tuple[bytes | None, bytes | None]], start: int) -> SinkRecordBatch:
        keys, values = [k for k, _ in pairs], [v for _, v in pairs]
        columns = {"partition": [0] * len(pairs), "kafka_offset": list(range(start, start + len(pairs)))}

        def decode(converter: JsonConverter, raws: list[bytes | None], what: str) -> Any:
            decoded.append(what)
            return converter.to_connect_batch("t", raws)

        if not raw:
            schemas, data = _CONVERTER.to_connect_batch("t", values)
            key_schemas, key_data = _KEYS.to_connect_batch("t", keys)
            return SinkRecordBatch("t", data, schemas, key_data, key_schemas, columns.__getitem__)
        return SinkRecordBatch(
            "t", None, None, None, None, columns.__getitem__,
            raw_values=values, decode=lambda: decode(_CONVERTER, values, "values"),
            raw_format=_CONVERTER.wire_format(),
            raw_keys=keys, decode_keys=lambda: decode(_KEYS, keys, "keys"), raw_key_format=_KEYS.wire_format(),
        )  # fmt: skip

    try:
        task = S3SinkTask()
        settings = {"s3.bucket.name": "bkt", "format.class": fmt, "flush.size": "50", "store.kafka.keys": "true"}
        task.start({**settings, "s3.upload.threads": "0", "behavior.on.null.values": "ignore"}, None)  # type: ignore[arg-type]
        task.open([TopicPartition("t", 0)])
        offset = 0
        for pairs in batches:
            task.put(batch(pairs, offset))
            offset += len(pairs)
        task.stop()
    finally:
        S3SinkTask.storage_factory = None
    return dict(storage.objects), decoded


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_a_keys_sidecar_takes_the_keys_payloads_and_values_stay_raw(fmt: str) -> None:
    pairs: list[tuple[bytes | None, bytes | None]] = [
        (envelope(KEY, {"id": i}), envelope(ROW, _payload(i))) for i in range(120)
    ]
    pairs[10] = (pairs[10][0], None)  # a delete: a tombstone with its key
    pairs[11] = (None, pairs[11][1])  # a value without a key
    batches = [pairs[:60], pairs[60:]]
    fast, decoded = _keyed_objects(batches, raw=True, fmt=fmt)
    slow, _ = _keyed_objects(batches, raw=False, fmt=fmt)
    assert fast == slow and len(fast) == 4  # two objects, two sidecars
    assert decoded == []
    assert fast["topics/t/partition=0/t+0+0000000000.keys.json"].splitlines()[10:12] == [b"null", b'{"id":12}']


def test_keys_the_sidecar_cannot_copy_are_decoded_and_values_stay_raw() -> None:
    """Keys of a struct the payload spells with a member too many: decoded for the sidecar only."""
    pairs: list[tuple[bytes | None, bytes | None]] = [
        (envelope(KEY, {"id": i, **({"x": 1} if i == 3 else {})}), envelope(ROW, _payload(i))) for i in range(60)
    ]
    fast, decoded = _keyed_objects([pairs], raw=True, fmt="json")
    slow, _ = _keyed_objects([pairs], raw=False, fmt="json")
    assert fast == slow and decoded == ["keys"]


def test_named_schemas_of_primitive_types_are_checked_by_their_type() -> None:
    """Debezium's time types are int64 and string schemas with names of their own."""
    schema = {
        "type": "struct",
        "fields": [
            {"type": "int64", "optional": False, "name": "io.debezium.time.MicroTimestamp", "version": 1, "field": "at"},
            {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp", "version": 1, "field": "z"},
        ],
        "optional": False,
        "name": "row",
    }
    rows = [envelope(schema, {"at": 1_700_000_000_000_000 + i, "z": "2024-01-01T00:00:00Z"}) for i in range(60)]
    _, _, decoded = _both([rows])
    assert decoded == 0
