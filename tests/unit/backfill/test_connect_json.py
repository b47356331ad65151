"""The Spark SQL that serializes rows as Connect's JsonConverter (checked as text; the byte-for-byte
comparison with the streaming source is an integration test)."""

from __future__ import annotations

import pytest

from sluice.connectors.api import BOOLEAN_SCHEMA, INT32_SCHEMA, INT64_SCHEMA, STRING_SCHEMA, ConfigError, Schema
from sluice.connectors.api.schema import Date, Decimal, Timestamp
from sluice.connectors.backfill.connect_json import ColumnSpec, column_expression, payload_expression, record_expression


def test_logical_types_become_what_connect_writes() -> None:
    assert column_expression(ColumnSpec("ts", Timestamp.SCHEMA)) == "unix_millis(CAST(`ts` AS TIMESTAMP))"
    assert column_expression(ColumnSpec("d", Date.SCHEMA)) == "unix_date(CAST(`d` AS DATE))"
    local = column_expression(ColumnSpec("ts", Timestamp.SCHEMA, naive_timestamp=True), db_timezone="Europe/Paris")
    assert local == "unix_millis(to_utc_timestamp(`ts`, 'Europe/Paris'))"


def test_decimals_are_base64_of_the_unscaled_value_or_numeric() -> None:
    schema = Decimal.schema(2, precision=12)
    base64 = column_expression(ColumnSpec("amount", schema))
    assert "base64(" in base64 and "* 100 AS BIGINT" in base64
    assert column_expression(ColumnSpec("amount", schema), decimal_format="NUMERIC") == "CAST(`amount` AS DECIMAL(12,2))"


def test_wide_decimals_in_base64_are_refused_with_the_key_to_change() -> None:
    with pytest.raises(ConfigError) as info:
        column_expression(ColumnSpec("big", Decimal.schema(0, precision=30)))
    assert info.value.key == "value.converter.decimal.format"


def test_the_envelope_wraps_the_payload_and_keeps_nulls() -> None:
    columns = [ColumnSpec("id", INT32_SCHEMA), ColumnSpec("it's", STRING_SCHEMA.as_optional())]
    sql = record_expression(columns, b'{"type":"struct"}')
    assert sql.startswith("CAST(concat('{\"schema\":{\"type\":\"struct\"},\"payload\":', to_json(named_struct('id', ")
    assert "'it\\'s', CAST(`it's` AS STRING)" in sql
    assert "map('ignoreNullFields', 'false')" in sql
    assert record_expression(columns, None).startswith("CAST(to_json(")


def test_numbers_and_booleans_are_concatenated_without_a_json_writer() -> None:
    columns = [ColumnSpec("id", INT64_SCHEMA), ColumnSpec('say "hi"', BOOLEAN_SCHEMA.as_optional()), ColumnSpec("at", Timestamp.SCHEMA)]
    sql = payload_expression(columns)
    assert "to_json" not in sql
    # Field names are JSON text inside Spark SQL literals: the quote escaped for JSON, then the
    # backslash escaped for Spark's parser.
    assert sql == (
        r"""concat('{"id":', coalesce(CAST(CAST(`id` AS BIGINT) AS STRING), 'null'), """
        r"""',"say \\"hi\\"":', coalesce(CAST(CAST(`say "hi"` AS BOOLEAN) AS STRING), 'null'), """
        r"""',"at":', coalesce(CAST(unix_millis(CAST(`at` AS TIMESTAMP)) AS STRING), 'null'), '}')"""
    )
    # One text column and the row goes through to_json, which escapes it.
    assert payload_expression([*columns, ColumnSpec("name", STRING_SCHEMA)]).startswith("to_json(")


def test_unsupported_types_name_the_column() -> None:
    nested = Schema.map(STRING_SCHEMA, STRING_SCHEMA)
    with pytest.raises(ConfigError, match="column 'tags'"):
        column_expression(ColumnSpec("tags", nested))
