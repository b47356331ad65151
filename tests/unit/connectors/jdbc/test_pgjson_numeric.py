"""Decimal columns as COPY binary ``numeric`` fields (``connectors/sink/jdbc/pgjson.py``): the
whole-column NumPy rendering writes exactly the bytes of the value-by-value one, which
``tests/integration/test_jdbc_sink_envelope.py`` checks against PostgreSQL."""

from __future__ import annotations

import decimal
import random

import pyarrow as pa
import pytest

from sluice.connectors.sink.jdbc.pgjson import _NULL_FIELD, _numeric_field, _numeric_fields, _short_numeric_fields


def _one_by_one(values: list[decimal.Decimal | None]) -> list[bytes]:
    return [_NULL_FIELD if v is None else _numeric_field(v) for v in values]


def _values(rng: random.Random, precision: int, scale: int) -> list[decimal.Decimal | None]:
    top = 10**precision - 1
    unscaled = [0, 1, -1, top, -top, 10_000, -10_000, 10**scale, 9999, 10 ** (precision // 2)]
    unscaled += [rng.randint(-top, top) for _ in range(200)]
    unscaled += [rng.randint(-999, 999) * 10 ** rng.randint(0, max(0, precision - 3)) for _ in range(100)]
    values: list[decimal.Decimal | None] = [decimal.Decimal(f"{u}E-{scale}") for u in unscaled if abs(u) <= top]
    return values + [None, values[3], None]


@pytest.mark.parametrize(("precision", "scale"), [(1, 0), (5, 0), (9, 4), (12, 2), (15, 5), (18, 0), (17, 3), (16, 16)])
def test_short_decimals_render_at_once_exactly_as_one_by_one(precision: int, scale: int) -> None:
    values = _values(random.Random(precision * 100 + scale), precision, scale)
    column = pa.array(values, pa.decimal128(precision, scale))
    rendered = _short_numeric_fields(column)
    assert rendered is not None
    assert rendered.to_pylist() == _one_by_one(values)
    window = column.slice(5, 40)  # an array that starts inside its buffers
    assert _short_numeric_fields(window).to_pylist() == _one_by_one(values[5:45])


@pytest.mark.parametrize(("precision", "scale"), [(19, 2), (38, 10), (18, 5)])
def test_longer_decimals_render_one_by_one(precision: int, scale: int) -> None:
    """Past 18 digits once the scale is rounded up to whole base-10000 digits (18 with scale 5
    aligns to 21): value by value, with the same bytes."""
    top = 10**precision - 1
    values = [decimal.Decimal(f"{u}E-{scale}") for u in (top, -top, 0, 12_345)]
    column = pa.array([*values, None], pa.decimal128(precision, scale))
    assert _short_numeric_fields(column) is None
    assert _numeric_fields(column).to_pylist() == _one_by_one([*values, None])
