"""The JSON → COPY fast path of the JDBC sink (``connectors/sink/jdbc/pgjson.py``), without a database.

What lands in PostgreSQL is compared with the ordinary path in
``tests/integration/test_jdbc_sink_json.py``; these tests pin the COPY data and the cases refused,
with each of the two parsers: the native one (``converters/json_arrow.py``) and pyarrow's JSON
reader, which the sink uses when the native one is not installed.
"""

from __future__ import annotations

import struct

import orjson
import pytest

from sluice.connectors.sink.jdbc.pgjson import read_json_lines
from tests.json_parsers import parser_fixture  # noqa: F401 - every test runs with each parser

TEXT = {"a": "text", "b": "text"}


def test_strings_are_quoted_and_nulls_are_empty() -> None:
    parsed = read_json_lines([b'{"a":"x","b":""}', b'{"a":null,"b":"q\\"u,o\\nte"}', b'{"b":"\xc3\xa9"}'])
    assert parsed is not None
    assert parsed.csv(["a", "b"], TEXT) == b'"x",""\n,"q""u,o\nte"\n,"\xc3\xa9"\n'


def test_numbers_and_booleans_by_column_type() -> None:
    parsed = read_json_lines([b'{"i":1,"d":2.5,"b":true}', b'{"i":-7,"d":1e22,"b":false}'])
    assert parsed is not None
    types = {"i": "int8", "d": "float8", "b": "bool"}
    assert parsed.csv(["i", "d", "b"], types) == b"1,2.5,true\n-7,1e+22,false\n"
    assert parsed.csv(["b"], {"b": "text"}) is None  # the ordinary path writes t/f
    assert parsed.csv(["d"], {"d": "numeric"}) is None  # the ordinary path writes orjson's text
    assert parsed.csv(["i"], {"i": "text"}) == b"1\n-7\n"  # integers: the same digits either way
    assert parsed.csv(["i"], {}) is None  # a column of unknown type


def test_iso_strings_stay_text() -> None:
    parsed = read_json_lines([b'{"t":"2024-01-01T10:00:00","d":"2024-01-01"}'])
    assert parsed is not None
    assert parsed.csv(["t", "d"], {"t": "timestamptz", "d": "text"}) == b'"2024-01-01T10:00:00","2024-01-01"\n'


def test_the_integer_minus_zero_is_zero_or_refused_in_double_columns(parser: str) -> None:
    """orjson reads the integer ``-0`` as 0; Arrow's reader, in a double column, as -0.0."""
    parsed = read_json_lines([b'{"d":-0}', b'{"d":0.5}'])
    assert parsed is not None
    assert parsed.csv(["d"], {"d": "float8"}) == (b"0\n0.5\n" if parser == "native" else None)


@pytest.mark.parametrize(
    "raws",
    [
        [b'{"a":1}', None],  # a tombstone
        [b'{"a":1}', b'{"a":"x"}'],  # one field, two types
        [b'{"a":1,"a":2}'],  # a duplicate key
        [b"[1,2]"],  # not an object
        [b"{}"],  # no fields at all
        [],
    ],
)
def test_batches_refused(raws: list[bytes | None]) -> None:
    assert read_json_lines(raws) is None


@pytest.mark.parametrize("raw", [b'{"a":1,\n"b":"x"}', b'{"a":1,"b":"\\ud83d\\ude80"}'])
def test_whitespace_and_surrogate_pairs_are_read_or_refused(parser: str, raw: bytes) -> None:
    """The native parser reads them as orjson does; with Arrow's reader (newlines split values,
    surrogate escapes decode differently) the batch goes the ordinary way."""
    parsed = read_json_lines([raw])
    if parser == "arrow":
        assert parsed is None
    else:
        assert parsed is not None
        assert parsed.table.to_pylist() == [orjson.loads(raw)]


def test_nested_values_are_refused(parser: str) -> None:
    parsed = read_json_lines([b'{"a":{"b":1},"c":[1]}'])
    if parser == "native":
        assert parsed is None
        return
    assert parsed is not None
    assert parsed.csv(["a"], {"a": "jsonb"}) is None
    assert parsed.csv(["c"], {"c": "jsonb"}) is None


def test_unique_keys() -> None:
    parsed = read_json_lines([b'{"k":1,"j":"a"}', b'{"k":2,"j":"a"}', b'{"k":1,"j":"b"}'])
    assert parsed is not None
    assert not parsed.unique(["k"])
    assert parsed.unique(["k", "j"])
    assert not parsed.unique(["j"])


def _binary_rows(data: bytes) -> list[list[bytes | None]]:
    """COPY binary data read back field by field (the format PostgreSQL documents)."""
    assert data.startswith(b"PGCOPY\n\xff\r\n\x00" + bytes(8)) and data.endswith(b"\xff\xff")
    body, rows, at = data[19:-2], [], 0
    while at < len(body):
        count = int.from_bytes(body[at : at + 2], "big", signed=True)
        at += 2
        row: list[bytes | None] = []
        for _ in range(count):
            size = int.from_bytes(body[at : at + 4], "big", signed=True)
            at += 4
            row.append(None if size < 0 else body[at : at + size])
            at += max(size, 0)
        rows.append(row)
    return rows


def test_binary_rows_hold_each_value_in_network_order() -> None:
    parsed = read_json_lines(
        [
            b'{"i":1,"s":"x","d":2.5,"b":true,"q":7,"n":null}',
            b'{"i":-2,"s":null,"d":null,"b":null,"q":-32768,"n":null}',
            b'{"i":9007199254740993,"s":"\xc3\xa9\\n","d":-1e-300,"b":false,"q":32767,"n":null}',
        ]
    )
    assert parsed is not None
    types = {"i": "int8", "s": "varchar", "d": "float8", "b": "bool", "q": "int2", "n": "numeric"}
    data = parsed.binary(["i", "s", "d", "b", "q", "n"], types)
    assert data is not None
    assert _binary_rows(data) == [
        [(1).to_bytes(8, "big"), b"x", struct.pack(">d", 2.5), b"\x01", (7).to_bytes(2, "big"), None],
        [(-2).to_bytes(8, "big", signed=True), None, None, None, (-32768).to_bytes(2, "big", signed=True), None],
        [
            (2**53 + 1).to_bytes(8, "big"),
            "é\n".encode(),
            struct.pack(">d", -1e-300),
            b"\x00",
            (32767).to_bytes(2, "big"),
            None,
        ],
    ]
    copy = parsed.copy_data(["i", "s"], types)
    assert copy is not None and copy[1] == " (FORMAT binary)"
    assert _binary_rows(copy[0]) == [row[:2] for row in _binary_rows(data)]


@pytest.mark.parametrize(
    ("raws", "types"),
    [
        ([b'{"v":2147483648}'], {"v": "int4"}),  # out of range: the server's error, from the CSV path
        ([b'{"v":-32769}'], {"v": "int2"}),
        ([b'{"v":1}'], {"v": "float8"}),  # an integer into a double column: CSV sends the digits
        ([b'{"v":1}'], {"v": "numeric"}),
        ([b'{"v":"2024-01-01"}'], {"v": "date"}),  # strings into other types are parsed by the server
        ([b'{"v":1.5}'], {"v": "float4"}),
    ],
)
def test_binary_refuses_what_it_cannot_send_exactly(raws: list[bytes], types: dict[str, str]) -> None:
    parsed = read_json_lines(raws)
    assert parsed is not None
    assert parsed.binary(["v"], types) is None
    copy = parsed.copy_data(["v"], types)
    assert copy is None or copy[1] == " (FORMAT csv)"


def test_the_integer_minus_zero_in_binary_data(parser: str) -> None:
    """Binary data holds 0.0 for the native parser's 0; Arrow's -0.0 is refused, as for CSV."""
    parsed = read_json_lines([b'{"v":-0}', b'{"v":0.5}'])
    assert parsed is not None
    data = parsed.binary(["v"], {"v": "float8"})
    if parser == "arrow":
        assert data is None
    else:
        assert data is not None and _binary_rows(data) == [[struct.pack(">d", 0.0)], [struct.pack(">d", 0.5)]]


@pytest.mark.parametrize(
    "bad",
    [
        b'{"a":NaN}',
        b'{"a":-Infinity}',
        b'{"s":"\xff\xfe"}',  # invalid UTF-8, which Arrow's reader keeps
        b'{"s":"\xed\xa0\x80"}',  # an encoded surrogate
        b'{"a":1,}',
        b'{"a":1}{"a":2}',
        b'{"a":01}',
        b'{"a":1',
        b"",
    ],
)
def test_values_the_converter_refuses_are_refused_unchecked(bad: bytes) -> None:
    """The task gets its values without the converter's check: what orjson refuses, the fast path
    must refuse too (the batch then goes to the converter, which reports the bad record)."""
    with pytest.raises(ValueError):
        orjson.loads(bad)
    assert read_json_lines([b'{"a":1.5,"s":"x"}', bad, b'{"a":2.5,"s":"y"}']) is None


def test_nulls_in_a_double_column_are_no_reason_to_refuse() -> None:
    parsed = read_json_lines([b'{"a":1.5}', b'{"a":null}'])
    assert parsed is not None
    assert parsed.table.column("a").to_pylist() == [1.5, None]
