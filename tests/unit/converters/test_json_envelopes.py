"""The native parser's envelope mode (``sluice_native.parse_json_envelopes`` via
:func:`sluice.converters.json_arrow.read_envelopes`): payload columns, each distinct schema once."""

from __future__ import annotations

import random

import orjson
import pytest

from sluice.converters import json_arrow
from tests.unavailable import unavailable

if not json_arrow.available():
    unavailable("the native parser (sluice_native) is not installed: `make setup` builds it from native/ (needs cargo)", allow_module_level=True)

S1 = {"type": "struct", "fields": [{"type": "int64", "optional": False, "field": "a"}], "optional": False}
S2 = {**S1, "name": "other"}


def _env(schema: object, payload: object) -> bytes:
    return orjson.dumps({"schema": schema, "payload": payload})


def test_payloads_become_columns_and_schemas_come_once_each() -> None:
    raws = [_env(S1, {"a": 1, "b": "x"}), _env(S1, {"a": 2}), _env(S2, {"a": 3}), _env(S1, {"a": 4})]
    read = json_arrow.read_envelopes(raws)
    assert read is not None
    assert read.table.to_pylist() == [{"a": 1, "b": "x"}, {"a": 2, "b": None}, {"a": 3, "b": None}, {"a": 4, "b": None}]
    assert [orjson.loads(s) for s in read.schemas] == [S1, S2]
    assert read.schema_of_row.tolist() == [0, 0, 1, 0]


def test_the_members_may_come_in_either_order_with_whitespace() -> None:
    raws = [b' { "payload" : {"a": 1} , "schema" : {"type": "struct", "fields": []} } ', _env(S1, {"a": 2})]
    read = json_arrow.read_envelopes(raws)
    assert read is not None and read.table.column("a").to_pylist() == [1, 2]
    assert len(read.schemas) == 2


@pytest.mark.parametrize(
    "raw",
    [
        b'{"schema":{},"payload":{"a":1},"extra":1}',  # a third member
        b'{"schema":{},"payload":{"a":1},"payload":{"a":2}}',
        b'{"schema":{},"schema":{},"payload":{"a":1}}',
        b'{"schema":{}}',
        b'{"payload":{"a":1}}',
        b'{"schema":{},"payload":null}',  # a null payload: the converter decides
        b'{"schema":{},"payload":[1]}',
        b'{"schema":{},"payload":{"a":{"b":1}}}',  # nested
        b'{"schema":{},"payload":{"a":1}} x',
        b'{"sch\\u0065ma":{},"payload":{"a":1}}',  # an escaped member name
        b'{"schema":{"a":"\xff"},"payload":{"a":1}}',  # invalid UTF-8 in the schema
        b'{"schema":{"a":[1,},"payload":{"a":1}}',
        b"null",
    ],
)
def test_what_is_not_an_envelope_of_a_flat_payload_refuses_the_batch(raw: bytes) -> None:
    assert json_arrow.read_envelopes([_env(S1, {"a": 0}), raw]) is None


def test_a_schema_that_only_starts_like_the_last_one_is_read_whole() -> None:
    first = b'{"schema":{"type":"int64"},"payload":{"a":1}}'
    longer = b'{"schema":{"type":"int64"}  ,"payload":{"a":2}}'
    read = json_arrow.read_envelopes([first, longer])
    assert read is not None and [bytes(s) for s in read.schemas] == [b'{"type":"int64"}']
    assert json_arrow.read_envelopes([first, b'{"schema":{"type":"int64"}}x,"payload":{"a":2}}']) is None


@pytest.mark.parametrize("seed", range(20))
def test_random_payloads_read_as_orjson_reads_them(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.choice([0, -5, 2**62, 1.5, -0.0, True, None, "", 'é\n"', "x" * rng.randrange(30)]) for _ in range(40)]
    payloads = [
        {f"k{j}": values[(i * 7 + j) % 40] for j in range(rng.randrange(1, 5)) if rng.random() < 0.8} for i in range(50)
    ]
    raws = [_env(S1 if i % 3 else S2, p) for i, p in enumerate(payloads)]
    plain = json_arrow.read_flat_objects([orjson.dumps(p) for p in payloads])
    read = json_arrow.read_envelopes(raws)
    if plain is None:
        assert read is None or read.table is None
    else:
        assert read is not None and read.table.equals(plain)
