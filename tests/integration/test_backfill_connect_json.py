"""The backfill's Spark SQL serialization, run on real Spark, against the streaming JsonConverter.

Each value goes through both: the expression :mod:`sluice.connectors.backfill.connect_json` builds,
evaluated by Spark, and :class:`sluice.converters.json.JsonConverter` on the same Connect value. The bytes
must be equal. The cases are the ones where an encoding can go wrong: every byte width of a
decimal's two's-complement unscaled value, both sides of each boundary, and nulls.
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any

import pytest

from sluice.connectors.api import BOOLEAN_SCHEMA, INT32_SCHEMA, INT64_SCHEMA, Schema
from sluice.connectors.api.schema import Date, Decimal, Timestamp
from sluice.connectors.backfill.connect_json import ColumnSpec, record_expression
from sluice.converters.json import JsonConverter

pytestmark = pytest.mark.integration


def _unscaled_cases() -> list[int]:
    cases = {0, 1, -1, 10**18 - 1, -(10**18 - 1)}
    for n in range(1, 8):  # the largest and smallest values of n bytes, and one past each
        top = 2 ** (8 * n - 1)
        cases |= {top - 1, top, -top, -top - 1}
    return sorted(cases)


def _converter(schemas: bool) -> JsonConverter:
    converter = JsonConverter()
    converter.configure({"schemas.enable": schemas}, False)
    return converter


def _spark_bytes(spark: Any, rows: list[tuple[Any, ...]], ddl: str, columns: list[ColumnSpec], schema_json: bytes | None) -> list[bytes]:
    frame = spark.createDataFrame(rows, ddl).repartition(1).sortWithinPartitions("id")
    return [bytes(row[0]) for row in frame.selectExpr(f"{record_expression(columns, schema_json)} AS v").collect()]


@pytest.mark.parametrize("schemas", [False, True], ids=["plain", "envelope"])
def test_decimals_of_every_width_are_the_bytes_connect_writes(spark_provider: Any, schemas: bool) -> None:
    spark = spark_provider.session()
    amount = Decimal.schema(2, precision=18, optional=True)
    schema = Schema.struct([("id", INT64_SCHEMA), ("amount", amount)], name="amounts")
    columns = [ColumnSpec("id", INT64_SCHEMA), ColumnSpec("amount", amount)]
    values = [decimal.Decimal(u).scaleb(-2) for u in _unscaled_cases()] + [None]
    rows = [(i, v) for i, v in enumerate(values)]
    converter = _converter(schemas)
    schema_json = converter.as_json_schema(schema) if schemas else None

    got = _spark_bytes(spark, rows, "id BIGINT, amount DECIMAL(18,2)", columns, schema_json)

    expected = [converter.from_connect_data("t", schema, {"id": i, "amount": v}) for i, v in rows]
    assert len(got) == len(values) == 34
    for i, (ours, theirs) in enumerate(zip(got, expected, strict=True)):
        assert ours == theirs, (values[i], ours, theirs)


def test_structs_of_numbers_and_booleans_are_the_bytes_connect_writes(spark_provider: Any) -> None:
    """Keys are usually such structs; they are built as text without Spark's JSON writer."""
    spark = spark_provider.session()
    fields = [
        ("id", INT64_SCHEMA),
        ("n", INT32_SCHEMA.as_optional()),
        ("flag", BOOLEAN_SCHEMA.as_optional()),
        ("day", Date.OPTIONAL_SCHEMA),
        ("at", Timestamp.OPTIONAL_SCHEMA),
        ('say "hi"', INT32_SCHEMA.as_optional()),
    ]
    schema = Schema.struct(fields, name="keys")
    columns = [ColumnSpec(name, s) for name, s in fields]
    at = dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=dt.UTC)
    rows = [
        (-(2**63), -(2**31), True, dt.date(1969, 12, 31), at, 0),
        (2**63 - 1, 2**31 - 1, False, dt.date(2024, 2, 29), dt.datetime(2024, 3, 1, 12, 34, 56, 789000, tzinfo=dt.UTC), -7),
        (0, None, None, None, None, None),
    ]
    converter = _converter(True)
    schema_json = converter.as_json_schema(schema)

    ddl = "id BIGINT, n INT, flag BOOLEAN, day DATE, at TIMESTAMP, `say \"hi\"` INT"
    got = _spark_bytes(spark, rows, ddl, columns, schema_json)

    expected = [converter.from_connect_data("t", schema, dict(zip([f for f, _ in fields], row, strict=True))) for row in rows]
    assert sorted(got) == sorted(expected)  # type: ignore[type-var]
    assert b'"payload":{"id":0,"n":null,"flag":null,"day":null,"at":null,"say \\"hi\\"":null}' in b"".join(got)
