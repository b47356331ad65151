"""The native flat-JSON parser (``native/``, ``converters/json_arrow.py``) against orjson.

Whatever it reads must be exactly what orjson (the JsonConverter) reads, value for value and
bit for bit; whatever orjson refuses, it must refuse too. Six thousand random batches built to
hit the corners (escapes, surrogate pairs, number forms, whitespace, missing and null members,
mixed types) check both directions.
"""

from __future__ import annotations

import json
import math
import random
import struct
from typing import Any

import orjson
import pytest

from sluice.converters import json_arrow
from tests.json_parsers import require_native


@pytest.fixture(autouse=True)
def _native() -> None:
    require_native()


def expected_columns(raws: list[bytes]) -> dict[str, list[Any]] | None:
    """What the parser must return, worked out from orjson: ``None`` where it must refuse."""
    try:
        values = [orjson.loads(raw) for raw in raws]
    except orjson.JSONDecodeError:
        return None
    if not values or not all(isinstance(v, dict) for v in values):
        return None
    if any(_has_duplicate_keys(raw) for raw in raws):
        return None  # orjson keeps the last; the parser refuses rather than guess
    names: list[str] = []
    for value in values:
        names += [k for k in value if k not in names]
    if not names:
        return None
    columns: dict[str, list[Any]] = {}
    for name in names:
        column = [value.get(name) for value in values]
        present = [v for v in column if v is not None]
        kinds = {type(v) for v in present}
        if kinds <= {int, float} and kinds:
            if any(type(v) is int and not -(2**63) <= v < 2**63 for v in present):
                return None
            if float in kinds:
                column = [None if v is None else float(v) for v in column]
        elif len(kinds) > 1 or kinds & {dict, list}:
            return None
        columns[name] = column
    return columns


def _has_duplicate_keys(raw: bytes) -> bool:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        if len({k for k, _ in items}) != len(items):
            raise KeyError("duplicate")
        return dict(items)

    try:
        json.loads(raw, object_pairs_hook=pairs)
    except KeyError:
        return True
    return False


def parsed_columns(raws: list[bytes]) -> dict[str, list[Any]] | None:
    table = json_arrow.read_flat_objects(raws)
    if table is None:
        return None
    assert table.num_rows == len(raws)
    return {name: table.column(name).to_pylist() for name in table.column_names}


def same(a: dict[str, list[Any]] | None, b: dict[str, list[Any]] | None) -> bool:
    """Equal, with doubles compared by their bits (so -0.0 differs from 0.0) and column order checked."""
    if a is None or b is None:
        return a is b
    if list(a) != list(b):
        return False
    for name in a:
        for x, y in zip(a[name], b[name], strict=True):
            if type(x) is not type(y):
                return False
            if isinstance(x, float) and struct.pack("<d", x) != struct.pack("<d", y):
                return False
            if not isinstance(x, float) and x != y:
                return False
    return True


_STRINGS = [
    '"plain"',
    '""',
    '"\\"q\\\\b\\/"',
    '"\\b\\f\\n\\r\\t"',
    '"\\u00e9\\u4e2d"',
    '"\\ud83d\\ude80"',
    '"é中🚀"',
    '"\\ud800"',
    '"\\udc00x"',
    '"\\ud800\\u0041"',
    '"a\\x"',
    '"\\u12"',
    '"tab\there"',
    '"a\x7f"',
    '"ends with backslash\\\\"',
    '"0123456789abcdef0123456789"',
]
_NUMBERS = [
    "0",
    "-0",
    "7",
    "-42",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "18446744073709551616",
    "1.5",
    "-0.0",
    "2.5e3",
    "1E-7",
    "1e400",
    "-1e400",
    "1e-400",
    "0.1",
    "01",
    "1.",
    ".5",
    "-",
    "1e",
    "+1",
    "3.141592653589793238462643",
    "123456789012345678901234567890",
]
_OTHERS = ["true", "false", "null", "nul", "True", "NaN", "Infinity", "[]", "{}", '{"x":1}', "[1]"]
_SPACES = ["", " ", "\n", "\t", "\r\n "]


def random_value(rng: random.Random) -> str:
    pool = rng.choice((_STRINGS, _NUMBERS, _OTHERS, _NUMBERS[:12], ["null"]))
    return rng.choice(pool)


def random_object(rng: random.Random, keys: list[str]) -> bytes:
    space = lambda: rng.choice(_SPACES) if rng.random() < 0.2 else ""  # noqa: E731
    members = [
        f"{space()}{orjson.dumps(k).decode()}{space()}:{space()}{random_value(rng)}{space()}"
        for k in rng.sample(keys, rng.randint(0, len(keys)))
    ]
    if rng.random() < 0.03 and members:
        members.append(members[0])  # a duplicate key
    text = "{" + ",".join(members) + "}"
    if rng.random() < 0.02:
        text = rng.choice(["[1]", "1", text + "x", text[:-1], text + " ", " " + text, '"s"', ""])
    return text.encode()


def typed_batch(rng: random.Random) -> list[bytes]:
    """A batch in which each member keeps one kind of value, as real topics do."""
    kinds = {
        k: rng.choice((_STRINGS[:7] + _STRINGS[10:], _NUMBERS[:12] + _NUMBERS[13:], ["true", "false"], ["null"]))
        for k in ("id", "name", "é", 'a\\"b', "n")
    }
    out = []
    for _ in range(rng.randint(1, 20)):
        members = [
            f"{orjson.dumps(k).decode()}:{rng.choice(pool) if rng.random() > 0.1 else 'null'}"
            for k, pool in kinds.items()
            if rng.random() > 0.1
        ]
        out.append(("{" + ",".join(members) + "}").encode())
    return out


def test_random_batches_read_exactly_as_orjson_reads_them() -> None:
    rng = random.Random(20261123)
    read = refused = 0
    for i in range(6000):
        raws = typed_batch(rng) if i % 2 else [random_object(rng, ["a", "b", "c"]) for _ in range(rng.randint(1, 5))]
        expected, got = expected_columns(raws), parsed_columns(raws)
        assert same(got, expected), (raws, got, expected)
        read += got is not None
        refused += got is None
    assert read > 500 and refused > 500  # both directions were exercised


@pytest.mark.parametrize(
    "raw",
    [
        b'{"s":"\xff\xfe"}',  # invalid UTF-8
        b'{"s":"\xed\xa0\x80"}',  # a surrogate encoded in UTF-8
        b'{"s":"\xc3"}',  # a truncated sequence
        b'{"s":"a\x00"}',  # a raw control character
        b'{"a":NaN}',
        b'{"a":1,}',
        b'{"a":1}{"a":2}',
        b'{"a":1',
        b"",
        b"\xef\xbb\xbf{}",  # a byte order mark
    ],
)
def test_what_orjson_refuses_is_refused(raw: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    assert json_arrow.read_flat_objects([b'{"a":1}', raw]) is None


def test_columns_have_arrow_types_and_nulls() -> None:
    table = json_arrow.read_flat_objects([b'{"i":1,"d":0.5,"b":true,"s":"x","n":null}', b'{"d":2,"b":false}'])
    assert table is not None
    assert [str(t) for t in table.schema.types] == ["int64", "double", "bool", "string", "null"]
    assert table.to_pylist() == [
        {"i": 1, "d": 0.5, "b": True, "s": "x", "n": None},
        {"i": None, "d": 2.0, "b": False, "s": None, "n": None},
    ]
    assert table.column("i").null_count == 1


def test_integers_keep_every_bit_and_minus_zero_is_zero() -> None:
    table = json_arrow.read_flat_objects([b'{"i":9007199254740993,"z":-0}', b'{"i":-9223372036854775808,"z":0}'])
    assert table is not None
    assert table.column("i").to_pylist() == [2**53 + 1, -(2**63)]
    assert table.column("z").to_pylist() == [0, 0]


def test_doubles_are_correctly_rounded() -> None:
    texts = ["0.1", "2.2250738585072011e-308", "4.9e-324", "1.7976931348623157e308", "9007199254740993.0", "-0.0"]
    table = json_arrow.read_flat_objects([f'{{"d":{t}}}'.encode() for t in texts])
    assert table is not None
    got = table.column("d").to_pylist()
    assert [struct.pack("<d", v) for v in got] == [struct.pack("<d", float(t)) for t in texts]
    assert math.copysign(1, got[-1]) == -1


def test_a_large_batch_is_read_whole() -> None:
    raws = [orjson.dumps({"id": i, "name": f"n{i}", "v": i / 3, "ok": i % 2 == 0}) for i in range(50_000)]
    table = json_arrow.read_flat_objects(raws)
    assert table is not None
    assert table.to_pylist() == [orjson.loads(r) for r in raws]


@pytest.mark.parametrize("raws", [[], [b"{}"], [b"{}", b"{ }"], [b'{"a":1}', None]])
def test_batches_without_columns_or_with_tombstones_are_refused(raws: list[Any]) -> None:
    assert json_arrow.read_flat_objects(raws) is None
