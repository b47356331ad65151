"""Base64 Decimals read at once (``converters/connect_arrow.py``): the NumPy decoder gives exactly
what decoding value by value gives, and leaves every batch it is not sure of to that decoder."""

from __future__ import annotations

import base64
import decimal
import random

import pyarrow as pa
import pytest

from sluice.converters.connect_arrow import _decimal_of, _from_base64, _short_decimals


def _one_by_one(column: pa.Array, kind: pa.DataType) -> pa.Array | None:
    return _from_base64(column, _decimal_of(kind.scale, kind.precision), kind)


def _encoded(unscaled: int) -> str:
    size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1  # as Java's toByteArray
    return base64.b64encode(unscaled.to_bytes(size, "big", signed=True)).decode()


@pytest.mark.parametrize(("precision", "scale"), [(5, 0), (12, 2), (18, 4), (38, 10)])
def test_canonical_short_values_decode_at_once_as_one_by_one(precision: int, scale: int) -> None:
    rng = random.Random(precision)
    top = min(10**precision - 1, 2**63 - 1)
    unscaled = [0, 1, -1, 127, 128, -128, -129, 255, 256, top, -top, *(rng.randint(-top, top) for _ in range(300))]
    texts = [_encoded(u) for u in unscaled] + [None, "AA==", None]
    kind = pa.decimal128(precision, scale)
    column = pa.array(texts, pa.string())
    short = _short_decimals(column, kind)
    assert short is not None
    assert short.to_pylist() == _one_by_one(column, kind).to_pylist()
    assert short.to_pylist()[:3] == [
        decimal.Decimal(0).scaleb(-scale),
        *(decimal.Decimal(u).scaleb(-scale) for u in (1, -1)),
    ]
    window = column.slice(7, 50)
    assert _short_decimals(window, kind).to_pylist() == _one_by_one(window, kind).to_pylist()


def test_anything_else_is_left_to_the_value_by_value_decoder() -> None:
    kind = pa.decimal128(10, 2)
    for text in ["", "A", "AAA", "AA=A", "A===", "====", "=AAA", "AAA=A===", "AB==", "AAB=", "AA-_", "AA A",
                 "QUFBQUFBQUFB", "QUFBQUFBQUFBQUE=", "f/////////8=", _encoded(10**10), "AAAAAAAAAAAAAAAA"]:  # fmt: skip
        column = pa.array(["AQ==", text], pa.string())
        short = _short_decimals(column, kind)
        assert short is None, text


def test_random_strings_decode_exactly_or_not_at_all() -> None:
    rng = random.Random(3)
    kind = pa.decimal128(18, 3)
    alphabet = "ABCZabz09+/=-_ \n"
    taken = 0
    for _ in range(3000):
        if rng.random() < 0.5:
            text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 14)))
        else:
            text = base64.b64encode(rng.randbytes(rng.randrange(1, 10))).decode()
        column = pa.array([text], pa.string())
        short = _short_decimals(column, kind)
        if short is None:
            continue
        taken += 1
        assert short.to_pylist() == _one_by_one(column, kind).to_pylist(), text
    assert taken > 1000
